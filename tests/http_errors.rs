//! Every 4xx the transport produces, each with a clear message, and JSON-RPC errors.

mod common;

use common::{ACCEPT_BOTH, Client, TestServer};
use serde_json::{Value, json};

async fn body_json(resp: reqwest::Response) -> Value {
    serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default()
}

#[tokio::test]
async fn transport_errors_have_the_right_status_and_a_message() {
    let server = TestServer::start(|c| c.server.max_body_bytes = 1024).await;
    let mut client = server.client();
    client.initialize().await;
    let session = client.session.clone().unwrap_or_default();
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();
    let post = || {
        client
            .http
            .post(&client.url)
            .header("mcp-session-id", &session)
    };
    let cases: Vec<(&str, reqwest::RequestBuilder, u16)> = vec![
        (
            "Accept without SSE",
            post()
                .header("content-type", "application/json")
                .header("accept", "application/json")
                .body(ping.clone()),
            406,
        ),
        (
            "Accept text/html",
            post()
                .header("content-type", "application/json")
                .header("accept", "text/html")
                .body(ping.clone()),
            406,
        ),
        (
            "text/plain body",
            post()
                .header("content-type", "text/plain")
                .header("accept", ACCEPT_BOTH)
                .body(ping.clone()),
            415,
        ),
        (
            "unsupported version",
            post()
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .header("mcp-protocol-version", "1999-01-01")
                .body(ping.clone()),
            400,
        ),
        (
            "body too large",
            post()
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .body("x".repeat(2048)),
            413,
        ),
        (
            "parse error",
            post()
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .body("{nope"),
            400,
        ),
        (
            "batch",
            post()
                .header("content-type", "application/json")
                .header("accept", ACCEPT_BOTH)
                .body(format!("[{ping}]")),
            400,
        ),
        (
            "GET without SSE accept",
            client
                .http
                .get(&client.url)
                .header("mcp-session-id", &session)
                .header("accept", "application/json"),
            406,
        ),
        (
            "PUT",
            client
                .http
                .put(&client.url)
                .header("mcp-session-id", &session),
            405,
        ),
    ];
    for (what, req, status) in cases {
        let resp = Client::send(req).await;
        assert_eq!(resp.status().as_u16(), status, "{what}");
        if status != 405 {
            let v = body_json(resp).await;
            let message = v["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            assert!(!message.is_empty(), "{what}: a message explains the error");
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn json_rpc_errors_carry_the_standard_codes() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let parse = Client::send(
        client
            .http
            .post(&client.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .body("{"),
    )
    .await;
    assert_eq!(body_json(parse).await["error"]["code"], -32700);
    let batch = Client::send(
        client
            .http
            .post(&client.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .body("[]"),
    )
    .await;
    let v = body_json(batch).await;
    assert_eq!(v["error"]["code"], -32600);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("batch")
    );

    let v = client.ask("no/such", json!({})).await;
    assert_eq!(v["error"]["code"], -32601);
    let v = client.ask("tools/call", json!({"name": "nope"})).await;
    assert_eq!(v["error"]["code"], -32602);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("nope")
    );
    // Arguments a tool refuses are its result with `isError` (issue 23, part 6), the
    // message naming what is wrong.
    let v = client
        .ask("tools/call", json!({"name": "echo", "arguments": {}}))
        .await;
    assert_eq!(v["result"]["isError"], true, "{v}");
    assert!(
        v["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .contains("text")
    );
    let v = client
        .ask(
            "tools/call",
            json!({"name": "stream_events", "arguments": {"count": 100_000_000}}),
        )
        .await;
    assert_eq!(
        v["result"]["isError"], true,
        "unbounded work is refused: {v}"
    );
    let v = client
        .ask(
            "tools/call",
            json!({"name": "stream_events", "arguments": {"count": 1000, "interval_ms": 60000}}),
        )
        .await;
    assert_eq!(
        v["result"]["isError"], true,
        "so is work that would run for hours: {v}"
    );
    let v = client.ask("tools/list", json!({})).await;
    let names: Vec<&str> = v["result"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(names, ["echo", "stream_events"]);
    server.shutdown().await;
}

#[tokio::test]
async fn an_oversized_client_description_is_refused_at_initialize() {
    let server = TestServer::start(|_| {}).await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "x".repeat(70 * 1024), "version": "0"}}});
    let resp = Client::send(server.client().post(&body)).await;
    assert_eq!(resp.status(), 400);
    assert!(
        resp.headers().get("mcp-session-id").is_none(),
        "no session was created"
    );
    let v = body_json(resp).await;
    assert_eq!(v["error"]["code"], -32602);
    server.shutdown().await;
}

#[tokio::test]
async fn a_progress_token_longer_than_the_limit_is_refused_with_its_id() {
    let server = TestServer::start(|c| c.server.max_progress_token_bytes = 64).await;
    let mut client = server.client();
    client.initialize().await;
    let long = "t".repeat(65);
    let call = json!({"jsonrpc": "2.0", "id": 77, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": long}}});
    let resp = Client::send(client.post(&call)).await;
    assert_eq!(resp.status(), 400);
    let body: serde_json::Value =
        serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
    assert_eq!(body["id"], 77);
    assert_eq!(body["error"]["code"], -32602);
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("max_progress_token_bytes")),
        "{body}"
    );
    // At the limit it is fine.
    let ok = json!({"jsonrpc": "2.0", "id": 78, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "x"}, "_meta": {"progressToken": "t".repeat(64)}}});
    assert_eq!(Client::send(client.post(&ok)).await.status(), 200);
    server.shutdown().await;
}
