//! A server with every fixture the official MCP conformance suite asks for.
//!
//! Run: `cargo run --release --example everything -- --bind 127.0.0.1:PORT`
//! (without `--bind`: the address from sys.toml). Prints the URL it serves, like `otpmcp`.
//! With `--stdio` it serves the same fixtures on stdin and stdout instead, until stdin
//! closes.

use std::time::Duration;

use otpmcp::prelude::*;
use otpmcp::protocol::methods::{CompletionArgument, CompletionRef};
use serde::Deserialize;
use serde_json::{Value, json};

mod stateless;
mod tasks;

/// A 1×1 red PNG.
const PNG: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";
/// A WAV file with no samples.
const WAV: &str = "UklGRiQAAABXQVZFZm10IBAAAAABAAEAQB8AAIA+AAACABAAZGF0YQAAAAA=";

/// Asks the client's LLM.
#[derive(Deserialize, JsonSchema)]
struct SamplingArgs {
    /// What to ask.
    prompt: String,
}

/// Asks the user for a username and an email.
#[derive(Deserialize, JsonSchema)]
struct ElicitationArgs {
    /// What to tell the user.
    message: String,
}

/// Asks the client to fill `schema`; formats the answer as `"{prefix}action=…, content=…"`.
/// The same call is a server→client request on a session and an `input_required` round on
/// a stateless request.
async fn elicit(
    ctx: &RequestContext,
    message: &str,
    schema: Value,
    prefix: &str,
) -> Result<CallToolResult, ToolError> {
    let answer = ctx.elicit(Elicitation::form(message, schema)).await?;
    let action = serde_json::to_value(answer.action)?;
    let content = answer.content.map_or(Value::Null, Value::Object);
    Ok(CallToolResult::text(format!(
        "{prefix}action={}, content={content}",
        action.as_str().unwrap_or("unknown")
    )))
}

fn tools() -> ToolRegistry {
    let mut tools = ToolRegistry::default();
    tools
        .register(tool("test_simple_text", |(), _| async {
            Ok(CallToolResult::text("This is a simple text response for testing."))
        }).description("Returns simple text."))
        .register(tool("test_image_content", |(), _| async {
            Ok(CallToolResult::content(vec![Content::image(PNG, "image/png")]))
        }).description("Returns an image."))
        .register(tool("test_audio_content", |(), _| async {
            Ok(CallToolResult::content(vec![Content::audio(WAV, "audio/wav")]))
        }).description("Returns audio."))
        .register(tool("test_embedded_resource", |(), _| async {
            Ok(CallToolResult::content(vec![Content::text_resource(
                "test://embedded-resource",
                "text/plain",
                "This is an embedded resource content.",
            )]))
        }).description("Returns an embedded resource."))
        .register(tool("test_multiple_content_types", |(), _| async {
            Ok(CallToolResult::content(vec![
                Content::text("Multiple content types test:"),
                Content::image(PNG, "image/png"),
                Content::text_resource(
                    "test://mixed-content-resource",
                    "application/json",
                    r#"{"test":"data","value":123}"#,
                ),
            ]))
        }).description("Returns text, an image and a resource."))
        .register(tool("test_tool_with_logging", |(), ctx| async move {
            for (i, text) in ["Tool execution started", "Tool processing data", "Tool execution completed"].iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ctx.log(LoggingLevel::Info, Some("test_tool_with_logging"), json!(text)).await?;
            }
            Ok(CallToolResult::text("Tool with logging executed successfully"))
        }).description("Logs three messages while it runs."))
        .register(tool("test_error_handling", |(), _| async {
            Err::<String, _>(ToolError::Failed("This tool intentionally returns an error for testing".into()))
        }).description("Always fails."))
        .register(tool("test_tool_with_progress", |(), ctx| async move {
            for (i, p) in [0.0, 50.0, 100.0].into_iter().enumerate() {
                if i > 0 {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                ctx.progress(p, Some(100.0), None).await?;
            }
            Ok(CallToolResult::text("Tool with progress executed successfully"))
        }).description("Reports progress 0, 50, 100 of 100."))
        .register(tool("test_sampling", |args: SamplingArgs, ctx| async move {
            let answer = ctx.sample(Sampling::prompt(args.prompt, 100)).await?;
            Ok(CallToolResult::text(format!("LLM response: {}", answer.text().unwrap_or_default())))
        }))
        .register(tool("test_elicitation", |args: ElicitationArgs, ctx| async move {
                let schema = json!({"type": "object", "properties": {
                    "username": {"type": "string", "description": "User's response"},
                    "email": {"type": "string", "description": "User's email address"}},
                    "required": ["username", "email"]});
                elicit(&ctx, &args.message, schema, "User response: ").await
            }))
        .register(tool("test_elicitation_sep1034_defaults", |(), ctx| async move {
            let schema = json!({"type": "object", "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "score": {"type": "number", "default": 95.5},
                "status": {"type": "string", "enum": ["active", "inactive", "pending"], "default": "active"},
                "verified": {"type": "boolean", "default": true}}});
            elicit(&ctx, "Please review your details", schema, "Elicitation completed: ").await
        }).description("Elicitation with defaults."))
        .register(tool("test_elicitation_sep1330_enums", |(), ctx| async move {
            let schema = json!({"type": "object", "properties": {
                "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
                "titledSingle": {"type": "string", "oneOf": [
                    {"const": "value1", "title": "First Option"},
                    {"const": "value2", "title": "Second Option"},
                    {"const": "value3", "title": "Third Option"}]},
                "legacyEnum": {"type": "string", "enum": ["opt1", "opt2", "opt3"],
                               "enumNames": ["Option One", "Option Two", "Option Three"]},
                "untitledMulti": {"type": "array", "items": {"type": "string", "enum": ["option1", "option2", "option3"]}},
                "titledMulti": {"type": "array", "items": {"anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"}]}}}});
            elicit(&ctx, "Pick your options", schema, "Elicitation completed: ").await
        }).description("Elicitation with every enum form."))
        // Its schema by hand: the suite checks that every 2020-12 keyword arrives as written.
        .register(tool("json_schema_2020_12_tool", |(), _| async { Ok("ok") }).description("Tool with JSON Schema 2020-12 features").input_schema(json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "$defs": {"address": {"$anchor": "addressDef", "type": "object",
                    "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
                "properties": {
                    "name": {"type": "string"},
                    "address": {"$ref": "#/$defs/address"},
                    "contactMethod": {"type": "string", "enum": ["phone", "email"]},
                    "phone": {"type": "string"},
                    "email": {"type": "string"}},
                "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
                "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
                "then": {"required": ["phone"]},
                "else": {"required": ["email"]},
                "additionalProperties": false
            })))
        .register(tool("test_reconnection", |(), ctx| async move {
                ctx.close_connection().await;
                tokio::time::sleep(Duration::from_millis(100)).await;
                Ok(CallToolResult::text("Reconnection test completed"))
            }).description("Closes its SSE connection mid-call; the result arrives when the client polls back."));
    stateless::tools(&mut tools);
    tasks::tools(&mut tools);
    tools
}

