//! MCP logging: `logging/setLevel` sets the session's threshold, and handlers' log
//! messages at or above it reach the client as `notifications/message` on the call's stream.

mod common;

use common::{Client, TestServer};
use otpmcp::McpServer;
use otpmcp::handler::tool;
use otpmcp::handler::{Tool, ToolRegistry};
use otpmcp::protocol::methods::{CallToolResult, LoggingLevel};
use serde_json::json;

/// Logs one message at debug, info and error.
fn chatty() -> Tool {
    tool("chatty", |(), ctx| async move {
        for (level, text) in [
            (LoggingLevel::Debug, "details"),
            (LoggingLevel::Info, "progress"),
            (LoggingLevel::Error, "trouble"),
        ] {
            ctx.log(level, Some("chatty"), json!(text)).await?;
        }
        Ok(CallToolResult::text("done"))
    })
    .description("Logs at three levels.")
}

async fn logged_levels(client: &Client) -> Vec<String> {
    let mut reader = client.call_stream("chatty", json!({}), None).await;
    reader
        .rest()
        .await
        .iter()
        .filter_map(|f| f.json())
        .filter(|v| v["method"] == "notifications/message")
        .map(|v| {
            assert_eq!(v["params"]["logger"], "chatty");
            v["params"]["level"].as_str().unwrap_or_default().to_owned()
        })
        .collect()
}

#[tokio::test]
async fn set_level_filters_what_handlers_log() {
    let mut tools = ToolRegistry::default();
    tools.register(chatty());
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let mut client = server.client();
    let init = client.initialize().await;
    assert!(
        init["result"]["capabilities"]["logging"].is_object(),
        "logging is offered"
    );
    assert_eq!(
        logged_levels(&client).await,
        ["debug", "info", "error"],
        "everything before setLevel"
    );

    let set = json!({"jsonrpc": "2.0", "id": 50, "method": "logging/setLevel", "params": {"level": "info"}});
    let mut answer = common::SseReader::new(Client::send(client.post(&set)).await);
    let frames = answer.rest().await;
    assert!(frames.iter().any(|f| {
        f.json()
            .is_some_and(|v| v["id"] == 50 && v["result"].is_object())
    }));
    assert_eq!(logged_levels(&client).await, ["info", "error"]);

    let bad = json!({"jsonrpc": "2.0", "id": 51, "method": "logging/setLevel", "params": {"level": "loud"}});
    let mut answer = common::SseReader::new(Client::send(client.post(&bad)).await);
    let frames = answer.rest().await;
    assert!(
        frames
            .iter()
            .any(|f| f.json().is_some_and(|v| v["error"]["code"] == -32602))
    );
    assert_eq!(
        logged_levels(&client).await,
        ["info", "error"],
        "a bad level changes nothing"
    );
    server.shutdown().await;
}

/// Issue 38, item 5: `ctx.info`, `ctx.warn` and `ctx.debug` log a plain message at their
/// level, without a logger name.
#[tokio::test]
async fn the_shortcuts_log_at_their_levels() {
    let mut tools = ToolRegistry::default();
    tools.register(tool("brief", |(), ctx| async move {
        ctx.debug("looking").await?;
        ctx.info("found it").await?;
        ctx.warn(String::from("it was late")).await?;
        Ok(CallToolResult::text("done"))
    }));
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client.call_stream("brief", json!({}), None).await;
    let notes: Vec<_> = reader
        .rest()
        .await
        .iter()
        .filter_map(|f| f.json())
        .filter(|v| v["method"] == "notifications/message")
        .map(|v| v["params"].clone())
        .collect();
    assert_eq!(
        notes,
        [
            json!({"level": "debug", "data": "looking"}),
            json!({"level": "info", "data": "found it"}),
            json!({"level": "warning", "data": "it was late"}),
        ]
    );
    server.shutdown().await;
}
