//! docs/guide.md's "Testing your server", compiled and run: the guide's server
//! (examples/guide/hello_mcp.rs) stands for a user's `src/lib.rs`, named as their crate would be,
//! and the rest of this file is the guide's `tests/server.rs` (tests/docs.rs checks that
//! the block is this file's text).

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/guide/hello_mcp.rs"]
mod hello_mcp;

use otpmcp::client::Client;
use otpmcp::prelude::*;
use serde_json::json;

#[tokio::test]
async fn count_reports_progress() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default();
    config.server.bind = ([127, 0, 0, 1], 0).into(); // a free port
    let app = start_with(config, hello_mcp::server()).await?;
    let client = Client::http(app.url()).connect().await?; // initialize: a session

    // With a progressToken: the answer is an SSE stream, its progress collected.
    let counted = client
        .call_tool_with_progress("count", json!({"to": 2}))
        .await?;
    assert_eq!(counted.text(), "counted to 2");
    assert_eq!(counted.progress.len(), 2);

    // This client declared no elicitation, so greet cannot ask: -32021.
    let greeted = client.call_tool("greet", json!({})).await;
    assert_eq!(greeted.err().and_then(|e| e.code()), Some(-32021));

    client.close().await?; // DELETE of the session
    app.shutdown().await;
    Ok(())
}

#[tokio::test]
async fn count_runs_as_a_task_over_stdio() -> Result<(), Box<dyn std::error::Error>> {
    let client = Client::stdio(Config::default(), hello_mcp::server())
        .stateless() // 2026-07-28, where tasks are
        .connect()
        .await?;
    let task = client.start_task("count", json!({"to": 1})).await?;
    assert_eq!(client.task_result(&task).await?.text(), "counted to 1");
    client.close().await?; // end of input: the server stops
    Ok(())
}
