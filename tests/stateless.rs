//! The stateless revision (2026-07-28) beside 2025-11-25 sessions on one endpoint: which
//! era a POST belongs to, the refusals in the spec's order, log messages only on request,
//! a closed response stream cancelling its request, and listen streams ending with their
//! result at shutdown. The conformance suite covers the rest of the wire (scripts/conformance).

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::stateless::{Dropped, Stateless};
use common::{SseReader, TestServer, nz, within};
use otpmcp::McpServer;
use otpmcp::handler::builtin::echo;
use otpmcp::handler::{ToolRegistry, tool};
use otpmcp::protocol::methods::{CallToolResult, LoggingLevel};
use serde_json::{Value, json};

/// `echo`, `chatty` (logs at info and error, then answers after a while), `slow`
/// (reports progress, then waits until dropped) and `panics` (a handler's bug).
fn server(dropped: Arc<AtomicBool>) -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(echo())
        .register(
            tool("chatty", |(), ctx| async move {
                ctx.log(LoggingLevel::Info, Some("chatty"), json!("info"))
                    .await?;
                ctx.log(LoggingLevel::Error, Some("chatty"), json!("error"))
                    .await?;
                Ok(CallToolResult::text("done"))
            })
            .description("Logs twice."),
        )
        .register(
            tool("slow", move |(), ctx| {
                let guard = Dropped(dropped.clone());
                async move {
                    let _guard = guard;
                    ctx.progress(1.0, None, None).await?;
                    std::future::pending::<()>().await;
                    Ok(CallToolResult::text("never"))
                }
            })
            .description("Never answers."),
        )
        .register(tool("panics", |(), _| async {
            if std::hint::black_box(true) {
                panic!("a handler's bug");
            }
            Ok(CallToolResult::text("never"))
        }));
    McpServer::new(tools)
}

/// A handler that panics is answered with an internal error in both eras, as over stdio,
/// and the server goes on serving: the panic is contained, not left to drop the response.
#[tokio::test]
async fn a_handlers_panic_is_an_internal_error_in_both_eras() {
    let server = TestServer::start_with(|_| {}, server(Arc::default())).await;
    let stateless = Stateless::new(&server.url);
    let panicked = stateless
        .ask("tools/call", json!({"name": "panics", "arguments": {}}))
        .await;
    assert_eq!(panicked.status, 200);
    assert_eq!(panicked.error_code(), Some(-32603));
    let mut session = server.client();
    session.initialize().await;
    let panicked = session
        .ask("tools/call", json!({"name": "panics", "arguments": {}}))
        .await;
    assert_eq!(panicked["error"]["code"], -32603, "{panicked}");
    let echoed = stateless
        .ask(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "still here"}}),
        )
        .await;
    assert_eq!(echoed.result()["content"][0]["text"], "still here");
}

#[tokio::test]
async fn both_eras_are_served_on_one_endpoint() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = TestServer::start_with(|_| {}, server(dropped)).await;
    let mut session = server.client();
    let init = session.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    let stateless = Stateless::new(&server.url);
    let discover = stateless.ask("server/discover", json!({})).await;
    let result = discover.result();
    assert_eq!(result["supportedVersions"][0], "2026-07-28");
    assert!(
        result["supportedVersions"]
            .as_array()
            .is_some_and(|v| v.contains(&json!("2025-11-25")))
    );
    assert_eq!(result["resultType"], "complete");
    assert!(result["ttlMs"].is_u64() && result["cacheScope"].is_string());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "otpmcp"
    );
    // A session's request is answered as before, without the new fields.
    let listed = session.ask("tools/list", json!({})).await;
    assert!(listed["result"].get("resultType").is_none(), "{listed}");
    let call = stateless
        .ask(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(call.status, 200);
    assert_eq!(call.result()["content"][0]["text"], "hi");
    // `initialize` asking for the stateless revision gets a session of the latest one.
    let mut legacy = server.client();
    legacy.version = "2026-07-28".into();
    assert_eq!(
        legacy.initialize().await["result"]["protocolVersion"],
        "2025-11-25"
    );
    server.shutdown().await;
}

