//! Typed parameters and results of the MCP methods this server answers: [`Method`] and the
//! notifications here, one file per group of methods below, each re-exported.

mod completion;
mod content;
mod icon;
mod initialize;
mod logging;
mod prompts;
mod resources;
mod skills;
mod tasks;
mod tools;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use completion::{CompleteParams, CompletionArgument, CompletionRef};
pub use content::{Content, ResourceContents};
pub use icon::{Icon, IconTheme};
pub use initialize::{Implementation, InitializeParams, InitializeResult};
pub(crate) use logging::log_notification;
pub use logging::{LogThreshold, LoggingLevel, SetLevelParams};
pub use prompts::{
    GetPromptParams, GetPromptResult, PromptArgument, PromptDefinition, PromptMessage, Role,
};
pub use resources::{
    ReadResourceResult, ResourceDefinition, ResourceParams, ResourceTemplateDefinition,
};
pub use skills::{
    DIRECTORY_MIME_TYPE, DirectoryChild, GetSkillParams, GetSkillResult, ReadDirectoryParams,
    SKILL_SCHEME, SKILLS_EXTENSION, Skill, SkillResource,
};
pub use tasks::TaskStreamParams;
pub use tools::{
    CallToolParams, CallToolResult, ListToolsResult, TaskOptions, TaskSupport, ToolAnnotations,
    ToolDefinition,
};

use super::Notification;
pub use super::method::{Eras, Method, MethodSpec, NameParam, NotificationKind, Routing};

/// Notification names we send or act on (those of [`NotificationKind`] written there).
pub mod notifications {
    use super::NotificationKind;

    /// Sent by the client after `initialize`.
    pub const INITIALIZED: &str = NotificationKind::Initialized.name();
    /// Progress of a request.
    pub const PROGRESS: &str = NotificationKind::Progress.name();
    /// The client gave up on a request.
    pub const CANCELLED: &str = NotificationKind::Cancelled.name();
    /// A log message from the server.
    pub const MESSAGE: &str = NotificationKind::Message.name();
    /// A subscribed resource changed.
    pub const RESOURCE_UPDATED: &str = "notifications/resources/updated";
    /// What a `subscriptions/listen` request will be told of (2026-07-28).
    pub const SUBSCRIPTIONS_ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";
    /// A task changed, to a listener that named it (2026-07-28).
    pub const TASKS: &str = "notifications/tasks";
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
pub(crate) fn progress_notification(
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
pub(crate) fn number(x: f64) -> Value {
    if x.fract() == 0.0 && x.abs() < 9.0e15 {
        Value::from(x as i64)
    } else {
        serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
    }
}
