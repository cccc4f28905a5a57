//! Typed parameters and results of the MCP methods this server answers.
//!
//! Size: plain serde types, a few lines each, one group per method; a group moves to a
//! file of its own when it grows logic.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Notification;

/// The methods we know, parsed once from the request's method string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `initialize`
    Initialize,
    /// `ping`
    Ping,
    /// `tools/list`
    ToolsList,
    /// `tools/call`
    ToolsCall,
    /// `logging/setLevel`
    SetLevel,
    /// `resources/list`
    ResourcesList,
    /// `resources/templates/list`
    ResourceTemplatesList,
    /// `resources/read`
    ResourcesRead,
    /// `resources/subscribe`
    ResourcesSubscribe,
    /// `resources/unsubscribe`
    ResourcesUnsubscribe,
    /// `prompts/list`
    PromptsList,
    /// `prompts/get`
    PromptsGet,
    /// `completion/complete`
    Complete,
    /// `server/discover` (2026-07-28)
    Discover,
    /// `subscriptions/listen` (2026-07-28)
    Listen,
    /// `tasks/get` (tasks extension)
    TasksGet,
    /// `tasks/update` (tasks extension)
    TasksUpdate,
    /// `tasks/cancel` (tasks extension)
    TasksCancel,
    /// `tasks/stream` (tasks extension, SEP-2694)
    TasksStream,
    /// Anything else (answered with -32601).
    Unknown,
}

impl Method {
    /// Classifies a method name.
    pub fn parse(name: &str) -> Self {
        match name {
            "initialize" => Self::Initialize,
            "ping" => Self::Ping,
            "tools/list" => Self::ToolsList,
            "tools/call" => Self::ToolsCall,
            "logging/setLevel" => Self::SetLevel,
            "resources/list" => Self::ResourcesList,
            "resources/templates/list" => Self::ResourceTemplatesList,
            "resources/read" => Self::ResourcesRead,
            "resources/subscribe" => Self::ResourcesSubscribe,
            "resources/unsubscribe" => Self::ResourcesUnsubscribe,
            "prompts/list" => Self::PromptsList,
            "prompts/get" => Self::PromptsGet,
            "completion/complete" => Self::Complete,
            "server/discover" => Self::Discover,
            "subscriptions/listen" => Self::Listen,
            "tasks/get" => Self::TasksGet,
            "tasks/update" => Self::TasksUpdate,
            "tasks/cancel" => Self::TasksCancel,
            "tasks/stream" => Self::TasksStream,
            _ => Self::Unknown,
        }
    }

    /// The method's name, as [`Method::parse`] reads it; `None` for [`Method::Unknown`].
    pub fn name(self) -> Option<&'static str> {
        Some(match self {
            Self::Initialize => "initialize",
            Self::Ping => "ping",
            Self::ToolsList => "tools/list",
            Self::ToolsCall => "tools/call",
            Self::SetLevel => "logging/setLevel",
            Self::ResourcesList => "resources/list",
            Self::ResourceTemplatesList => "resources/templates/list",
            Self::ResourcesRead => "resources/read",
            Self::ResourcesSubscribe => "resources/subscribe",
            Self::ResourcesUnsubscribe => "resources/unsubscribe",
            Self::PromptsList => "prompts/list",
            Self::PromptsGet => "prompts/get",
            Self::Complete => "completion/complete",
            Self::Discover => "server/discover",
            Self::Listen => "subscriptions/listen",
            Self::TasksGet => "tasks/get",
            Self::TasksUpdate => "tasks/update",
            Self::TasksCancel => "tasks/cancel",
            Self::TasksStream => "tasks/stream",
            Self::Unknown => return None,
        })
    }

    /// True for the methods a stateless (2026-07-28) request may not call: the session
    /// era's handshake and session state.
    pub fn is_session_only(self) -> bool {
        matches!(
            self,
            Self::Initialize
                | Self::Ping
                | Self::SetLevel
                | Self::ResourcesSubscribe
                | Self::ResourcesUnsubscribe
        )
    }

    /// True for the methods of the stateless revision only.
    pub fn is_stateless_only(self) -> bool {
        matches!(
            self,
            Self::Discover
                | Self::Listen
                | Self::TasksGet
                | Self::TasksUpdate
                | Self::TasksCancel
                | Self::TasksStream
        )
    }

    /// True for the methods whose answer may be `input_required` (2026-07-28).
    pub fn may_ask_for_input(self) -> bool {
        matches!(
            self,
            Self::ToolsCall | Self::PromptsGet | Self::ResourcesRead
        )
    }

    /// True for the methods whose results carry caching hints (2026-07-28).
    pub fn is_cacheable(self) -> bool {
        matches!(
            self,
            Self::Discover
                | Self::ToolsList
                | Self::PromptsList
                | Self::ResourcesList
                | Self::ResourceTemplatesList
                | Self::ResourcesRead
        )
    }
}

