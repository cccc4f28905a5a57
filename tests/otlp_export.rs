//! OTLP export from the real binary: spans reach a collector over OTLP/HTTP and are
//! flushed when the process stops on SIGTERM.

mod common;

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

    let endpoint = format!("http://{addr}/v1/traces");
    let binary = common::Binary::start(
        &[],
        &[
            ("OTPMCP__TELEMETRY__OTLP_ENDPOINT", &endpoint),
            ("OTPMCP__TELEMETRY__LOG_FILTER", "info"),
        ],
    )
    .await;
    let mut client = Client::new(&binary.url);
    client.initialize().await;
    assert_eq!(binary.terminate().await, Some(0));
    let kind = within("an OTLP export", rx.recv()).await;
    assert_eq!(kind.as_deref(), Some("application/x-protobuf"));
}