fn text_contents(uri: &str, mime: &str, text: impl Into<String>) -> Vec<ResourceContents> {
    vec![ResourceContents {
        uri: uri.into(),
        mime_type: Some(mime.into()),
        text: Some(text.into()),
        blob: None,
    }]
}

fn resource(uri: &str, name: &str, description: &str, mime: &str) -> ResourceDefinition {
    ResourceDefinition {
        uri: uri.into(),
        name: name.into(),
        description: description.into(),
        mime_type: Some(mime.into()),
    }
}

fn resources() -> ResourceRegistry {
    let mut resources = ResourceRegistry::default();
    resources
        .resource(
            resource(
                "test://static-text",
                "static-text",
                "A static text resource",
                "text/plain",
            ),
            |uri, _| async move {
                Ok(text_contents(
                    &uri,
                    "text/plain",
                    "This is the content of the static text resource.",
                ))
            },
        )
        .resource(
            resource(
                "test://static-binary",
                "static-binary",
                "A static binary resource",
                "image/png",
            ),
            |uri, _| async move {
                Ok(vec![ResourceContents {
                    uri,
                    mime_type: Some("image/png".into()),
                    text: None,
                    blob: Some(PNG.into()),
                }])
            },
        )
        .resource(
            resource(
                "test://watched-resource",
                "watched-resource",
                "A resource clients may subscribe to",
                "text/plain",
            ),
            |uri, _| async move {
                Ok(text_contents(
                    &uri,
                    "text/plain",
                    "Watched resource content.",
                ))
            },
        )
        .template(
            ResourceTemplateDefinition {
                uri_template: "test://template/{id}/data".into(),
                name: "template-data".into(),
                description: "Data for an id".into(),
                mime_type: Some("application/json".into()),
            },
            |uri, vars, _| async move {
                let id = vars.get("id").cloned().unwrap_or_default();
                let body =
                    json!({"id": id, "templateTest": true, "data": format!("Data for ID: {id}")});
                Ok(text_contents(&uri, "application/json", body.to_string()))
            },
        );
    resources
}

fn user(content: Content) -> PromptMessage {
    PromptMessage {
        role: Role::User,
        content,
    }
}

