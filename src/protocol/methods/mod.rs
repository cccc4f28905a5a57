//! Typed parameters and results of the MCP methods this server answers: [`Method`] and the
//! notifications here, one file per group of methods below, each re-exported.

mod completion;
mod content;
mod initialize;
mod logging;
mod prompts;
mod resources;
mod tasks;
mod tools;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use completion::{CompleteParams, CompletionArgument, CompletionRef};
pub use content::{Content, ResourceContents};
pub use initialize::{Implementation, InitializeParams, InitializeResult};
pub use logging::{LogThreshold, LoggingLevel, SetLevelParams, log_notification};
pub use prompts::{
    GetPromptParams, GetPromptResult, PromptArgument, PromptDefinition, PromptMessage, Role,
};
pub use resources::{
    ReadResourceResult, ResourceDefinition, ResourceParams, ResourceTemplateDefinition,
};
pub use tasks::TaskStreamParams;
pub use tools::{
    CallToolParams, CallToolResult, ListToolsResult, TaskOptions, TaskSupport, ToolDefinition,
};

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

/// `list` params: the cursor of the page wanted.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ListParams {
    /// Opaque cursor from the previous page's `nextCursor`.
    pub cursor: Option<String>,
}