// Issue 23, part 6: arguments a tool refuses are its result with `isError` and the
// message, in both eras, so a model can correct the call (they were -32602); an unknown
// tool stays -32602.
#[tokio::test]
async fn refused_arguments_are_a_tool_result_in_both_eras() {
    let server = TestServer::start_with(|_| {}, server(Arc::default())).await;
    let stateless = Stateless::new(&server.url);
    let bad = json!({"name": "echo", "arguments": {"text": 7}});
    let call = stateless.ask("tools/call", bad.clone()).await;
    assert_eq!(call.status, 200, "{:?}", call.message);
    assert_eq!(call.result()["resultType"], "complete");
    assert_eq!(call.result()["isError"], true);
    let text = call.result()["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("Invalid arguments for tool echo") && text.contains("`text`"),
        "{text}"
    );
    let unknown = stateless
        .ask("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown.error_code(), Some(-32602));

    let mut session = server.client();
    session.initialize().await;
    let call = session.ask("tools/call", bad).await;
    assert_eq!(call["result"]["isError"], true, "{call}");
    assert_eq!(call["result"]["content"][0]["text"], text);
    let unknown = session
        .ask("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    server.shutdown().await;
}

#[tokio::test]
async fn refusals_come_in_the_specs_order_with_its_codes() {
    let server = TestServer::start_with(|_| {}, server(Arc::default())).await;
    let http = reqwest::Client::new();
    let post = |version: &str, meta: Value, method: &str| {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": {"_meta": meta}});
        http.post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method)
            .body(body.to_string())
    };
    let meta = |v: &str| json!({"io.modelcontextprotocol/protocolVersion": v, "io.modelcontextprotocol/clientCapabilities": {}});
    let cases = [
        // `_meta` first: -32602 even though the header names a good version.
        (post("2026-07-28", json!({}), "tools/list"), 400, -32602),
        // Header against `_meta` before support: -32020, not -32022.
        (
            post("2026-07-28", meta("2099-01-01"), "tools/list"),
            400,
            -32020,
        ),
        (
            post("2099-01-01", meta("2099-01-01"), "tools/list"),
            400,
            -32022,
        ),
        (post("2026-07-28", meta("2026-07-28"), "ping"), 404, -32601),
        (
            post("2026-07-28", meta("2026-07-28"), "logging/setLevel"),
            404,
            -32601,
        ),
    ];
    for (request, status, code) in cases {
        let resp = within("an answer", request.send())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(resp.status(), status);
        let body: Value =
            serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        assert_eq!(body["error"]["code"], code, "{body}");
        assert_eq!(body["id"], 7, "errors carry the request's id");
        if code == -32022 {
            assert_eq!(body["error"]["data"]["requested"], "2099-01-01");
            assert!(
                body["error"]["data"]["supported"]
                    .as_array()
                    .is_some_and(|v| !v.is_empty())
            );
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn log_messages_only_reach_requests_that_ask_for_them() {
    let server = TestServer::start_with(|_| {}, server(Arc::default())).await;
    let client = Stateless::new(&server.url);
    let quiet = client
        .ask("tools/call", json!({"name": "chatty", "arguments": {}}))
        .await;
    assert!(quiet.notes.is_empty(), "{:?}", quiet.notes);
    let params = json!({"name": "chatty", "arguments": {}, "_meta": {"io.modelcontextprotocol/logLevel": "warning"}});
    let told = client.ask("tools/call", params).await;
    let levels: Vec<&Value> = told.notes.iter().map(|n| &n["params"]["level"]).collect();
    assert_eq!(
        levels,
        [&json!("error")],
        "only at or above the request's level"
    );
    assert_eq!(told.result()["content"][0]["text"], "done");
    server.shutdown().await;
}

#[tokio::test]
async fn closing_the_response_stream_cancels_the_request() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = TestServer::start_with(|_| {}, server(dropped.clone())).await;
    let client = Stateless::new(&server.url);
    let params = json!({"name": "slow", "arguments": {}, "_meta": {"progressToken": "p"}});
    let (_, req) = client.post("tools/call", params);
    let resp = within("the stream", req.send())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.headers()["x-accel-buffering"], "no");
    let mut stream = SseReader::new(resp);
    let progress = stream.next_json().await;
    assert_eq!(progress["method"], "notifications/progress");
    assert!(!dropped.load(Ordering::SeqCst));
    drop(stream);
    common::eventually("the handler to be dropped", || async {
        dropped.load(Ordering::SeqCst).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn listen_streams_are_capped() {
    let server = TestServer::start_with(
        |c| c.stateless.max_listen_streams = nz!(1),
        server(Arc::default()),
    )
    .await;
    let client = Stateless::new(&server.url);
    let filter = json!({"notifications": {"toolsListChanged": true}});
    let (_, first) = client.post("subscriptions/listen", filter.clone());
    let first = within("listen", first.send())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut first = SseReader::new(first);
    assert_eq!(
        first.next_json().await["method"],
        "notifications/subscriptions/acknowledged"
    );
    let refused = client.ask("subscriptions/listen", filter.clone()).await;
    assert_eq!(refused.status, 503);
    assert_eq!(refused.error_code(), Some(-32603));
    drop(first);
    // Closed by the client: its place is free again.
    common::eventually("the first stream's place to be free", || async {
        let (_, again) = client.post("subscriptions/listen", filter.clone());
        let resp = again.send().await.ok()?;
        (resp.status() == 200).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_listen_stream_ends_with_its_result_when_the_server_stops() {
    let server = TestServer::start_with(|_| {}, server(Arc::default())).await;
    let client = Stateless::new(&server.url);
    let (id, req) = client.post(
        "subscriptions/listen",
        json!({"notifications": {"toolsListChanged": true, "promptsListChanged": true}}),
    );
    let resp = within("listen", req.send())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut stream = SseReader::new(resp);
    let ack = stream.next_json().await;
    assert_eq!(
        ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    // This server has no prompts: only what it can send is acknowledged.
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true})
    );
    let stopping = tokio::spawn(server.shutdown());
    let end = stream.next_json().await;
    assert_eq!(end["id"], id, "{end}");
    assert_eq!(end["result"]["resultType"], "complete");
    assert_eq!(
        end["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        id
    );
    within("shutdown", stopping)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
}
