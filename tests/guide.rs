//! docs/guide.md's snippets, compiled and run: tests/docs.rs checks that every Rust block
//! of the guide is a piece of this file or of an example. The guide's server is
//! examples/guide/ itself, tested in tests/guide_testing.rs.

#![allow(dead_code)]

use otpmcp::client::Client;
use otpmcp::prelude::*;
use otpmcp::protocol::methods::CompletionRef;
use serde_json::json;

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
    let client = Client::http(app.url()).stateless().connect().await?;
    let added = client.call_tool("add", json!({"a": 2, "b": 3})).await?;
    assert_eq!(added.text(), "5");
    let divided = client.call_tool("divide", json!({"a": 7, "b": 2})).await?;
    assert_eq!(
        divided.structured_content,
        Some(json!({"quotient": 3, "remainder": 1}))
    );
    let by_zero = client.call_tool("divide", json!({"a": 1, "b": 0})).await?;
    assert!(by_zero.is_error);
    let hello = client.call_tool("hello", json!({})).await?;
    assert_eq!(hello.text(), "Hello!");
    app.shutdown().await;
    Ok(())
}