/// Client notification names we act on.
pub mod notifications {
    /// Sent by the client after `initialize`.
    pub const INITIALIZED: &str = "notifications/initialized";
    /// Progress of a request.
    pub const PROGRESS: &str = "notifications/progress";
    /// The client gave up on a request.
    pub const CANCELLED: &str = "notifications/cancelled";
    /// A log message from the server.
    pub const MESSAGE: &str = "notifications/message";
    /// A subscribed resource changed.
    pub const RESOURCE_UPDATED: &str = "notifications/resources/updated";
}

/// Log severity (RFC 5424 levels), ordered from least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Notice.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Alert.
    Alert,
    /// Emergency.
    Emergency,
}

impl LoggingLevel {
    /// Every level, least severe first.
    pub const ALL: [Self; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];
}

/// The least severe log level a session's client wants: shared by the session (which
/// `logging/setLevel` changes) and its running requests (which read it at every log
/// call), so a change applies to requests already running. An atomic, not a lock.
#[derive(Debug, Default)]
pub struct LogThreshold(std::sync::atomic::AtomicU8);

impl LogThreshold {
    /// The level set, or `None` (everything) before the first `logging/setLevel`.
    pub fn get(&self) -> Option<LoggingLevel> {
        let n = self.0.load(std::sync::atomic::Ordering::Relaxed) as usize;
        n.checked_sub(1)
            .and_then(|i| LoggingLevel::ALL.get(i).copied())
    }

    /// Sets the level.
    pub fn set(&self, level: LoggingLevel) {
        let n = LoggingLevel::ALL
            .iter()
            .position(|l| *l == level)
            .unwrap_or(0)
            + 1;
        self.0.store(n as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `logging/setLevel` params.
#[derive(Debug, Clone, Deserialize)]
pub struct SetLevelParams {
    /// The least severe level the client wants to receive.
    pub level: LoggingLevel,
}

/// Builds `notifications/message`.
pub fn log_notification(level: LoggingLevel, logger: Option<&str>, data: Value) -> Notification {
    let mut params = Map::new();
    params.insert(
        "level".into(),
        serde_json::to_value(level).unwrap_or(Value::Null),
    );
    if let Some(logger) = logger {
        params.insert("logger".into(), Value::String(logger.to_owned()));
    }
    params.insert("data".into(), data);
    Notification {
        method: notifications::MESSAGE.into(),
        params: Some(Value::Object(params)),
    }
}

/// Which list changed, for `notifications/<kind>/list_changed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ListKind {
    /// `tools/list`.
    Tools,
    /// `resources/list` and templates.
    Resources,
    /// `prompts/list`.
    Prompts,
}

impl ListKind {
    /// Every kind.
    pub const ALL: [Self; 3] = [Self::Tools, Self::Resources, Self::Prompts];

    /// The notification method.
    pub fn notification(self) -> &'static str {
        match self {
            Self::Tools => "notifications/tools/list_changed",
            Self::Resources => "notifications/resources/list_changed",
            Self::Prompts => "notifications/prompts/list_changed",
        }
    }
}

/// `initialize` params.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// Revision the client asks for.
    pub protocol_version: String,
    /// Client capabilities.
    #[serde(default)]
    pub capabilities: Value,
    /// Client name and version.
    #[serde(default)]
    pub client_info: Value,
}

/// Name and version of an implementation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Implementation {
    /// Name.
    pub name: String,
    /// Version.
    pub version: String,
}

/// `initialize` result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The negotiated revision.
    pub protocol_version: String,
    /// What this server offers.
    pub capabilities: Value,
    /// Who we are.
    pub server_info: Implementation,
    /// Optional hints for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}

/// Whether a tool may run as a task (tasks extension). Not on the wire: the server
/// decides per request, and only for requests that declared the extension.
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
    /// What it does.
    pub description: String,
    /// JSON Schema of its arguments.
    pub input_schema: Value,
    /// JSON Schema of its `structuredContent`, when it returns structured results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// How it runs as a task.
    #[serde(skip)]
    pub tasks: TaskOptions,
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