fn prompt(name: &str, description: &str, args: &[(&str, &str)]) -> PromptDefinition {
    PromptDefinition {
        name: name.into(),
        description: description.into(),
        arguments: args
            .iter()
            .map(|(n, d)| PromptArgument {
                name: (*n).into(),
                description: Some((*d).into()),
                required: true,
            })
            .collect(),
    }
}

fn arg(args: &serde_json::Map<String, Value>, name: &str) -> Result<String, PromptError> {
    args.get(name)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| PromptError::InvalidParams(format!("`{name}` must be a string")))
}

fn prompts() -> PromptRegistry {
    let mut prompts = PromptRegistry::default();
    prompts
        .prompt(
            prompt("test_simple_prompt", "A prompt without arguments", &[]),
            |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![user(Content::text("This is a simple prompt for testing."))],
                })
            },
        )
        .prompt(
            prompt(
                "test_prompt_with_arguments",
                "A prompt with two arguments",
                &[
                    ("arg1", "First test argument"),
                    ("arg2", "Second test argument"),
                ],
            ),
            |args, _| async move {
                let (a, b) = (arg(&args, "arg1")?, arg(&args, "arg2")?);
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![user(Content::text(format!(
                        "Prompt with arguments: arg1='{a}', arg2='{b}'"
                    )))],
                })
            },
        )
        .prompt(
            prompt(
                "test_prompt_with_embedded_resource",
                "A prompt embedding a resource",
                &[("resourceUri", "URI of the resource to embed")],
            ),
            |args, _| async move {
                let uri = arg(&args, "resourceUri")?;
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![
                        user(Content::text_resource(
                            uri,
                            "text/plain",
                            "Embedded resource content for testing.",
                        )),
                        user(Content::text("Please process the embedded resource above.")),
                    ],
                })
            },
        )
        .prompt(
            prompt("test_prompt_with_image", "A prompt with an image", &[]),
            |_, _| async {
                Ok(GetPromptResult {
                    description: None,
                    messages: vec![
                        user(Content::image(PNG, "image/png")),
                        user(Content::text("Please analyze the image above.")),
                    ],
                })
            },
        );
    stateless::prompts(&mut prompts);
    prompts
}

/// Suggestions for `test_prompt_with_arguments`' arguments, filtered by what was typed.
async fn complete(
    reference: CompletionRef,
    argument: CompletionArgument,
    _: RequestContext,
) -> Vec<String> {
    let candidates: &[&str] = match reference {
        CompletionRef::Prompt { .. } => &["paris", "park", "party", "hello", "world"],
        CompletionRef::Resource { .. } => &["1", "2", "3", "123"],
    };
    candidates
        .iter()
        .filter(|c| c.starts_with(argument.value.as_str()))
        .map(|c| (*c).to_owned())
        .collect()
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let (mut bind, mut stdio) = (None, false);
    while let Some(arg) = args.next() {
        let understood = match arg.as_str() {
            "--stdio" => {
                stdio = true;
                true
            }
            "--bind" => {
                bind = args.next().and_then(|addr| addr.parse().ok());
                bind.is_some()
            }
            _ => false,
        };
        if !understood {
            eprintln!("usage: everything [--bind ADDR:PORT | --stdio]");
            return std::process::ExitCode::from(2);
        }
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    // Over stdio a client starts this inside a workspace: no ./sys.toml from there.
    let loaded = match stdio {
        true => Config::load_overlays(&[]),
        false => Config::load(&cwd, &[]),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(e) => {
            eprintln!("everything: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(bind) = bind {
        config.server.bind = bind;
    }
    // The skills extension's fixtures (SEP-2640), read once at start.
    let skills_root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/everything/skills");
    let skills = match otpmcp::handler::SkillsDirectory::open(skills_root) {
        Ok(skills) => skills,
        Err(e) => {
            eprintln!("everything: skills: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let server = McpServer::new(tools())
        .with_resources(resources())
        .with_prompts(prompts())
        .with_completion(complete)
        .with_skills(skills);
    if stdio {
        return match otpmcp::serve_stdio(config, server).await {
            Ok(otpmcp::Exit::Shutdown) => std::process::ExitCode::SUCCESS,
            Ok(otpmcp::Exit::Escalated(why)) => {
                eprintln!("everything: {why}");
                std::process::ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("everything: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let app = match otpmcp::start_with(config, server).await {
        Ok(app) => app,
        Err(e) => {
            eprintln!("everything: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    println!("otpmcp serving MCP at {}", app.url());
    let _ = tokio::signal::ctrl_c().await;
    app.shutdown().await;
    std::process::ExitCode::SUCCESS
}
