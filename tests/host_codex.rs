//! OpenAI's Codex CLI (`@openai/codex`, pinned by scripts/setup-clients) as a user runs
//! it against otpmcp: `codex mcp add` over HTTP and stdio, then `codex exec`, whose model
//! is a loopback stand-in of the Responses API (tests/common/responses.rs) that calls an
//! otpmcp tool and ends the turn once the tool's output comes back. In its default mode
//! and with `--enable mcp_2026_07_28`. Each test checks on otpmcp's side that the call
//! arrived: over HTTP the `stamp` tool records every call it answers (its random stamp,
//! its session), and the stand-in must have been handed that very stamp; over stdio the
//! host starts the real binary, and the output must be `streamed N events` for the N the
//! test picked, which only otpmcp running that call prints.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use common::TestServer;
use common::hosts::{Home, Stamped, otpmcp_bin, printed, random_count, run_host, stamping_server};
use common::responses::{Responses, call_then_finish, offered_tools, outputs};
use serde_json::{Value, json};

fn codex() -> PathBuf {
    common::hosts::installed("@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex")
}

/// The two ways Codex speaks MCP.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Default,
    /// `--enable mcp_2026_07_28`.
    Revision2026,
}

/// `codex mcp add otpmcp ARGS...` in `home`, then `codex mcp list --json`, which must
/// show it as `transport`.
async fn add(home: &Home, args: &[&str], transport: &str) {
    let mut cmd = home.command(&codex());
    cmd.args(["mcp", "add", "otpmcp"]).args(args);
    run_host(cmd).await;
    let mut cmd = home.command(&codex());
    cmd.args(["mcp", "list", "--json"]);
    let out = run_host(cmd).await;
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let ours = listed
        .as_array()
        .and_then(|all| all.iter().find(|s| s["name"] == "otpmcp"))
        .unwrap_or_else(|| panic!("codex mcp list has no otpmcp: {}", printed(&out)));
    assert_eq!(ours["transport"]["type"], transport, "{ours}");
    assert_eq!(ours["enabled"], true, "{ours}");
}

/// `codex exec` in `home` with the stand-in as its model, in `mode`, with `env` added;
/// returns what the stand-in received.
async fn exec(home: &Home, model: &Responses, mode: Mode, env: &[(&str, &str)]) -> Vec<Value> {
    let provider = format!(
        "model_providers.standin={{name=\"stand-in\", base_url=\"{}\", wire_api=\"responses\"}}",
        model.url
    );
    let mut cmd = home.command(&codex());
    cmd.args([
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
    ])
    .args([
        "-c",
        &provider,
        "-c",
        "model_provider=\"standin\"",
        "-m",
        "gpt-5",
    ]);
    if mode == Mode::Revision2026 {
        cmd.args(["--enable", "mcp_2026_07_28"]);
    }
    cmd.envs(env.iter().copied()).arg("Call the otpmcp tool.");
    let out = run_host(cmd).await;
    let requests = model.requests();
    assert!(
        requests.len() >= 2,
        "the stand-in got {} requests: {}",
        requests.len(),
        printed(&out)
    );
    requests
}

/// Codex offered otpmcp's tools in its first request to the model (it listed them).
fn listed(requests: &[Value], expected: &[&str]) {
    let offered = offered_tools(&requests[0], "otpmcp");
    for name in expected {
        assert!(
            offered.iter().any(|o| o == name),
            "{name} not offered: {offered:?}"
        );
    }
}

/// Over HTTP: the stamp that came back to the model is the one `stamp` made, and the
/// call's session says which revision Codex spoke.
async fn over_http(mode: Mode) -> Stamped {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let sessions = Arc::new(OnceLock::new());
    let stamping = stamping_server(calls.clone(), sessions.clone());
    let server = TestServer::start_with(|_| {}, stamping).await;
    let _ = sessions.set(server.app.sessions().clone());
    let home = Home::new("codex");
    add(&home, &["--url", &server.url], "streamable_http").await;
    let call = stamp_once(&home, &calls, mode, &[]).await;
    server.shutdown().await;
    call
}

/// `codex exec` (in `mode`, with `env`) calls `stamp`; the one call `calls` recorded is
/// the one whose stamp came back to the model.
async fn stamp_once(
    home: &Home,
    calls: &Mutex<Vec<Stamped>>,
    mode: Mode,
    env: &[(&str, &str)],
) -> Stamped {
    let model = Responses::start(call_then_finish("otpmcp", "stamp", json!({}))).await;
    let requests = exec(home, &model, mode, env).await;
    listed(&requests, &["echo", "stream_events", "stamp"]);
    let calls = calls.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(calls.len(), 1, "one call of stamp arrived: {calls:?}");
    let came_back = requests.iter().flat_map(outputs).collect::<Vec<_>>();
    assert!(
        came_back.iter().any(|o| o.contains(&calls[0].stamp)),
        "the model was handed {came_back:?}, not otpmcp's {}",
        calls[0].stamp
    );
    assert!(!calls[0].task, "Codex never declares tasks");
    calls[0].clone()
}

