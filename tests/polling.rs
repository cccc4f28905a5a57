//! SSE polling (MCP 2025-11-25): a handler ends the client's connection early and keeps
//! working; the client resumes with GET and `Last-Event-ID` and gets the rest.

mod common;

use common::{TestServer, Transcript};
use otpmcp::McpServer;
use otpmcp::handler::tool;
use otpmcp::handler::{Tool, ToolError, ToolRegistry};
use otpmcp::protocol::methods::CallToolResult;
use serde_json::json;

/// Progress 1, closes the connection, progress 2, answers with whether it closed one.
fn let_go() -> Tool {
    tool("let_go", |(), ctx| async move {
        let failed = |e: otpmcp::handler::NotifyError| ToolError::Failed(e.to_string());
        ctx.progress(1.0, Some(2.0), None).await.map_err(failed)?;
        let closed = ctx.close_connection().await;
        ctx.progress(2.0, Some(2.0), None).await.map_err(failed)?;
        Ok(CallToolResult::text(format!("closed: {closed}")))
    })
    .description("Closes its connection mid-call.")
}

async fn server() -> TestServer {
    let mut tools = ToolRegistry::default();
    tools.register(let_go());
    TestServer::start_with(|_| {}, McpServer::new(tools)).await
}

#[tokio::test]
async fn the_handler_closes_the_connection_and_the_client_polls_for_the_rest() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client.call_stream("let_go", json!({}), Some("p")).await;
    let mut t = Transcript::default();
    let first = reader.rest().await;
    for f in &first {
        assert!(!t.add(f), "no response on the first connection");
    }
    assert_eq!(t.progress, vec![1]);
    assert!(
        first.last().is_some_and(|f| f.retry.is_some()),
        "a retry hint before the close"
    );
    let last = reader.last_id.clone().unwrap_or_default();
    let mut resumed = client.resume(&last).await;
    for f in resumed.rest().await {
        t.add(&f);
    }
    assert_eq!(t.progress, vec![1, 2]);
    assert_eq!(t.result_text().as_deref(), Some("closed: true"));
    server.shutdown().await;
}

#[tokio::test]
async fn clients_that_do_not_poll_keep_their_connection() {
    let server = server().await;
    let mut client = server.client();
    client.version = "2025-06-18".into();
    client.initialize().await;
    let mut reader = client.call_stream("let_go", json!({}), Some("p")).await;
    let mut t = Transcript::default();
    for f in reader.rest().await {
        t.add(&f);
    }
    assert_eq!(t.progress, vec![1, 2]);
    assert_eq!(t.result_text().as_deref(), Some("closed: false"));
    server.shutdown().await;
}
