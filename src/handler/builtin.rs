//! The tools of the default server: `echo` and `stream_events`. Their schemas are
//! written by hand ([`Tool::input_schema`]) because they read their arguments raw, to
//! give their own messages for arguments that do not fit.

use std::time::Duration;

use serde_json::{Map, Value, json};

use super::tools::{Tool, ToolError, optional_u64, required_str};
use super::typed::tool;
use crate::protocol::methods::{CallToolResult, TaskSupport};

/// Most events one `stream_events` call may ask for, so one request cannot occupy the
/// server indefinitely.
pub const MAX_STREAM_EVENTS: u64 = 100_000;
/// Longest interval `stream_events` accepts, in milliseconds.
pub const MAX_INTERVAL_MS: u64 = 60_000;
/// Longest total run time (`count × interval_ms`) `stream_events` accepts, in milliseconds.
pub const MAX_DURATION_MS: u64 = 10 * 60_000;

/// `echo(text)`: returns `text`.
pub fn echo() -> Tool {
    tool("echo", |arguments: Map<String, Value>, _ctx| async move {
        Ok(CallToolResult::text(required_str(&arguments, "text")?))
    })
    .description("Returns the text it is given.")
    .input_schema(json!({
        "type": "object",
        "properties": { "text": { "type": "string", "description": "Text to return." } },
        "required": ["text"]
    }))
}

/// `stream_events(count, interval_ms)`: sends `count` progress notifications
/// (1..=count of count) `interval_ms` apart when the request has a `progressToken`, then
/// returns `streamed <count> events`.
pub fn stream_events() -> Tool {
    tool("stream_events", |arguments: Map<String, Value>, ctx| async move {
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
    .description(
        "Sends `count` progress notifications `interval_ms` apart, then returns. \
         Useful to watch streaming and resumption.",
    )
    .input_schema(json!({
        "type": "object",
        "properties": {
            "count": { "type": "integer", "minimum": 0, "maximum": MAX_STREAM_EVENTS, "default": 10 },
            "interval_ms": { "type": "integer", "minimum": 0, "maximum": MAX_INTERVAL_MS, "default": 100 }
        }
    }))
    // Runs as a task whenever the request declares the extension, so anyone can try
    // tasks with curl; running it again only streams again.
    .task_support(TaskSupport::Optional)
    .rerunnable()
}
