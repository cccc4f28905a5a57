//! The server of docs/guide.md. Run: `cargo run --example guide` (port 8080 by default).

use otpmcp::handler::tools::{optional_u64, tool_fn};
use otpmcp::handler::{PromptRegistry, ResourceRegistry, ToolError, ToolRegistry};
use otpmcp::protocol::methods::{
    CallToolResult, Content, GetPromptResult, LoggingLevel, PromptArgument, PromptDefinition,
    PromptMessage, ResourceContents, ResourceDefinition, Role,
};
use otpmcp::{Config, McpServer};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut tools = ToolRegistry::default();
    tools.register(tool_fn(
        "count",
        "Counts to `to`, one step a second, reporting progress.",
        json!({"type": "object", "properties": {"to": {"type": "integer", "maximum": 60}}}),
        |args, ctx| async move {
            let to = optional_u64(&args, "to", 3, 60)?; // -32602 when out of range
            let note = json!(format!("counting to {to}"));
            ctx.log(LoggingLevel::Info, Some("count"), note)
                .await
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            for i in 1..=to {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                ctx.progress(i as f64, Some(to as f64), None)
                    .await
                    .map_err(|e| ToolError::Failed(e.to_string()))?;
            }
            Ok(CallToolResult::text(format!("counted to {to}")))
        },
    ));

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
    let greet = PromptDefinition {
        name: "greet".into(),
        description: "Asks the model to greet someone.".into(),
        arguments: vec![PromptArgument {
            name: "name".into(),
            description: Some("Who to greet".into()),
            required: true, // checked before the renderer runs (-32602)
        }],
    };
    prompts.prompt(greet, |args, _ctx| async move {
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

    let server = McpServer::new(tools)
        .with_resources(resources)
        .with_prompts(prompts)
        .with_instructions("Call `count` with a progressToken to watch it stream.");
    let config = Config::load(&std::env::current_dir()?, &[])?; // ./sys.toml, OTPMCP__ vars
    let app = otpmcp::start_with(config, server).await?;
    println!("serving MCP at {}", app.url());
    tokio::signal::ctrl_c().await?;
    app.shutdown().await;
    Ok(())
}
