//! Clean shutdown: open streams get a retry hint and close; the binary exits 0 on SIGTERM.

mod common;

use std::process::{Command, Stdio};

use common::{Client, TestServer, within};
use serde_json::json;

#[tokio::test]
async fn shutdown_closes_open_streams_with_a_retry_hint_and_completes() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut standalone = client.resume("none").await;
    assert!(standalone.next().await.is_some());
    let mut call = client
        .call_stream(
            "stream_events",
            json!({"count": 1000, "interval_ms": 50}),
            Some("t"),
        )
        .await;
    assert!(call.next().await.is_some());
    within("shutdown", server.shutdown()).await;
    for reader in [&mut standalone, &mut call] {
        let rest = reader.rest().await;
        assert!(
            rest.iter().any(|f| f.retry.is_some()),
            "retry hint before close: {rest:?}"
        );
    }
}

/// The race the drain removes: a handler cancelled at shutdown used to end its stream
/// before the listener's close could write the retry hint. Tried 50 times; no miss.
#[tokio::test]
async fn a_streaming_call_cut_by_shutdown_always_gets_the_retry_hint() {
    for attempt in 0..50 {
        let server = TestServer::start(|c| {
            c.server.shutdown_timeout = std::time::Duration::from_millis(100);
        })
        .await;
        let mut client = server.client();
        client.initialize().await;
        let mut call = client
            .call_stream(
                "stream_events",
                json!({"count": 1000, "interval_ms": 20}),
                Some("t"),
            )
            .await;
        assert!(call.next().await.is_some());
        within("shutdown", server.shutdown()).await;
        let rest = call.rest().await;
        assert!(
            rest.iter().any(|f| f.retry.is_some()),
            "attempt {attempt}: the stream closed without a retry hint: {rest:?}"
        );
    }
}

