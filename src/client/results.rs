//! What the [`Client`](super::Client) hands back, typed: a tool's result with the
//! notifications that came before it, the lists, a resource's contents, a prompt, a task.

use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::protocol::ErrorObject;
use crate::protocol::methods::{Content, ResourceContents, Role};

/// A request's result and the notifications the server sent before it (on the POST's
/// SSE stream, or on stdout before the answer).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// The JSON-RPC `result`.
    pub result: Value,
    /// Every notification that came before the result, in order.
    pub notifications: Vec<Value>,
}

/// One `notifications/progress`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// How far (grows with each one).
    pub progress: f64,
    /// Out of how much, when the tool knows.
    #[serde(default)]
    pub total: Option<f64>,
    /// What is being done.
    #[serde(default)]
    pub message: Option<String>,
}

/// One `notifications/message` (a log line a handler sent the client).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct LogMessage {
    /// `debug` … `emergency`.
    pub level: String,
    /// Who logged it, if it said.
    #[serde(default)]
    pub logger: Option<String>,
    /// What was logged: any JSON, often a string.
    pub data: Value,
}

impl LogMessage {
    /// `data` as text: the string itself, or the JSON of anything else.
    pub fn text(&self) -> String {
        match &self.data {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }
}

/// A `tools/call` result, with the progress and log notifications that came before it.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolResult {
    /// The content blocks.
    #[serde(default)]
    pub content: Vec<Content>,
    /// Structured output (a tool returning `Json<T>`).
    #[serde(default)]
    pub structured_content: Option<Value>,
    /// The tool failed (`isError: true`): its content says why.
    #[serde(default)]
    pub is_error: bool,
    /// Progress notifications for this call, in order.
    #[serde(skip)]
    pub progress: Vec<Progress>,
    /// Log notifications that came with this call, in order.
    #[serde(skip)]
    pub logs: Vec<LogMessage>,
}

impl ToolResult {
    /// The text of the text blocks, joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .content
            .iter()
            .filter_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        texts.join("\n")
    }

    /// The structured content as a `T`.
    pub fn structured<T: DeserializeOwned>(&self) -> Result<T, super::ClientError> {
        let value =
            self.structured_content
                .clone()
                .ok_or_else(|| super::ClientError::Malformed {
                    method: "tools/call".into(),
                    detail: "the result has no structuredContent".into(),
                })?;
        serde_json::from_value(value).map_err(|e| super::ClientError::Malformed {
            method: "tools/call".into(),
            detail: format!("structuredContent: {e}"),
        })
    }

    /// Reads the progress and log notifications among `notifications`.
    pub(crate) fn with_notifications(mut self, notifications: &[Value]) -> Self {
        for note in notifications {
            match note.get("method").and_then(Value::as_str) {
                Some("notifications/progress") => {
                    if let Ok(p) = serde_json::from_value(note["params"].clone()) {
                        self.progress.push(p);
                    }
                }
                Some("notifications/message") => {
                    if let Ok(m) = serde_json::from_value(note["params"].clone()) {
                        self.logs.push(m);
                    }
                }
                _ => {}
            }
        }
        self
    }
}

/// A tool as `tools/list` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedTool {
    /// Its name.
    pub name: String,
    /// The name hosts show people.
    #[serde(default)]
    pub title: Option<String>,
    /// What it does.
    #[serde(default)]
    pub description: Option<String>,
    /// Its arguments' JSON Schema.
    #[serde(default)]
    pub input_schema: Value,
    /// Its structured output's JSON Schema.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// The hints (`readOnlyHint`, …), as sent.
    #[serde(default)]
    pub annotations: Option<Value>,
    /// `execution` (`taskSupport`), as sent.
    #[serde(default)]
    pub execution: Option<Value>,
}

/// A resource as `resources/list` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedResource {
    /// Its URI.
    pub uri: String,
    /// Its name.
    pub name: String,
    /// What it holds.
    #[serde(default)]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(default)]
    pub mime_type: Option<String>,
}

/// A resource template as `resources/templates/list` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedTemplate {
    /// Its RFC 6570 template.
    pub uri_template: String,
    /// Its name.
    pub name: String,
    /// What it holds.
    #[serde(default)]
    pub description: Option<String>,
    /// Its MIME type.
    #[serde(default)]
    pub mime_type: Option<String>,
}

/// A prompt's argument as `prompts/list` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ListedArgument {
    /// Its name.
    pub name: String,
    /// What it is.
    #[serde(default)]
    pub description: Option<String>,
    /// Whether it must be given.
    #[serde(default)]
    pub required: bool,
}

/// A prompt as `prompts/list` shows it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ListedPrompt {
    /// Its name.
    pub name: String,
    /// What it is for.
    #[serde(default)]
    pub description: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub arguments: Vec<ListedArgument>,
}

/// One message of a rendered prompt.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Message {
    /// Whose it is.
    pub role: Role,
    /// What it says.
    pub content: Content,
}

/// A `prompts/get` result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Prompt {
    /// The rendered prompt's description, if the renderer gave one.
    #[serde(default)]
    pub description: Option<String>,
    /// Its messages.
    pub messages: Vec<Message>,
}

/// A `resources/read` result.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub(crate) struct ReadResult {
    pub(crate) contents: Vec<ResourceContents>,
}

/// A task as `tasks/get` shows it (2026-07-28's tasks extension).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Its id.
    pub task_id: String,
    /// `working`, `input_required`, `completed`, `failed` or `cancelled`.
    pub status: String,
    /// Why it is in that status, if the server said.
    #[serde(default)]
    pub status_message: Option<String>,
    /// The tool's result, once `completed`.
    #[serde(default)]
    pub result: Option<ToolResult>,
    /// Why it failed, once `failed`.
    #[serde(default)]
    pub error: Option<ErrorObject>,
    /// The open questions, while `input_required`, by key.
    #[serde(default)]
    pub input_requests: Option<Value>,
    /// How often the server suggests polling, in milliseconds.
    #[serde(default)]
    pub poll_interval_ms: Option<u64>,
}

impl Task {
    /// Completed, failed or cancelled: it will not change again.
    pub fn is_terminal(&self) -> bool {
        matches!(self.status.as_str(), "completed" | "failed" | "cancelled")
    }
}

/// A task's events as `tasks/stream` delivered them, and how the task ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvents {
    /// Each event once, in order (`seq`, `type`, `payload`).
    pub events: Vec<Value>,
    /// How the stream ended.
    pub ending: super::watch::Ending,
}

impl TaskEvents {
    /// The progress values among the events, in order.
    pub fn progress(&self) -> Vec<f64> {
        self.events
            .iter()
            .filter(|e| e["type"] == crate::tasks::events::PROGRESS)
            .filter_map(|e| e["payload"]["progress"].as_f64())
            .collect()
    }

    /// The statuses the task went through, in order.
    pub fn statuses(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|e| e["type"] == crate::tasks::events::STATUS)
            .filter_map(|e| e["payload"]["status"].as_str().map(str::to_owned))
            .collect()
    }
}