/// Over stdio: Codex starts `otpmcp stdio` itself; `streamed N events` came back.
async fn over_stdio(mode: Mode) {
    let home = Home::new("codex");
    add(&home, &["--", otpmcp_bin(), "stdio"], "stdio").await;
    let count = random_count();
    let arguments = json!({"count": count, "interval_ms": 0});
    let model = Responses::start(call_then_finish("otpmcp", "stream_events", arguments)).await;
    let requests = exec(&home, &model, mode, &[]).await;
    listed(&requests, &["echo", "stream_events"]);
    let came_back = requests.iter().flat_map(outputs).collect::<Vec<_>>();
    let expected = format!("streamed {count} events");
    assert!(
        came_back.iter().any(|o| o.contains(&expected)),
        "the model was handed {came_back:?}, not {expected:?}"
    );
}

#[tokio::test]
#[ignore = "needs Codex (scripts/setup-clients); ./scripts/test runs it"]
async fn codex_lists_and_calls_otpmcp_over_http_in_a_2025_session() {
    let call = over_http(Mode::Default).await;
    assert!(
        call.session.is_some(),
        "by default Codex opens a session: {call:?}"
    );
    assert_eq!(call.revision.as_deref(), Some("2025-06-18"), "{call:?}");
}

#[tokio::test]
#[ignore = "needs Codex (scripts/setup-clients); ./scripts/test runs it"]
async fn codex_in_its_2026_mode_calls_otpmcp_over_http_without_a_session() {
    let call = over_http(Mode::Revision2026).await;
    assert!(
        call.session.is_none(),
        "with mcp_2026_07_28 Codex speaks 2026-07-28 (stateless): {call:?}"
    );
}

#[tokio::test]
#[ignore = "needs Codex (scripts/setup-clients); ./scripts/test runs it"]
async fn codex_lists_and_calls_otpmcp_over_stdio() {
    over_stdio(Mode::Default).await;
}

#[tokio::test]
#[ignore = "needs Codex (scripts/setup-clients); ./scripts/test runs it"]
async fn codex_in_its_2026_mode_lists_and_calls_otpmcp_over_stdio() {
    over_stdio(Mode::Revision2026).await;
}

/// With `[auth]` on: the paths Codex probes, in its order (the endpoint, then RFC 9728's,
/// RFC 8414's and OpenID's well-known paths), answer as docs/hosts.md says; `codex mcp
/// add` follows otpmcp's metadata to the authorization server and starts its OAuth login
/// there (which fails at client registration: the stand-in issuer offers none); and with
/// `--bearer-token-env-var`, Codex calls a tool with the token.
#[tokio::test]
#[ignore = "needs Codex (scripts/setup-clients); ./scripts/test runs it"]
async fn with_auth_on_codex_finds_the_authorization_server_and_calls_with_a_bearer_token() {
    let issuer = common::issuer::Issuer::start().await;
    // The audience is the URL Codex uses, so the metadata names this very resource.
    let port = common::redis::free_port();
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (issuer_url, audience) = (issuer.url.clone(), url.clone());
    let calls = Arc::new(Mutex::new(Vec::new()));
    let tweak = move |c: &mut otpmcp::config::Config| {
        c.server.bind = ([127, 0, 0, 1], port).into();
        c.auth.enabled = true;
        c.auth.issuer = issuer_url;
        c.auth.audience = audience;
        c.auth.scopes_supported = vec!["mcp".into()];
    };
    let stamping = stamping_server(calls.clone(), Arc::default());
    let server = TestServer::start_with(tweak, stamping).await;
    let base = format!("http://127.0.0.1:{port}");
    let metadata = json!({
        "resource": url, "authorization_servers": [issuer.url],
        "scopes_supported": ["mcp"], "bearer_methods_supported": ["header"],
    });
    let http = reqwest::Client::new();
    for (path, status) in [
        ("/mcp", 401),
        ("/.well-known/oauth-protected-resource/mcp", 200),
        ("/mcp/.well-known/oauth-protected-resource", 404),
        ("/.well-known/oauth-protected-resource", 200),
        ("/.well-known/oauth-authorization-server/mcp", 404),
        ("/.well-known/openid-configuration/mcp", 404),
        ("/mcp/.well-known/openid-configuration", 404),
        ("/.well-known/oauth-authorization-server", 404),
    ] {
        let resp = http
            .get(format!("{base}{path}"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        assert_eq!(resp.status().as_u16(), status, "{path}");
        if path == "/mcp" {
            let challenge = resp.headers().get("www-authenticate");
            let expected = format!(
                "Bearer resource_metadata=\"{base}/.well-known/oauth-protected-resource/mcp\""
            );
            assert_eq!(
                challenge.and_then(|v| v.to_str().ok()),
                Some(expected.as_str())
            );
        } else if status == 200 {
            let body: Value =
                serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
            assert_eq!(body, metadata, "{path}");
        }
    }

    let home = Home::new("codex");
    let mut cmd = home.command(&codex());
    cmd.args(["mcp", "add", "otpmcp", "--url", &url]);
    let out = tokio::time::timeout(common::hosts::HOST_LIMIT, cmd.output())
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_else(|| panic!("codex mcp add did not finish"));
    let said = printed(&out);
    assert!(
        said.contains("Detected OAuth support")
            && said.contains("Dynamic client registration not supported"),
        "codex mcp add: {said}"
    );

    let home = Home::new("codex");
    let args = ["--url", &url, "--bearer-token-env-var", "OTPMCP_TOKEN"];
    add(&home, &args, "streamable_http").await;
    let token = issuer.token(&url, "alice", "mcp");
    let call = stamp_once(&home, &calls, Mode::Default, &[("OTPMCP_TOKEN", &token)]).await;
    assert!(call.session.is_some(), "{call:?}");
    server.shutdown().await;
}
