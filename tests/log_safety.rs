//! What clients send cannot forge or flood the log: the real binary's stderr, after
//! requests carrying newlines and ANSI escapes in their ids and methods, has no line a
//! client wrote, no escape character, and no whole session id.

mod common;

use std::io::Read;

use common::{Client, within};
use serde_json::json;

#[tokio::test]
async fn client_strings_are_escaped_and_session_ids_shortened_in_the_log() {
    let mut binary = common::Binary::start_logging(
        &[],
        &[("OTPMCP__TELEMETRY__LOG_FILTER", "info,otpmcp=debug")],
    )
    .await;
    let mut stderr = binary
        .child
        .stderr
        .take()
        .unwrap_or_else(|| panic!("stderr"));
    let url = binary.url.clone();
    // Everything the process logs, read until it exits.
    let log = tokio::task::spawn_blocking(move || {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all);
        all
    });

    let forged = "x\n2026-01-01T00:00:00.000000Z ERROR forged line\u{1b}[31m";
    let mut client = Client::new(&url);
    client.initialize().await;
    let session = client.session_id().to_string();
    // A request id and a method a client chose, in a session and in an unknown one.
    let call = json!({"jsonrpc": "2.0", "id": forged, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": "t"}}});
    assert_eq!(Client::send(client.post(&call)).await.status(), 200);
    let note = json!({"jsonrpc": "2.0", "method": format!("notifications/{forged}")});
    assert_eq!(Client::send(client.post(&note)).await.status(), 202);
    let mut stranger = Client::new(&url);
    stranger.session = Some("0123456789abcdef0123456789abcdef".into());
    let lost =
        Client::send(stranger.post(&json!({"jsonrpc": "2.0", "id": forged, "method": "ping"})))
            .await;
    assert_eq!(lost.status(), 404);

    assert_eq!(binary.terminate().await, Some(0));
    let log = within("the log", log).await.unwrap_or_default();

    assert!(!log.is_empty(), "the server logged");
    assert!(
        log.contains("forged line"),
        "the id was logged, escaped:\n{log}"
    );
    for line in log.lines() {
        assert!(
            !line.starts_with("2026-01-01") && !line.contains("\u{1b}"),
            "a client wrote this line, or coloured it: {line:?}"
        );
    }
    assert!(
        !log.contains(&session),
        "a whole session id in the log:\n{log}"
    );
    assert!(
        log.contains(&session[..8]),
        "its short form is there:\n{log}"
    );
}
