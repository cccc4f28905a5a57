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

#[tokio::test]
async fn an_embedder_with_an_invalid_config_gets_an_error_not_a_panic() {
    let mut config = common::test_config();
    config.sse.stream_buffer = 0;
    let err = otpmcp::start(config)
        .await
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("sse.stream_buffer"), "{err}");
}