/// A request that finishes within `shutdown_timeout` is answered in full: shutdown waits
/// for it before closing anything.
#[tokio::test]
async fn shutdown_lets_running_requests_finish_first() {
    let server = TestServer::start(|c| {
        c.server.shutdown_timeout = std::time::Duration::from_secs(5);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let mut call = client
        .call_stream(
            "stream_events",
            json!({"count": 5, "interval_ms": 100}),
            Some("t"),
        )
        .await;
    assert!(call.next().await.is_some());
    let stopping = tokio::spawn(server.shutdown());
    let rest = call.rest().await;
    let answer = rest
        .iter()
        .find(|f| f.is_response())
        .and_then(|f| f.json())
        .unwrap_or_else(|| panic!("the call's answer came before the close: {rest:?}"));
    assert!(answer.get("result").is_some(), "{answer}");
    let progress = rest.iter().filter(|f| f.progress().is_some()).count();
    assert!(progress >= 4, "every progress note: {rest:?}");
    within("shutdown", stopping)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}

fn otpmcp() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_otpmcp"));
    cmd.current_dir(std::env::temp_dir())
        .env("OTPMCP__TELEMETRY__LOG_FILTER", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

#[tokio::test]
async fn the_binary_prints_its_url_serves_and_exits_0_on_sigterm() {
    let binary =
        common::Binary::start(&["serve"], &[("OTPMCP__TELEMETRY__LOG_FILTER", "warn")]).await;
    let mut client = Client::new(&binary.url);
    client.initialize().await;
    assert_eq!(binary.terminate().await, Some(0));
}

#[test]
fn bad_configuration_exits_2_with_a_message_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("otpmcp-config-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let overlay = dir.join("bad.toml");
    let _ = std::fs::write(&overlay, "[sse]\nkeepalive = \"1s\"\n");
    let overlay = overlay.to_string_lossy().into_owned();
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, &'a str)>, &'a str);
    let cases: Vec<Case> = vec![
        (
            vec![],
            vec![("OTPMCP__SSE__KEEPALIVE_INTERVAL", "soon")],
            "sse.keepalive_interval",
        ),
        (
            vec![],
            vec![("OTPMCP__SSE__STREAM_TIMEOUT", "0s")],
            "sse.stream_timeout",
        ),
        (
            vec!["--config", "/nonexistent/otpmcp.toml"],
            vec![],
            "/nonexistent/otpmcp.toml",
        ),
        (vec!["--config", &overlay], vec![], "keepalive"),
        (vec!["--bind", "nowhere"], vec![], "--bind"),
        (vec!["--bind"], vec![], "--bind needs ADDR:PORT"),
        (
            vec!["--frobnicate"],
            vec![],
            "unknown argument \"--frobnicate\"",
        ),
        (
            vec!["stdio", "--bind", "127.0.0.1:0"],
            vec![],
            "stdio: --bind has no use",
        ),
        (
            vec!["stdio"],
            vec![("OTPMCP__SERVER__MAX_BODY_BYTES", "lots")],
            "server.max_body_bytes",
        ),
        (vec!["proxy"], vec![], "give --upstream URL --record FILE"),
        (
            vec!["proxy", "--frobnicate"],
            vec![],
            "proxy: unknown argument",
        ),
        (vec!["proxy", "--record"], vec![], "--record needs a file"),
        (
            vec!["proxy", "--replay", "x.jsonl", "--overwrite"],
            vec![],
            "--overwrite and --keep-session-ids go with --record",
        ),
        (
            vec!["proxy", "--replay", "x.jsonl", "--bind", "nowhere"],
            vec![],
            "--bind",
        ),
        (vec!["config", "check", &overlay], vec![], "keepalive"),
        (
            vec!["config", "check"],
            vec![("OTPMCP__SERVER__MAX_SESSIONS", "0")],
            "server.max_sessions",
        ),
        (
            vec!["config", "show"],
            vec![],
            "the subcommands are `check` and `docs`",
        ),
    ];
    for (args, env, named) in cases {
        let out = otpmcp()
            .args(&args)
            .envs(env.iter().copied())
            .output()
            .unwrap_or_else(|e| panic!("run: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains(named),
            "{args:?} {env:?}: {stderr:?} should name {named}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `otpmcp config check FILE`: every key with its effective value and where it came
/// from (default, a file, the environment), secrets and URL credentials hidden.
#[test]
fn config_check_prints_each_effective_value_with_its_source() {
    let dir = std::env::temp_dir().join(format!("otpmcp-config-check-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let overlay = dir.join("replica.toml");
    let text = "[server]\nmax_sessions = 7\n[store]\nbackend = \"redis\"\n";
    std::fs::write(&overlay, text).unwrap_or_else(|e| panic!("{e}"));
    let out = otpmcp()
        .args(["config", "check"])
        .arg(&overlay)
        .env("OTPMCP__STORE__REDIS_URL", "redis://:hunter2@10.0.0.9:6379")
        .output()
        .unwrap_or_else(|e| panic!("run: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    let line = |key: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(&format!("{key} = ")))
            .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
            .unwrap_or_else(|| panic!("no {key} in {stdout}"))
    };
    let file = overlay.display();
    assert_eq!(
        line("server.max_sessions"),
        format!("server.max_sessions = 7 # file {file}")
    );
    assert_eq!(
        line("store.redis_url"),
        "store.redis_url = \"redis://(set)@10.0.0.9:6379\" # environment OTPMCP__STORE__REDIS_URL"
    );
    assert!(!stdout.contains("hunter2"), "a password is never printed");
    assert!(line("auth.enabled").ends_with("# default"), "{stdout}");
    assert!(stdout.trim_end().ends_with("# valid"), "{stdout}");
}

/// Issue 36, finding 5: every kind of secret a configuration holds (the introspection
/// client secret, a program's environment, credentials in a URL's user-info or query
/// string, for Redis, Sentinel and OTLP) is shown as `(set)` by `config check`, and a
/// start-up error that names the Redis URL hides them too.
#[test]
fn secrets_are_never_printed_by_config_check_nor_a_start_up_error() {
    let dir = std::env::temp_dir().join(format!("otpmcp-secrets-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let overlay = dir.join("secrets.toml");
    let text = "[auth]\nintrospection_client_secret = \"hunter1\"\n\
        [exec.programs.gh]\ncommand = [\"/usr/bin/env\"]\nenv = { GITHUB_TOKEN = \"hunter2\" }\n\
        [telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/v1/traces?api_key=hunter3\"\n\
        [store]\nredis_sentinels = [\"redis://:hunter4@127.0.0.1:26379\"]\n\
        [stateless]\nrequest_state_key = \"hunter6-hunter6-hunter6-hunter6\"\n";
    std::fs::write(&overlay, text).unwrap_or_else(|e| panic!("{e}"));
    let out = otpmcp()
        .args(["config", "check"])
        .arg(&overlay)
        .env(
            "OTPMCP__STORE__REDIS_URL",
            "unix:///tmp/r.sock?db=0&pass=hunter5",
        )
        .output()
        .unwrap_or_else(|e| panic!("run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(!stdout.contains("hunter"), "a secret was printed: {stdout}");
    for shown in [
        "auth.introspection_client_secret = \"(set)\"",
        "exec.programs.gh.env.GITHUB_TOKEN = \"(set)\"",
        "telemetry.otlp_endpoint = \"http://127.0.0.1:4318/v1/traces?api_key=(set)\"",
        "store.redis_sentinels = [\"redis://(set)@127.0.0.1:26379\"]",
        "store.redis_url = \"unix:///tmp/r.sock?db=0&pass=(set)\"",
        "stateless.request_state_key = \"(set)\"",
    ] {
        assert!(stdout.contains(shown), "{shown} in {stdout}");
    }

    // The server cannot reach that Redis: its error names the URL, without the password.
    let out = otpmcp()
        .args(["--bind", "127.0.0.1:0"])
        .env("OTPMCP__STORE__BACKEND", "redis")
        .env(
            "OTPMCP__STORE__REDIS_URL",
            "unix:///nonexistent/r.sock?pass=hunter5",
        )
        .output()
        .unwrap_or_else(|e| panic!("run: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("unix:///nonexistent/r.sock?pass=(set)"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter"), "a secret was printed: {stderr}");
}

#[tokio::test]
async fn an_embedder_with_an_invalid_config_gets_an_error_not_a_panic() {
    let mut config = common::test_config();
    config.sse.path = "mcp".into();
    let err = otpmcp::start(config)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("sse.path"), "{err}");
}

#[tokio::test]
async fn help_and_version_print_and_exit_zero_and_a_taken_port_fails_to_start() {
    for flag in ["--help", "-h"] {
        let out = otpmcp()
            .arg(flag)
            .output()
            .unwrap_or_else(|e| panic!("run: {e}"));
        assert_eq!(out.status.code(), Some(0), "{flag}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("otpmcp proxy"), "{flag}: {stdout}");
        assert!(stdout.contains("otpmcp config check"), "{flag}: {stdout}");
        assert!(stdout.contains("otpmcp stdio"), "{flag}: {stdout}");
    }
    let out = otpmcp()
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("run: {e}"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("otpmcp {}", env!("CARGO_PKG_VERSION"))
    );

    // Another process holds the port: the server says so and exits 1, not 2 (the
    // command line was fine).
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let addr = taken
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
    let out = otpmcp()
        .args(["--bind", &addr])
        .output()
        .unwrap_or_else(|e| panic!("run: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("otpmcp: cannot listen on {addr}")),
        "{stderr}"
    );
}
