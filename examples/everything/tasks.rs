//! The fixtures of the conformance suite's tasks scenarios (the
//! `io.modelcontextprotocol/tasks` extension): tools that may, must, or never run as
//! tasks, that ask the user from inside a task, and one that asks in the request first.

use std::time::Duration;

use otpmcp::prelude::*;
use serde::Deserialize;
use serde_json::{Value, json};

/// Greets by name, at once (never a task).
#[derive(Deserialize, JsonSchema)]
struct Greet {
    /// Who to greet.
    name: String,
}

/// Works for `seconds`, then reports on `label`; a task when the client allows.
#[derive(Deserialize, JsonSchema)]
struct SlowCompute {
    /// How long to work (default 1).
    #[serde(default = "one_second")]
    #[schemars(range(min = 0, max = 600))]
    seconds: f64,
    /// What the work is called.
    #[serde(default = "work")]
    label: String,
}

fn one_second() -> f64 {
    1.0
}

fn work() -> String {
    "work".into()
}

/// Asks the user to confirm before it deletes `filename`.
#[derive(Deserialize, JsonSchema)]
struct ConfirmDelete {
    /// The file to delete.
    filename: String,
}

fn confirm_form(message: String) -> Elicitation {
    Elicitation::form(
        message,
        json!({"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}}),
    )
}

/// Registers the tools.
pub(crate) fn tools(tools: &mut ToolRegistry) {
    tools
        .register(tool("greet", |args: Greet, _| async move { Ok(format!("Hello, {}!", args.name)) }))
        .register(
            tool("slow_compute", |args: SlowCompute, _| async move {
                let seconds = args.seconds.clamp(0.0, 600.0);
                tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                Ok(format!("computed {} in {seconds}s", args.label))
            })
            .task_support(TaskSupport::Optional)
            .rerunnable(),
        )
        .register(
            tool("failing_job", |(), _| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err::<String, _>(ToolError::Failed("the job failed".into()))
            }).description("Fails after a second (a tool error); only as a task.")
            .task_support(TaskSupport::Required),
        )
        .register(
            tool("protocol_error_job", |(), _| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Err::<String, _>(ToolError::Internal("this job always ends with a protocol error".into()))
            }).description("Ends with a protocol error; a task when the client allows.")
            .task_support(TaskSupport::Optional),
        )
        .register(
            tool("confirm_delete", |args: ConfirmDelete, ctx| async move {
                    let filename = args.filename;
                    let answer = ctx.elicit(confirm_form(format!("Delete {filename}?"))).await?;
                    let yes = answer.content.as_ref().and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true);
                    Ok(CallToolResult::text(if yes { format!("deleted {filename}") } else { format!("kept {filename}") }))
                })
            .task_support(TaskSupport::Optional),
        )
        .register(
            tool("multi_input", |(), ctx| async move {
                let (first, second) = tokio::join!(
                    ctx.ask_as(Some("first"), confirm_form("First?".into())),
                    ctx.ask_as(Some("second"), confirm_form("Second?".into())),
                );
                let name = |a: &otpmcp::protocol::client::ElicitResult| {
                    a.content.as_ref().and_then(|c| c.get("name")).and_then(Value::as_str).unwrap_or("?").to_owned()
                };
                Ok(CallToolResult::text(format!("heard {} and {}", name(&first?), name(&second?))))
            }).description("Asks two questions at once.")
            .task_support(TaskSupport::Optional),
        )
        .register(
            tool("test_tool_with_task", |(), ctx| async move {
                let form = Elicitation::form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}));
                let answer = ctx.ask_as(Some("user_name"), form).await?;
                let name = answer.content.as_ref().and_then(|c| c.get("name")).and_then(Value::as_str).unwrap_or("?").to_owned();
                ctx.start_task().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(CallToolResult::text(format!("Hello, {name}, from a task")))
            }).description("Asks the user's name in the request, then works as a task.")
            .task_support(TaskSupport::Required)
            .starting_task_itself(),
        );
}
