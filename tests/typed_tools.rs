//! Tools made by `tool(name, handler)`: the input schema (JSON Schema 2020-12) comes from
//! the argument type, arguments that do not fit are a result with `isError`, a tool of
//! `()` takes no arguments, and a tool returning `Json<T>` declares an output schema and
//! returns `structuredContent`.

mod common;

use common::TestServer;
use otpmcp::McpServer;
use otpmcp::prelude::*;
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
        .register(
            tool("add", |args: Add, _| async move {
                Ok(CallToolResult::text((args.a + args.b).to_string()))
            })
            .description("Adds two integers."),
        )
        .register(
            tool("divide", |args: Add, _| async move {
                if args.b == 0 {
                    return Err(ToolError::Failed("division by zero".into()));
                }
                Ok(Json(Quotient {
                    quotient: args.a / args.b,
                    remainder: args.a % args.b,
                }))
            })
            .description("Divides a by b."),
        )
        .register(tool("ping", |(), _| async { Ok("pong") }));
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
    let ping = &list["result"]["tools"][2];
    assert_eq!(
        ping["inputSchema"],
        json!({"type": "object", "properties": {}})
    );
    assert_eq!(ping["description"], "ping", "no doc comment: the name");
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

#[tokio::test]
async fn a_tool_of_unit_ignores_what_it_is_given() {
    let server = server().await;
    let mut client = server.client();
    client.initialize().await;
    for arguments in [json!({}), json!({"stray": 1})] {
        let answer = client
            .ask(
                "tools/call",
                json!({"name": "ping", "arguments": arguments}),
            )
            .await;
        assert_eq!(answer["result"]["content"][0]["text"], "pong", "{answer}");
    }
    let bare = client.ask("tools/call", json!({"name": "ping"})).await;
    assert_eq!(bare["result"]["content"][0]["text"], "pong", "{bare}");
    server.shutdown().await;
}

/// Issue 38, item 4: the two error types application code uses most convert with `?`,
/// each a result with `isError` and its own message (only the outermost context of an
/// `anyhow::Error`, not its chain).
#[tokio::test]
async fn anyhow_and_boxed_errors_convert_with_the_question_mark() {
    async fn parse_anyhow(text: &str) -> anyhow::Result<i64> {
        use anyhow::Context;
        text.parse::<i64>()
            .with_context(|| format!("`{text}` is not a number"))
    }
    fn parse_boxed(text: &str) -> Result<i64, Box<dyn std::error::Error + Send + Sync>> {
        if text.is_empty() {
            return Err("nothing to parse".into());
        }
        Ok(text.parse::<i64>()?)
    }
    /// Text to read as an integer.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Text {
        text: String,
    }
    let mut tools = ToolRegistry::default();
    tools
        .register(tool("anyhow", |args: Text, _| async move {
            let n = parse_anyhow(&args.text).await?;
            Ok(n.to_string())
        }))
        .register(tool("boxed", |args: Text, _| async move {
            let n = parse_boxed(&args.text)?;
            Ok(n.to_string())
        }));
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let mut client = server.client();
    client.initialize().await;
    let call = |name: &'static str, text: &'static str| {
        let client = &client;
        async move {
            client
                .ask(
                    "tools/call",
                    json!({"name": name, "arguments": {"text": text}}),
                )
                .await
        }
    };
    let fine = call("anyhow", "41").await;
    assert_eq!(fine["result"]["content"][0]["text"], "41", "{fine}");
    let failed = call("anyhow", "forty").await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert_eq!(
        failed["result"]["content"][0]["text"], "`forty` is not a number",
        "the context, not the parser's message under it: {failed}"
    );
    let fine = call("boxed", "7").await;
    assert_eq!(fine["result"]["content"][0]["text"], "7", "{fine}");
    let failed = call("boxed", "").await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    assert_eq!(
        failed["result"]["content"][0]["text"], "nothing to parse",
        "{failed}"
    );
    let failed = call("boxed", "seven").await;
    assert_eq!(
        failed["result"]["content"][0]["text"], "invalid digit found in string",
        "a std error boxed on the way: {failed}"
    );
    server.shutdown().await;
}

/// The message `tool` panics with when its argument type is `A`, if it does.
fn refusal<A>() -> Option<String>
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
{
    let made = std::panic::catch_unwind(|| {
        tool("t", |_: A, _| async { Ok("never called") });
    });
    let payload = made.err()?;
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
}

/// Issue 38, item 6: MCP passes a tool's arguments as an object, so a tool whose argument
/// type is not one could never be called; it is refused where it is made, with the fix.
#[test]
fn a_tool_whose_arguments_are_not_an_object_is_refused() {
    let string = refusal::<String>().unwrap_or_default();
    assert!(string.contains("tool `t`"), "{string}");
    assert!(string.contains("alloc::string::String"), "{string}");
    assert!(string.contains("wrap the value in a struct"), "{string}");
    assert!(string.contains("takes `()`"), "{string}");
    assert!(refusal::<u32>().is_some_and(|m| m.contains("\"integer\"")));
    assert!(refusal::<Vec<String>>().is_some_and(|m| m.contains("\"array\"")));
    assert_eq!(refusal::<()>(), None, "no arguments stays allowed");
    assert_eq!(refusal::<Add>(), None);
    assert_eq!(refusal::<serde_json::Map<String, Value>>(), None);
    /// Either shape; both are objects, so the enum is one too.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(tag = "shape")]
    #[allow(dead_code)] // only its schema is looked at
    enum Shape {
        Circle { radius: f64 },
        Square { side: f64 },
    }
    assert_eq!(refusal::<Shape>(), None, "an enum of objects is an object");
    let shape = tool("area", |_: Shape, _| async { Ok("") });
    assert_eq!(shape.definition().input_schema["type"], "object");
    /// Plain values: strings in JSON.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)]
    enum Colour {
        Red,
        Blue,
    }
    assert!(refusal::<Colour>().is_some());
    let by_hand = std::panic::catch_unwind(|| {
        tool("raw", |_: serde_json::Map<String, Value>, _| async {
            Ok("")
        })
        .input_schema(json!({"type": "string"}));
    });
    assert!(
        by_hand.is_err(),
        "a schema given by hand is held to the same rule"
    );
}

