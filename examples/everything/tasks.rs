//! The fixtures of the conformance suite's tasks scenarios (the
//! `io.modelcontextprotocol/tasks` extension): tools that may, must, or never run as
//! tasks, that ask the user from inside a task, and one that asks in the request first.

use std::time::Duration;

use otpmcp::handler::tools::{required_str, tool_fn};
use otpmcp::handler::{ToolError, ToolRegistry};
use otpmcp::protocol::client::Elicitation;
use otpmcp::protocol::methods::{CallToolResult, TaskSupport};
use serde_json::{Value, json};

use super::no_args;

fn confirm_form(message: String) -> Elicitation {
    Elicitation::form(
        message,
        json!({"type": "object", "properties": {"name": {"type": "string"}, "confirm": {"type": "boolean"}}}),
    )
}

/// Registers the tools.
pub(crate) fn tools(tools: &mut ToolRegistry) {
    tools
        .register(tool_fn(
            "greet",
            "Greets by name, at once (never a task).",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
            |args, _| async move { Ok(CallToolResult::text(format!("Hello, {}!", required_str(&args, "name")?))) },
        ))
        .register(
            tool_fn(
                "slow_compute",
                "Works for `seconds`, then reports on `label`; a task when the client allows.",
                json!({"type": "object", "properties": {"seconds": {"type": "number", "minimum": 0, "maximum": 600}, "label": {"type": "string"}}}),
                |args, _| async move {
                    let seconds = args.get("seconds").and_then(Value::as_f64).unwrap_or(1.0).clamp(0.0, 600.0);
                    let label = args.get("label").and_then(Value::as_str).unwrap_or("work").to_owned();
                    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
                    Ok(CallToolResult::text(format!("computed {label} in {seconds}s")))
                },
            )
            .with_task_support(TaskSupport::Optional)
            .rerunnable(),
        )
        .register(
            tool_fn("failing_job", "Fails after a second (a tool error); only as a task.", no_args(), |_, _| async {
                tokio::time::sleep(Duration::from_secs(1)).await;
                Err(ToolError::Failed("the job failed".into()))
            })
            .with_task_support(TaskSupport::Required),
        )
        .register(
            tool_fn("protocol_error_job", "Ends with a protocol error; a task when the client allows.", no_args(), |_, _| async {
                tokio::time::sleep(Duration::from_millis(300)).await;
                Err(ToolError::Internal("this job always ends with a protocol error".into()))
            })
            .with_task_support(TaskSupport::Optional),
        )
        .register(
            tool_fn(
                "confirm_delete",
                "Asks the user to confirm before it deletes `filename`.",
                json!({"type": "object", "properties": {"filename": {"type": "string"}}, "required": ["filename"]}),
                |args, ctx| async move {
                    let filename = required_str(&args, "filename")?.to_owned();
                    let answer = ctx.elicit(confirm_form(format!("Delete {filename}?"))).await?;
                    let yes = answer.content.as_ref().and_then(|c| c.get("confirm")).and_then(Value::as_bool) == Some(true);
                    Ok(CallToolResult::text(if yes { format!("deleted {filename}") } else { format!("kept {filename}") }))
                },
            )
            .with_task_support(TaskSupport::Optional),
        )
        .register(
            tool_fn("multi_input", "Asks two questions at once.", no_args(), |_, ctx| async move {
                let (first, second) = tokio::join!(
                    ctx.ask_as(Some("first"), confirm_form("First?".into())),
                    ctx.ask_as(Some("second"), confirm_form("Second?".into())),
                );
                let name = |a: &otpmcp::protocol::client::ElicitResult| {
                    a.content.as_ref().and_then(|c| c.get("name")).and_then(Value::as_str).unwrap_or("?").to_owned()
                };
                Ok(CallToolResult::text(format!("heard {} and {}", name(&first?), name(&second?))))
            })
            .with_task_support(TaskSupport::Optional),
        )
        .register(
            tool_fn("test_tool_with_task", "Asks the user's name in the request, then works as a task.", no_args(), |_, ctx| async move {
                let form = Elicitation::form("What is your name?", json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}));
                let answer = ctx.ask_as(Some("user_name"), form).await?;
                let name = answer.content.as_ref().and_then(|c| c.get("name")).and_then(Value::as_str).unwrap_or("?").to_owned();
                ctx.start_task().await?;
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok(CallToolResult::text(format!("Hello, {name}, from a task")))
            })
            .with_task_support(TaskSupport::Required)
            .starting_task_itself(),
        );
}
