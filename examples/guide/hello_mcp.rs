//! The server of docs/guide.md, as a crate's `src/lib.rs`: its tools, resources and
//! prompts, for `src/main.rs` to serve and `tests/` to test.

use std::time::Duration;

use otpmcp::prelude::*;
use serde_json::{Value, json};

/// Counts to `to`, one step a second, reporting progress.
#[derive(serde::Deserialize, JsonSchema)]
struct Count {
    /// Where to stop (at most 60).
    #[schemars(range(max = 60))]
    to: u64,
}

async fn count(args: Count, ctx: RequestContext) -> Result<String, ToolError> {
    if args.to > 60 {
        return Err(ToolError::InvalidArguments("`to` is at most 60".into())); // isError
    }
    ctx.log(
        LoggingLevel::Info,
        Some("count"),
        json!(format!("counting to {}", args.to)),
    )
    .await?;
    for i in 1..=args.to {
        tokio::time::sleep(Duration::from_secs(1)).await;
        ctx.progress(i as f64, Some(args.to as f64), None).await?;
    }
    Ok(format!("counted to {}", args.to))
}

/// Takes no arguments (`()`), so its description is given where it is registered.
async fn greet((): (), ctx: RequestContext) -> Result<String, ToolError> {
    let form = json!({"type": "object", "properties": {"name": {"type": "string"}}});
    // A question on a 2025-11-25 session; `input_required` on a 2026-07-28 request; a
    // task's `input_required` inside a task. Without elicitation declared: -32021.
    let answer = ctx
        .elicit(Elicitation::form("What is your name?", form))
        .await?;
    let name = answer.content.as_ref().and_then(|c| c.get("name"));
    Ok(format!(
        "Hello, {}!",
        name.and_then(Value::as_str).unwrap_or("stranger")
    ))
}

/// The server: two tools, a resource and a prompt.
pub fn server() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(
            // A task for clients that declare the tasks extension; safe to run again if
            // its replica dies.
            tool("count", count)
                .task_support(TaskSupport::Optional)
                .rerunnable(),
        )
        .register(tool("greet", greet).description("Greets the user, asking their name first."));

    let mut resources = ResourceRegistry::default();
    let readme = ResourceDefinition {
        uri: "guide://readme".into(),
        name: "readme".into(),
        description: "A fixed text resource.".into(),
        mime_type: Some("text/plain".into()),
    };
    resources.resource(readme, |uri, _ctx| async move {
        Ok(vec![ResourceContents {
            uri,
            mime_type: Some("text/plain".into()),
            text: Some("Hello from otpmcp.".into()),
            blob: None,
        }])
    });

    let mut prompts = PromptRegistry::default();
    let greet_prompt = PromptDefinition {
        name: "greet".into(),
        description: "Asks the model to greet someone.".into(),
        arguments: vec![PromptArgument {
            name: "name".into(),
            description: Some("Who to greet".into()),
            required: true, // checked before the renderer runs (-32602)
        }],
    };
    prompts.prompt(greet_prompt, |args, _ctx| async move {
        let name = args.get("name").and_then(Value::as_str);
        let text = format!("Please greet {} warmly.", name.unwrap_or("someone"));
        Ok(GetPromptResult {
            description: None,
            messages: vec![PromptMessage {
                role: Role::User,
                content: Content::text(text),
            }],
        })
    });

    McpServer::new(tools)
        .with_resources(resources)
        .with_prompts(prompts)
        .with_instructions("Call `count` with a progressToken to watch it stream.")
}
