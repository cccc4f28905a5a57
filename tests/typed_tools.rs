//! Typed tools: the input schema (JSON Schema 2020-12) comes from the argument type,
//! arguments that do not fit are a result with `isError`, and structured tools declare an
//! output schema and return `structuredContent`.

mod common;

use common::TestServer;
use otpmcp::McpServer;
use otpmcp::handler::ToolRegistry;
use otpmcp::handler::tools::{structured_tool, typed_tool};
use otpmcp::protocol::methods::CallToolResult;
use serde_json::{Value, json};

/// Arguments of `add`.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Add {
    /// First addend.
    a: i64,
    /// Second addend.
    b: i64,
}

/// Result of `divide`.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Quotient {
    quotient: i64,
    remainder: i64,
}

async fn server() -> TestServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(typed_tool(
            "add",
            "Adds two integers.",
            |args: Add, _| async move { Ok(CallToolResult::text((args.a + args.b).to_string())) },
        ))
        .register(structured_tool(
            "divide",
            "Divides a by b.",
            |args: Add, _| async move {
                if args.b == 0 {
                    return Err(otpmcp::handler::ToolError::Failed(
                        "division by zero".into(),
                    ));
                }
                Ok(Quotient {
                    quotient: args.a / args.b,
                    remainder: args.a % args.b,
                })
            },
        ));
    TestServer::start_with(|_| {}, McpServer::new(tools)).await
}

#[tokio::test]
async fn schemas_are_generated_from_the_types() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let list = client.ask("tools/list", json!({})).await;
    let add = &list["result"]["tools"][0];
    assert_eq!(
        add["inputSchema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert_eq!(add["inputSchema"]["type"], "object");
    assert_eq!(add["inputSchema"]["properties"]["a"]["type"], "integer");
    assert_eq!(
        add["inputSchema"]["properties"]["a"]["description"],
        "First addend."
    );
    assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]));
    assert!(add.get("outputSchema").is_none());
    let divide = &list["result"]["tools"][1];
    assert_eq!(
        divide["outputSchema"]["properties"]["quotient"]["type"],
        "integer"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn arguments_are_checked_against_the_type() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let ok = client
        .ask(
            "tools/call",
            json!({"name": "add", "arguments": {"a": 2, "b": 3}}),
        )
        .await;
    assert_eq!(ok["result"]["content"][0]["text"], "5");
    let bad = client
        .ask(
            "tools/call",
            json!({"name": "add", "arguments": {"a": "two", "b": 3}}),
        )
        .await;
    // Issue 23, part 6: arguments that do not fit are a tool result with `isError` and
    // serde's explanation, so the model can correct the call (they were -32602); an
    // unknown tool stays -32602.
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    let text = |v: &Value| {
        v["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
    };
    assert!(
        text(&bad).is_some_and(|t| t.contains("Invalid arguments for tool add")),
        "{bad}"
    );
    let missing = client
        .ask("tools/call", json!({"name": "add", "arguments": {"a": 2}}))
        .await;
    assert_eq!(missing["result"]["isError"], true, "{missing}");
    assert!(
        text(&missing).is_some_and(|t| t.contains("missing field `b`")),
        "{missing}"
    );
    let unknown = client
        .ask("tools/call", json!({"name": "nope", "arguments": {}}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    server.shutdown().await;
}

#[tokio::test]
async fn structured_tools_return_structured_content_and_text() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    let answer = client
        .ask(
            "tools/call",
            json!({"name": "divide", "arguments": {"a": 7, "b": 2}}),
        )
        .await;
    assert_eq!(
        answer["result"]["structuredContent"],
        json!({"quotient": 3, "remainder": 1})
    );
    let text: Value = serde_json::from_str(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default(),
    )
    .unwrap_or_default();
    assert_eq!(
        text,
        json!({"quotient": 3, "remainder": 1}),
        "the same JSON as text"
    );
    let failed = client
        .ask(
            "tools/call",
            json!({"name": "divide", "arguments": {"a": 7, "b": 0}}),
        )
        .await;
    assert_eq!(failed["result"]["isError"], true);
    server.shutdown().await;
}
