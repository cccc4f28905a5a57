//! The fixtures the 2026-07-28 scenarios of the conformance suite call: tools and a prompt
//! that ask the client for input (answered over several rounds on a stateless request, or
//! as server→client requests on a session), a tool whose argument travels in a header, and
//! tools that announce list changes.

use otpmcp::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

/// Echoes its region, which also travels in the Mcp-Param-Region header.
#[derive(Deserialize, JsonSchema)]
struct CustomHeaders {
    /// The region; the client mirrors it into the `Mcp-Param-Region` header.
    #[schemars(extend("x-mcp-header" = "Region"))]
    region: String,
}

fn text_field(name: &str) -> Value {
    json!({"type": "object", "properties": {name: {"type": "string"}}, "required": [name]})
}

/// `content[field]` of an accepted elicitation, or what happened instead.
fn field(answer: &ElicitResult, name: &str) -> String {
    answer
        .content
        .as_ref()
        .and_then(|c| c.get(name))
        .map_or_else(
            || format!("({:?})", answer.action),
            |v| v.as_str().map_or_else(|| v.to_string(), str::to_owned),
        )
}

async fn ask_name(ctx: &RequestContext, key: &str) -> Result<String, ToolError> {
    let form = Elicitation::form("What is your name?", text_field("name"));
    Ok(field(&ctx.ask_as(Some(key), form).await?, "name"))
}

