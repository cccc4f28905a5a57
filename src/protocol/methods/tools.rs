//! Tools: their definitions (with task support), `tools/list` and `tools/call`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Icon;
use super::content::Content;

/// Whether a tool may run as a task (tasks extension). The server decides per request,
/// only for requests that declared the extension; a stateless `tools/list` shows the
/// outcome as `execution.taskSupport` (`server/tasks.rs`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TaskSupport {
    /// Always answered in the request (the default).
    #[default]
    Never,
    /// A task when the request declared the extension; answered in the request otherwise.
    Optional,
    /// Only as a task: a request that did not declare the extension gets -32021.
    Required,
}

/// How a tool runs as a task: the runtime's side of it, not on the wire.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskOptions {
    /// Whether it may run as a task.
    pub support: TaskSupport,
    /// The handler becomes a task itself, by calling `start_task` (after asking the client
    /// what it needs in the request); otherwise it is a task from its start.
    pub started_by_handler: bool,
    /// Safe to run again from the start: if its replica is lost, another runs it again
    /// (once) instead of failing the task.
    pub rerunnable: bool,
}

/// A tool as listed by `tools/list`.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolDefinition {
    /// Unique name.
    pub name: String,
    /// The name a host shows people, when it differs from `name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, when it returns structured results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Hints about its behaviour that hosts show when asking to run it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotations: Option<ToolAnnotations>,
    /// Pictures a host may show beside it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
    /// How it runs as a task.
    #[serde(skip)]
    pub tasks: TaskOptions,
}

/// Hints about what a tool does (MCP `ToolAnnotations`), which hosts use to decide what
/// to ask before running it. Hints, not guarantees: a client must not trust them from a
/// server it does not trust. Unset hints are not sent, and the spec's defaults apply:
/// not read-only, destructive, not idempotent, open world.
///
/// ```
/// use otpmcp::protocol::methods::ToolAnnotations;
///
/// let hints = ToolAnnotations::default().read_only(true).open_world(false);
/// assert_eq!(hints.read_only_hint, Some(true));
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ToolAnnotations {
    /// `readOnlyHint`: the tool does not change its environment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_only_hint: Option<bool>,
    /// `destructiveHint`: a tool that changes its environment may destroy or overwrite
    /// (rather than only add); meaningless when read-only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destructive_hint: Option<bool>,
    /// `idempotentHint`: calling it again with the same arguments has no further effect.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idempotent_hint: Option<bool>,
    /// `openWorldHint`: it reaches entities outside the server (the web, other systems),
    /// rather than a closed domain of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub open_world_hint: Option<bool>,
}

impl ToolAnnotations {
    /// Sets `readOnlyHint`.
    pub fn read_only(mut self, hint: bool) -> Self {
        self.read_only_hint = Some(hint);
        self
    }

    /// Sets `destructiveHint`.
    pub fn destructive(mut self, hint: bool) -> Self {
        self.destructive_hint = Some(hint);
        self
    }

    /// Sets `idempotentHint`.
    pub fn idempotent(mut self, hint: bool) -> Self {
        self.idempotent_hint = Some(hint);
        self
    }

    /// Sets `openWorldHint`.
    pub fn open_world(mut self, hint: bool) -> Self {
        self.open_world_hint = Some(hint);
        self
    }
}

/// `tools/list` result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    /// The tools.
    pub tools: Vec<ToolDefinition>,
}

/// `tools/call` params.
#[derive(Debug, Clone, Deserialize)]
pub struct CallToolParams {
    /// Tool name.
    pub name: String,
    /// Arguments object.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// `_meta` (carries `progressToken`).
    #[serde(default, rename = "_meta")]
    pub meta: Option<Map<String, Value>>,
}

impl CallToolParams {
    /// The `progressToken` the client attached, if any.
    pub fn progress_token(&self) -> Option<Value> {
        self.meta
            .as_ref()?
            .get("progressToken")
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned()
    }
}

/// `tools/call` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallToolResult {
    /// Output.
    pub content: Vec<Content>,
    /// True when the tool failed (the failure is reported to the model, not as a
    /// protocol error).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// The result as JSON matching the tool's output schema.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_content: Option<Value>,
}

impl CallToolResult {
    /// A successful result with these items.
    pub fn content(content: Vec<Content>) -> Self {
        Self {
            content,
            is_error: false,
            structured_content: None,
        }
    }

    /// A successful result with one text item.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            is_error: false,
            structured_content: None,
        }
    }

    /// A failed result with an explanation.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::text(text)],
            is_error: true,
            structured_content: None,
        }
    }
}