/// A one-pixel SVG, as a `data:` URI keeps an icon offline.
const SUN: &str =
    "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=";

/// Issue 38, item 5: a tool's title, behaviour hints and icons, and the server's own name, title
/// and version, as MCP 2025-11-25 spells them.
#[tokio::test]
async fn titles_annotations_and_server_info_are_listed() {
    let mut tools = ToolRegistry::default();
    tools
        .register(
            tool("forecast", |(), _| async { Ok("sunny") })
                .title("Weather forecast")
                .annotations(
                    ToolAnnotations::default()
                        .read_only(true)
                        .destructive(false)
                        .idempotent(true)
                        .open_world(true),
                )
                .icon(Icon::new(SUN).mime_type("image/svg+xml").size("any"))
                .icon(
                    Icon::new("https://example.com/sun-48.png")
                        .size("48x48")
                        .theme(IconTheme::Dark),
                ),
        )
        .register(tool("plain", |(), _| async { Ok("") }));
    let server = McpServer::new(tools)
        .named("weather", "2.3.1")
        .title("Weather Service")
        .icon(Icon::new(SUN));
    let server = TestServer::start_with(|_| {}, server).await;
    let mut client = server.client();
    let init = client.initialize().await;
    assert_eq!(
        init["result"]["serverInfo"],
        json!({
            "name": "weather",
            "title": "Weather Service",
            "version": "2.3.1",
            "icons": [{"src": SUN}],
        }),
        "{init}"
    );
    let list = client.ask("tools/list", json!({})).await;
    let forecast = &list["result"]["tools"][0];
    assert_eq!(forecast["title"], "Weather forecast", "{list}");
    assert_eq!(
        forecast["annotations"],
        json!({
            "readOnlyHint": true,
            "destructiveHint": false,
            "idempotentHint": true,
            "openWorldHint": true,
        }),
        "{list}"
    );
    assert_eq!(
        forecast["icons"],
        json!([
            {"src": SUN, "mimeType": "image/svg+xml", "sizes": ["any"]},
            {"src": "https://example.com/sun-48.png", "sizes": ["48x48"], "theme": "dark"},
        ]),
        "{list}"
    );
    let plain = &list["result"]["tools"][1];
    assert!(
        plain.get("title").is_none()
            && plain.get("annotations").is_none()
            && plain.get("icons").is_none(),
        "nothing declared, nothing sent: {plain}"
    );
    server.shutdown().await;
}

/// Arguments of the `trip` prompt.
#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Trip {
    /// Where to.
    city: String,
    /// How many days (a number, written as MCP passes every prompt argument: a string).
    days: Option<String>,
}

/// Issue 38, item 5: a prompt's arguments from a type, as a tool's are, over HTTP: listed
/// with their descriptions and whether they are required, decoded before the prompt runs,
/// a missing one refused with -32602.
#[tokio::test]
async fn typed_prompt_arguments_are_listed_and_decoded() {
    let mut prompts = PromptRegistry::default();
    prompts.register(
        prompt("trip", |args: Trip, _ctx| async move {
            let days: u32 = match args.days.as_deref() {
                Some(days) => days
                    .parse()
                    .map_err(|e| PromptError::InvalidParams(format!("days: {e}")))?,
                None => 2,
            };
            Ok(format!("Plan {days} days in {}.", args.city))
        })
        .description("Plans a trip."),
    );
    let server = McpServer::new(ToolRegistry::default()).with_prompts(prompts);
    let server = TestServer::start_with(|_| {}, server).await;
    let mut client = server.client();
    client.initialize().await;
    let list = client.ask("prompts/list", json!({})).await;
    assert_eq!(
        list["result"]["prompts"],
        json!([{
            "name": "trip",
            "description": "Plans a trip.",
            "arguments": [
                {
                    "name": "city",
                    "description": "Where to.",
                    "required": true,
                },
                {
                    "name": "days",
                    "description": "How many days (a number, written as MCP passes every prompt argument: a string).",
                    "required": false,
                },
            ],
        }]),
        "{list}"
    );
    let got = client
        .ask(
            "prompts/get",
            json!({"name": "trip", "arguments": {"city": "Lyon", "days": "3"}}),
        )
        .await;
    assert_eq!(
        got["result"]["messages"][0]["content"]["text"], "Plan 3 days in Lyon.",
        "{got}"
    );
    let missing = client
        .ask(
            "prompts/get",
            json!({"name": "trip", "arguments": {"days": "3"}}),
        )
        .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");
    let bad = client
        .ask(
            "prompts/get",
            json!({"name": "trip", "arguments": {"city": "Lyon", "days": "many"}}),
        )
        .await;
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
    server.shutdown().await;
}
