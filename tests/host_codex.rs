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
use std::sync::{Arc, Mutex};

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

/// `codex exec` in `home` with the stand-in as its model, in `mode`; returns what the
/// stand-in received.
async fn exec(home: &Home, model: &Responses, mode: Mode) -> Vec<Value> {
    let provider = format!(
        "model_providers.standin={{name=\"stand-in\", base_url=\"{}\", wire_api=\"responses\"}}",
        model.url
    );
    let mut cmd = home.command(&codex());
    cmd.args(["exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"])
        .args(["-c", &provider, "-c", "model_provider=\"standin\"", "-m", "gpt-5"]);
    if mode == Mode::Revision2026 {
        cmd.args(["--enable", "mcp_2026_07_28"]);
    }
    cmd.arg("Call the otpmcp tool.");
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
        assert!(offered.iter().any(|o| o == name), "{name} not offered: {offered:?}");
    }
}

/// Over HTTP: the stamp that came back to the model is the one `stamp` made, and the
/// call's session says which revision Codex spoke.
async fn over_http(mode: Mode) -> Stamped {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let server = TestServer::start_with(|_| {}, stamping_server(calls.clone())).await;
    let home = Home::new("codex");
    add(&home, &["--url", &server.url], "streamable_http").await;
    let model = Responses::start(call_then_finish("otpmcp", "stamp", json!({}))).await;
    let requests = exec(&home, &model, mode).await;
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
    server.shutdown().await;
    calls[0].clone()
}

/// Over stdio: Codex starts `otpmcp stdio` itself; `streamed N events` came back.
async fn over_stdio(mode: Mode) {
    let home = Home::new("codex");
    add(&home, &["--", otpmcp_bin(), "stdio"], "stdio").await;
    let count = random_count();
    let arguments = json!({"count": count, "interval_ms": 0});
    let model = Responses::start(call_then_finish("otpmcp", "stream_events", arguments)).await;
    let requests = exec(&home, &model, mode).await;
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
    assert!(call.session.is_some(), "by default Codex opens a session: {call:?}");
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
