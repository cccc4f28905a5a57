//! OTLP export from the real binary: spans reach a collector over OTLP/HTTP and are
//! flushed when the process stops on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use axum::http::HeaderMap;
use axum::routing::post;
use common::{Client, within};
use tokio::sync::mpsc;

#[tokio::test]
async fn spans_are_exported_over_otlp_http_and_flushed_on_sigterm() {
    // A stand-in collector: records the content type of each export it receives.
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let collector = axum::Router::new().route(
        "/v1/traces",
        post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let tx = tx.clone();
            async move {
                let kind = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                if !body.is_empty() {
                    let _ = tx.send(kind);
                }
                ""
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, collector).await;
    });

    let mut child = Command::new(env!("CARGO_BIN_EXE_otpmcp"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/test.toml"),
        ])
        .env(
            "OTPMCP__TELEMETRY__OTLP_ENDPOINT",
            format!("http://{addr}/v1/traces"),
        )
        .env("OTPMCP__TELEMETRY__LOG_FILTER", "info")
        .current_dir(std::env::temp_dir())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let line = within(
        "the URL line",
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            line
        }),
    )
    .await
    .unwrap_or_default();
    let url = line
        .trim()
        .trim_start_matches("otpmcp serving MCP at ")
        .to_owned();
    let mut client = Client::new(&url);
    client.initialize().await;

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap_or_else(|e| panic!("kill: {e}"));
    assert!(status.success());
    let exit = within(
        "the process to exit",
        tokio::task::spawn_blocking(move || child.wait()),
    )
    .await
    .ok()
    .and_then(|r| r.ok());
    assert_eq!(exit.and_then(|s| s.code()), Some(0));
    let kind = within("an OTLP export", rx.recv()).await;
    assert_eq!(kind.as_deref(), Some("application/x-protobuf"));
}