/// Registers the tools.
pub(crate) fn tools(tools: &mut ToolRegistry) {
    tools
        .register(
            tool("test_missing_capability", |(), ctx| async move {
                let answer = ctx.sample(Sampling::prompt("Say hello.", 20)).await?;
                Ok(CallToolResult::text(answer.text().unwrap_or_default()))
            })
            .description("Needs the client's sampling capability."),
        )
        .register(
            tool("test_streaming_elicitation", |(), ctx| async move {
                Ok(CallToolResult::text(format!(
                    "Hello, {}!",
                    ask_name(&ctx, "user_name").await?
                )))
            })
            .description("Asks the user a question mid-call."),
        )
        .register(
            tool("test_logging_tool", |(), ctx| async move {
                ctx.log(
                    LoggingLevel::Info,
                    Some("test_logging_tool"),
                    json!("logged"),
                )
                .await?;
                Ok(CallToolResult::text("Logging tool done"))
            })
            .description("Logs a message when the request asks for logs."),
        )
        .register(
            tool("test_trigger_tool_change", |(), ctx| async move {
                ctx.notify_list_changed(ListKind::Tools).await?;
                Ok(CallToolResult::text("tools/list_changed sent"))
            })
            .description("Announces that the tool list changed."),
        )
        .register(
            tool("test_trigger_prompt_change", |(), ctx| async move {
                ctx.notify_list_changed(ListKind::Prompts).await?;
                Ok(CallToolResult::text("prompts/list_changed sent"))
            })
            .description("Announces that the prompt list changed."),
        )
        .register(
            tool(
                "test_input_required_result_elicitation",
                |(), ctx| async move {
                    Ok(CallToolResult::text(format!(
                        "Hello, {}!",
                        ask_name(&ctx, "user_name").await?
                    )))
                },
            )
            .description("Asks the user's name."),
        )
        .register(
            tool(
                "test_input_required_result_sampling",
                |(), ctx| async move {
                    let answer = ctx
                        .ask_as(
                            Some("capital_question"),
                            Sampling::prompt("What is the capital of France?", 100),
                        )
                        .await?;
                    Ok(CallToolResult::text(format!(
                        "The model said: {}",
                        answer.text().unwrap_or_default()
                    )))
                },
            )
            .description("Asks the client's model a question."),
        )
        .register(
            tool(
                "test_input_required_result_list_roots",
                |(), ctx| async move {
                    let roots = ctx
                        .ask_as(Some("client_roots"), otpmcp::protocol::client::ListRoots {})
                        .await?
                        .roots;
                    let uris: Vec<_> = roots.iter().map(|r| r.uri.as_str()).collect();
                    Ok(CallToolResult::text(format!("Roots: {}", uris.join(", "))))
                },
            )
            .description("Lists the client's roots."),
        )
        .register(
            tool("test_input_required_result_request_state", confirm)
                .description("Asks for a confirmation."),
        )
        .register(
            tool("test_input_required_result_tampered_state", confirm)
                .description("Asks for a confirmation."),
        )
        .register(
            tool(
                "test_input_required_result_multiple_inputs",
                |(), ctx| async move {
                    // Asked together, so one round carries all three questions.
                    let (name, greeting, roots) = tokio::join!(
                        ask_name(&ctx, "user_name"),
                        ctx.ask_as(
                            Some("greeting"),
                            Sampling::prompt("Write a one-line greeting.", 50)
                        ),
                        ctx.ask_as(Some("client_roots"), otpmcp::protocol::client::ListRoots {}),
                    );
                    let (name, greeting, roots) = (name?, greeting?, roots?);
                    Ok(CallToolResult::text(format!(
                        "{} {name} ({} roots)",
                        greeting.text().unwrap_or_default(),
                        roots.roots.len()
                    )))
                },
            )
            .description("Asks three things at once."),
        )
        .register(
            tool(
                "test_input_required_result_multi_round",
                |(), ctx| async move {
                    let name = ask_name(&ctx, "step1").await?;
                    let color = ctx
                        .ask_as(
                            Some("step2"),
                            Elicitation::form(
                                format!("{name}, what is your favourite colour?"),
                                text_field("color"),
                            ),
                        )
                        .await?;
                    Ok(CallToolResult::text(format!(
                        "{name} likes {}",
                        field(&color, "color")
                    )))
                },
            )
            .description("Asks two questions, one after the other."),
        )
        .register(
            tool(
                "test_input_required_result_capabilities",
                |(), ctx| async move {
                    let mut said = Vec::new();
                    if ctx.client_supports("sampling") {
                        let answer = ctx
                            .ask_as(
                                Some("model_opinion"),
                                Sampling::prompt("Anything to add?", 50),
                            )
                            .await?;
                        said.push(answer.text().unwrap_or_default().to_owned());
                    }
                    if ctx.client_supports("elicitation") {
                        said.push(ask_name(&ctx, "user_name").await?);
                    }
                    Ok(CallToolResult::text(format!("Heard: {}", said.join("; "))))
                },
            )
            .description("Asks only what the client declared it can answer."),
        )
        .register(tool(
            "test_custom_headers",
            |args: CustomHeaders, _| async move { Ok(format!("region {}", args.region)) },
        ));
}

async fn confirm((): (), ctx: RequestContext) -> Result<CallToolResult, ToolError> {
    let form = Elicitation::form(
        "Please confirm",
        json!({"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}),
    );
    let answer = ctx.ask_as(Some("confirm"), form).await?;
    let ok = answer
        .content
        .as_ref()
        .and_then(|c| c.get("ok"))
        .and_then(Value::as_bool)
        == Some(true);
    Ok(CallToolResult::text(if ok {
        "state-ok: confirmed"
    } else {
        "state-ok: not confirmed"
    }))
}

/// Registers the prompt that asks for input.
pub(crate) fn prompts(prompts: &mut PromptRegistry) {
    let definition = PromptDefinition {
        name: "test_input_required_result_prompt".into(),
        description: "A prompt that asks the user for context first".into(),
        arguments: Vec::new(),
    };
    prompts.prompt(definition, |_, ctx| async move {
        let form = Elicitation::form("What context should the prompt use?", text_field("context"));
        let answer = ctx
            .ask_as(Some("user_context"), form)
            .await
            .map_err(|e| PromptError::Failed(e.to_string()))?;
        Ok(GetPromptResult {
            description: None,
            messages: vec![PromptMessage {
                role: Role::User,
                content: Content::text(format!("Use this context: {}", field(&answer, "context"))),
            }],
        })
    });
}
