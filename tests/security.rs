//! DNS-rebinding protection: Origin and Host allow-lists.

mod common;

use common::{ACCEPT_BOTH, Client, TestServer};
use serde_json::json;

fn initialize(client: &Client) -> reqwest::RequestBuilder {
    client.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}))
}

#[tokio::test]
async fn foreign_origins_and_hosts_are_refused_with_403() {
    let server = TestServer::start(|_| {}).await;
    let client = server.client();
    let evil = Client::send(initialize(&client).header("origin", "http://evil.example")).await;
    assert_eq!(evil.status(), 403);
    let text = evil.text().await.unwrap_or_default();
    assert!(
        text.contains(r#""Forbidden: origin \"http://evil.example\" is not allowed""#),
        "{text}"
    );
    let rebound = Client::send(initialize(&client).header("host", "evil.example:80")).await;
    assert_eq!(rebound.status(), 403);
    let text = rebound.text().await.unwrap_or_default();
    assert!(
        text.contains(r#""Forbidden: host \"evil.example:80\" is not allowed""#),
        "{text}"
    );
    let local = Client::send(initialize(&client).header("origin", "http://localhost:5173")).await;
    assert_eq!(local.status(), 200, "a local browser origin is allowed");
    let get = Client::send(
        client
            .http
            .get(&client.url)
            .header("accept", "text/event-stream")
            .header("origin", "https://evil.example"),
    )
    .await;
    assert_eq!(get.status(), 403, "GET is guarded too");
    server.shutdown().await;
}

#[tokio::test]
async fn configured_hosts_are_allowed_and_protection_can_be_turned_off() {
    let server = TestServer::start(|c| {
        c.server.allowed_hosts.push("mcp.internal".into());
        c.server.allowed_origins.push("https://app.internal".into());
    })
    .await;
    let client = server.client();
    let ok = Client::send(
        initialize(&client)
            .header("host", "mcp.internal:8443")
            .header("origin", "https://app.internal"),
    )
    .await;
    assert_eq!(ok.status(), 200);
    server.shutdown().await;

    let open = TestServer::start(|c| c.server.dns_rebinding_protection = false).await;
    let client = open.client();
    let any = Client::send(
        client
            .http
            .post(&client.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .header("origin", "http://elsewhere.example")
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}}).to_string()),
    )
    .await;
    assert_eq!(any.status(), 200);
    open.shutdown().await;
}

/// Sends `request` as raw bytes on a new connection and returns the status line's code.
async fn raw_status(server: &TestServer, request: String) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = server.app.local_addr();
    let mut conn = common::within("a connection", tokio::net::TcpStream::connect(addr))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    conn.write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut head = [0u8; 12];
    common::within("a status line", conn.read_exact(&mut head))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0)
}

#[tokio::test]
async fn a_repeated_header_the_server_decides_by_gets_400() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let session = client.session_id().to_string();
    let host = server.app.local_addr().to_string();
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"ping"}"#;
    let post = |extra: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nmcp-protocol-version: 2025-11-25\r\n\
             mcp-session-id: {session}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    assert_eq!(
        raw_status(&server, post("")).await,
        200,
        "the request itself is fine"
    );
    for extra in [
        format!("mcp-session-id: {session}\r\n"),
        "mcp-session-id: 0123456789abcdef0123456789abcdef\r\n".to_owned(),
        "mcp-protocol-version: 2025-06-18\r\n".to_owned(),
        "origin: http://localhost\r\norigin: http://evil.example\r\n".to_owned(),
        format!("host: {host}\r\n"),
        "content-type: text/plain\r\n".to_owned(),
    ] {
        assert_eq!(raw_status(&server, post(&extra)).await, 400, "{extra:?}");
    }
    let get = format!(
        "GET /mcp HTTP/1.1\r\nhost: {host}\r\naccept: text/event-stream\r\n\
         mcp-session-id: {session}\r\nlast-event-id: a\r\nlast-event-id: b\r\nconnection: close\r\n\r\n"
    );
    assert_eq!(raw_status(&server, get).await, 400, "two Last-Event-IDs");
    server.shutdown().await;
}