/// One piece of tool output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Base64 data.
        data: String,
        /// e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// Base64 data.
        data: String,
        /// e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A resource's contents, embedded.
    Resource {
        /// The contents.
        resource: ResourceContents,
    },
}

/// The contents of a resource: text or base64 binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Binary contents, base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl Content {
    /// An embedded binary resource (`blob` is base64).
    pub fn blob_resource(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        blob: impl Into<String>,
    ) -> Self {
        Self::Resource {
            resource: ResourceContents {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: None,
                blob: Some(blob.into()),
            },
        }
    }

    /// Text content.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image from base64 `data`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// Audio from base64 `data`.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An embedded text resource.
    pub fn text_resource(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::Resource {
            resource: ResourceContents {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: Some(text.into()),
                blob: None,
            },
        }
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

/// A request the server sends to the client (sampling, elicitation, roots).
#[derive(Debug, Clone, PartialEq)]
pub struct ServerRequest {
    /// Method name, e.g. `sampling/createMessage`.
    pub method: String,
    /// Parameters.
    pub params: Option<Value>,
    /// Its key among the inputs a stateless request asks for (`inputRequests`); `None`: a
    /// key is made from the order of asking, which is stable while the handler asks the
    /// same things in the same order on every round.
    pub key: Option<String>,
}

/// Builds `notifications/progress`.
pub fn progress_notification(
    token: Value,
    progress: f64,
    total: Option<f64>,
    message: Option<String>,
) -> Notification {
    let mut params = Map::new();
    params.insert("progressToken".into(), token);
    params.insert("progress".into(), number(progress));
    if let Some(total) = total {
        params.insert("total".into(), number(total));
    }
    if let Some(message) = message {
        params.insert("message".into(), Value::String(message));
    }
    Notification {
        method: notifications::PROGRESS.into(),
        params: Some(Value::Object(params)),
    }
}

/// Whole numbers serialize as integers (`3`, not `3.0`), which clients compare against.
fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}

/// A resource as listed by `resources/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDefinition {
    /// Its URI.
    pub uri: String,
    /// Short name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// A family of resources as listed by `resources/templates/list` (RFC 6570 template).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplateDefinition {
    /// e.g. `test://template/{id}/data`.
    pub uri_template: String,
    /// Short name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// The MIME type of its resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// `resources/read`, `resources/subscribe` and `resources/unsubscribe` params.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceParams {
    /// The resource.
    pub uri: String,
}

/// `resources/read` result.
#[derive(Debug, Clone, Serialize)]
pub struct ReadResourceResult {
    /// The contents (one resource may have several parts).
    pub contents: Vec<ResourceContents>,
}

/// An argument a prompt takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptArgument {
    /// Name.
    pub name: String,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it must be given.
    pub required: bool,
}

/// A prompt as listed by `prompts/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptDefinition {
    /// Unique name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
}

/// Who a prompt message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    /// Sender.
    pub role: Role,
    /// Content.
    pub content: Content,
}

/// `prompts/get` params.
#[derive(Debug, Clone, Deserialize)]
pub struct GetPromptParams {
    /// The prompt.
    pub name: String,
    /// Its arguments (string values).
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// `prompts/get` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GetPromptResult {
    /// Optional description of this instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}

/// What `completion/complete` completes an argument of.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type")]
pub enum CompletionRef {
    /// A prompt's argument.
    #[serde(rename = "ref/prompt")]
    Prompt {
        /// The prompt.
        name: String,
    },
    /// A resource template's variable.
    #[serde(rename = "ref/resource")]
    Resource {
        /// The template.
        uri: String,
    },
}

/// The argument being completed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CompletionArgument {
    /// Its name.
    pub name: String,
    /// What the user typed so far.
    pub value: String,
}

/// `completion/complete` params.
#[derive(Debug, Clone, Deserialize)]
pub struct CompleteParams {
    /// What is completed.
    #[serde(rename = "ref")]
    pub reference: CompletionRef,
    /// The argument and its partial value.
    pub argument: CompletionArgument,
}

/// `list` params: the cursor of the page wanted.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListParams {
    /// Opaque cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_threshold_starts_unset_and_holds_every_level() {
        let threshold = LogThreshold::default();
        assert_eq!(threshold.get(), None);
        for level in LoggingLevel::ALL {
            threshold.set(level);
            assert_eq!(threshold.get(), Some(level));
        }
    }
}
