//! What clients send cannot forge or flood the log: the real binary's stderr, after
//! requests carrying newlines and ANSI escapes in their ids and methods, has no line a
//! client wrote, no escape character, and no whole session id.

mod common;

use std::io::Read;

use common::{Client, within};
use serde_json::json;

/// Everything `binary` logs, read until it exits.
fn log_of(binary: &mut common::Binary) -> tokio::task::JoinHandle<String> {
    let mut stderr = binary
        .child
        .stderr
        .take()
        .unwrap_or_else(|| panic!("stderr"));
    tokio::task::spawn_blocking(move || {
        let mut all = String::new();
        let _ = stderr.read_to_string(&mut all);
        all
    })
}

#[tokio::test]
async fn client_strings_are_escaped_and_session_ids_shortened_in_the_log() {
    let mut binary = common::Binary::start_logging(
        &[],
        &[("OTPMCP__TELEMETRY__LOG_FILTER", "info,otpmcp=debug")],
    )
    .await;
    let log = log_of(&mut binary);
    let url = binary.url.clone();

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

/// A refused bearer token is logged by the reason and a short hash of the token, never
/// the token itself; an accepted one likewise (at debug).
#[tokio::test]
async fn bearer_tokens_are_logged_by_hash_and_reason_never_whole() {
    use common::issuer::{Issuer, now};
    const AUDIENCE: &str = "http://mcp.test/mcp";
    let issuer = Issuer::start().await;
    let mut binary = common::Binary::start_logging(
        &[],
        &[
            (
                "OTPMCP__TELEMETRY__LOG_FILTER",
                "info,otpmcp::transport=debug,otpmcp::auth=debug",
            ),
            ("OTPMCP__AUTH__ENABLED", "true"),
            ("OTPMCP__AUTH__ISSUER", &issuer.url),
            ("OTPMCP__AUTH__AUDIENCE", AUDIENCE),
        ],
    )
    .await;
    let log = log_of(&mut binary);

    let mut expired = issuer.claims(AUDIENCE, "mallory", "mcp");
    expired.insert("exp".into(), json!(now() - 3600));
    let expired = Issuer::sign(&issuer.rsa, &expired);
    let good = issuer.token(AUDIENCE, "alice", "mcp");
    let status = |token: String| {
        let url = binary.url.clone();
        async move {
            let client = Client::new(&url).with_token(&token);
            let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                           "clientInfo": {"name": "t", "version": "0"}}});
            Client::send(client.post(&body)).await.status().as_u16()
        }
    };
    assert_eq!(status(expired.clone()).await, 401);
    assert_eq!(status(good.clone()).await, 200);

    assert_eq!(binary.terminate().await, Some(0));
    let log = within("the log", log).await.unwrap_or_default();
    let refused = log
        .lines()
        .find(|l| l.contains("bearer token refused"))
        .unwrap_or_else(|| panic!("no refusal logged:\n{log}"));
    assert!(refused.contains("expired"), "{refused}");
    assert!(
        refused.contains(&otpmcp::auth::token_hash(&expired)),
        "{refused}"
    );
    assert!(
        log.lines()
            .any(|l| l.contains("bearer token accepted")
                && l.contains(&otpmcp::auth::token_hash(&good))),
        "no acceptance logged:\n{log}"
    );
    for token in [&expired, &good] {
        // No part of a token (its signature is its last part) is in the log.
        let signature = token.rsplit('.').next().unwrap_or(token);
        assert!(!log.contains(signature), "a token in the log:\n{log}");
    }
}
