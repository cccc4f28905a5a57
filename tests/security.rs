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
    let rebound = Client::send(initialize(&client).header("host", "evil.example:80")).await;
    assert_eq!(rebound.status(), 403);
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
