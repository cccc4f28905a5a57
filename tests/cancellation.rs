//! Running requests stop when their session ends (DELETE) or the server shuts down,
//! instead of outliving everyone who could receive their answer.

mod common;

use common::{Client, TestServer, within};
use otpmcp::McpServer;
use otpmcp::handler::{Tool, ToolError, ToolRegistry, tool};
use otpmcp::protocol::methods::CallToolResult;
use serde_json::json;
use tokio::sync::mpsc;

struct SignalOnDrop(mpsc::UnboundedSender<()>);

impl Drop for SignalOnDrop {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// A tool that never finishes; says when it starts and when its work is dropped.
fn park(started: mpsc::UnboundedSender<()>, dropped: mpsc::UnboundedSender<()>) -> Tool {
    tool("park", move |(), _| {
        let guard = SignalOnDrop(dropped.clone());
        let _ = started.send(());
        async move {
            let _guard = guard;
            std::future::pending::<Result<CallToolResult, ToolError>>().await
        }
    })
    .description("Never returns.")
}

async fn server_with_park() -> (
    TestServer,
    mpsc::UnboundedReceiver<()>,
    mpsc::UnboundedReceiver<()>,
) {
    let (started_tx, started) = mpsc::unbounded_channel();
    let (dropped_tx, dropped) = mpsc::unbounded_channel();
    let mut tools = ToolRegistry::default();
    tools.register(park(started_tx, dropped_tx));
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    (server, started, dropped)
}

#[tokio::test]
async fn delete_stops_the_sessions_running_requests() {
    let (server, mut started, mut dropped) = server_with_park().await;
    let mut client = server.client();
    client.initialize().await;
    let _stream = client.call_stream("park", json!({}), None).await;
    within("the tool to start", started.recv()).await;
    let delete = client.delete();
    assert_eq!(Client::send(delete).await.status(), 200);
    assert!(
        within("the tool's work to be dropped", dropped.recv())
            .await
            .is_some()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn shutdown_stops_running_requests() {
    let (server, mut started, mut dropped) = server_with_park().await;
    let mut client = server.client();
    client.initialize().await;
    let _stream = client.call_stream("park", json!({}), None).await;
    within("the tool to start", started.recv()).await;
    within("shutdown", server.shutdown()).await;
    assert!(
        within("the tool's work to be dropped", dropped.recv())
            .await
            .is_some()
    );
}

#[tokio::test]
async fn notifications_cancelled_stops_that_request_and_no_other() {
    let (server, mut started, mut dropped) = server_with_park().await;
    let mut client = server.client();
    client.initialize().await;
    // Two parked requests with known ids.
    let call = |id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "park", "arguments": {}}})
    };
    let first = Client::send(client.post(&call(101))).await;
    within("the first tool to start", started.recv()).await;
    let second = Client::send(client.post(&call(102))).await;
    within("the second tool to start", started.recv()).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 101, "reason": "user gave up"}});
    assert_eq!(Client::send(client.post(&cancel)).await.status(), 202);
    assert!(
        within("the cancelled request's work to be dropped", dropped.recv())
            .await
            .is_some()
    );
    let session = client.session_id();
    common::eventually("only the other request to hold the session", || async {
        let info = server.app.session_info(session).await.ok()?;
        (info.open == 1).then_some(())
    })
    .await;
    assert!(dropped.try_recv().is_err(), "only one tool was stopped");
    let ended = common::SseReader::new(first).rest().await;
    assert!(
        ended.iter().all(|f| !f.is_response()),
        "no response to a cancelled request"
    );
    // The stream ended for good: a resume replays what there is and closes at once.
    let priming = ended.first().and_then(|f| f.id.clone()).unwrap_or_default();
    let resumed = client.resume(&priming).await.rest().await;
    assert!(resumed.iter().all(|f| !f.is_response()));
    drop(second);
    server.shutdown().await;
}

#[tokio::test]
async fn a_request_id_still_in_use_is_refused() {
    let (server, mut started, _dropped) = server_with_park().await;
    let mut client = server.client();
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "park", "arguments": {}}});
    let first = Client::send(client.post(&call)).await;
    assert_eq!(first.status(), 200);
    within("the tool to start", started.recv()).await;
    let again = Client::send(client.post(&call)).await;
    assert_eq!(again.status(), 400, "id 7 is running");
    drop(first);
    server.shutdown().await;
}
