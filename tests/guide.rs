//! docs/guide.md's snippets, compiled and run: tests/docs.rs checks that every Rust block
//! of the guide is a piece of this file or of an example. The guide's server is
//! examples/guide.rs itself.

#![allow(dead_code)]

#[path = "../examples/guide.rs"]
mod guide;

#[derive(serde::Deserialize, JsonSchema)]
struct Pair {
    /// The dividend.
    a: i64,
    /// The divisor.
    b: i64,
}

#[derive(serde::Serialize, JsonSchema)]
struct Quotient {
    quotient: i64,
    remainder: i64,
}

/// Three tools: typed arguments, structured output, and state the closure captures.
fn tools(greeting: String) -> ToolRegistry {
    let mut tools = ToolRegistry::default();
    tools
        .register(
            tool(
                "add",
                |p: Pair, _ctx| async move { Ok((p.a + p.b).to_string()) },
            )
            .description("Adds a and b."),
        )
        .register(
            tool("divide", |p: Pair, _ctx| async move {
                if p.b == 0 {
                    return Err(ToolError::Failed("division by zero".into()));
                }
                Ok(Json(Quotient {
                    quotient: p.a / p.b,
                    remainder: p.a % p.b,
                }))
            })
            .description("Divides a by b."),
        )
        // No arguments; state of its own is whatever the closure captures.
        .register(
            tool("hello", move |(), _ctx| {
                let text = format!("{greeting}!");
                async move { Ok(text) }
            })
            .description("Says hello.")
            .scopes(["mcp:hello"]),
        );
    tools
}

fn completing(tools: ToolRegistry) -> McpServer {
    McpServer::new(tools).with_completion(|reference, argument, _ctx| async move {
        let names: &[&str] = match reference {
            CompletionRef::Prompt { .. } => &["alice", "bob"],
            CompletionRef::Resource { .. } => &[],
        };
        names
            .iter()
            .filter(|n| n.starts_with(&argument.value))
            .map(|n| n.to_string())
            .collect()
    })
}

#[tokio::test]
async fn the_guides_tools_answer() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default();
    config.server.bind = ([127, 0, 0, 1], 0).into();
    let app = start_with(config, completing(tools("Hello".into()))).await?;
    let added = call(&app, "add", json!({"a": 2, "b": 3})).await?;
    assert_eq!(added["result"]["content"][0]["text"], "5", "{added}");
    let divided = call(&app, "divide", json!({"a": 7, "b": 2})).await?;
    let quotient = &divided["result"]["structuredContent"];
    assert_eq!(
        *quotient,
        json!({"quotient": 3, "remainder": 1}),
        "{divided}"
    );
    let by_zero = call(&app, "divide", json!({"a": 1, "b": 0})).await?;
    assert_eq!(by_zero["result"]["isError"], true, "{by_zero}");
    let hello = call(&app, "hello", json!({})).await?;
    assert_eq!(hello["result"]["content"][0]["text"], "Hello!", "{hello}");
    app.shutdown().await;
    Ok(())
}

// The guide's "Testing your server": a test of examples/guide.rs's server, over HTTP.
use otpmcp::prelude::*;
use serde_json::{Value, json};

/// One stateless (2026-07-28) request to `app`: its revision and the client's
/// capabilities travel in `_meta`, its method and target in headers too.
async fn call(
    app: &App,
    tool: &str,
    arguments: Value,
) -> Result<Value, Box<dyn std::error::Error>> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": {}}}});
    let response = reqwest::Client::new()
        .post(app.url())
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", tool)
        .body(body.to_string())
        .send()
        .await?;
    Ok(serde_json::from_slice(&response.bytes().await?)?)
}

#[tokio::test]
async fn count_answers_and_greet_needs_elicitation() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = Config::default();
    config.server.bind = ([127, 0, 0, 1], 0).into(); // a free port
    let app = start_with(config, guide::server()).await?;

    let counted = call(&app, "count", json!({"to": 0})).await?;
    assert_eq!(counted["result"]["content"][0]["text"], "counted to 0");

    // This client declared no elicitation, so greet cannot ask: -32021.
    let greeted = call(&app, "greet", json!({})).await?;
    assert_eq!(greeted["error"]["code"], -32021);

    app.shutdown().await;
    Ok(())
}
