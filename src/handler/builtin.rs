//! The tools of the default server: `echo` and `stream_events`.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::tools::{optional_u64, required_str};
use super::{BoxFuture, RequestContext, Tool, ToolError};
use crate::protocol::methods::{CallToolResult, TaskOptions, TaskSupport, ToolDefinition};

/// Most events one `stream_events` call may ask for, so one request cannot occupy the
/// server indefinitely.
pub const MAX_STREAM_EVENTS: u64 = 100_000;
/// Longest interval `stream_events` accepts, in milliseconds.
pub const MAX_INTERVAL_MS: u64 = 60_000;
/// Longest total run time (`count × interval_ms`) `stream_events` accepts, in milliseconds.
pub const MAX_DURATION_MS: u64 = 10 * 60_000;

/// `echo(text)`: returns `text`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Echo;

impl Tool for Echo {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "echo".into(),
            description: "Returns the text it is given.".into(),
            input_schema: json!({
                "type": "object",
                "properties": { "text": { "type": "string", "description": "Text to return." } },
                "required": ["text"]
            }),
            output_schema: None,
            tasks: Default::default(),
        }
    }

    fn call(
        &self,
        arguments: Map<String, Value>,
        _ctx: RequestContext,
    ) -> BoxFuture<'_, Result<CallToolResult, ToolError>> {
        Box::pin(async move { Ok(CallToolResult::text(required_str(&arguments, "text")?)) })
    }
}

/// `stream_events(count, interval_ms)`: sends `count` progress notifications
/// (1..=count of count) `interval_ms` apart when the request has a `progressToken`, then
/// returns `streamed <count> events`.
#[derive(Debug, Default, Clone, Copy)]
pub struct StreamEvents;

impl Tool for StreamEvents {
    fn definition(&self) -> ToolDefinition {
        ToolDefinition {
            name: "stream_events".into(),
            description: "Sends `count` progress notifications `interval_ms` apart, then returns. \
                          Useful to watch streaming and resumption."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "count": { "type": "integer", "minimum": 0, "maximum": MAX_STREAM_EVENTS, "default": 10 },
                    "interval_ms": { "type": "integer", "minimum": 0, "maximum": MAX_INTERVAL_MS, "default": 100 }
                }
            }),
            output_schema: None,
            // Runs as a task whenever the request declares the extension, so anyone can
            // try tasks with curl; running it again only streams again.
            tasks: TaskOptions {
                support: TaskSupport::Optional,
                started_by_handler: false,
                rerunnable: true,
            },
        }
    }

    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> BoxFuture<'_, Result<CallToolResult, ToolError>> {
        Box::pin(async move {
            let count = optional_u64(&arguments, "count", 10, MAX_STREAM_EVENTS)?;
            let interval = optional_u64(&arguments, "interval_ms", 100, MAX_INTERVAL_MS)?;
            if count.saturating_mul(interval) > MAX_DURATION_MS {
                return Err(ToolError::InvalidArguments(format!(
                    "count × interval_ms must be at most {MAX_DURATION_MS} (10 minutes)"
                )));
            }
            for i in 1..=count {
                if ctx.wants_progress() {
                    ctx.progress(i as f64, Some(count as f64), None).await?;
                }
                if interval > 0 && i < count {
                    tokio::time::sleep(Duration::from_millis(interval)).await;
                }
            }
            Ok(CallToolResult::text(format!("streamed {count} events")))
        })
    }
}
