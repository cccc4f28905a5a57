//! [`Method`]: the methods this server knows, classified once from a request's name.

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
    /// `skills/list` (skills extension, SEP-2640)
    SkillsList,
    /// `skills/get` (skills extension, SEP-2640)
    SkillsGet,
    /// `resources/directory/read` (skills extension's `directoryRead`, SEP-2640)
    ResourcesDirectoryRead,
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
            "skills/list" => Self::SkillsList,
            "skills/get" => Self::SkillsGet,
            "resources/directory/read" => Self::ResourcesDirectoryRead,
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
            Self::SkillsList => "skills/list",
            Self::SkillsGet => "skills/get",
            Self::ResourcesDirectoryRead => "resources/directory/read",
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
                | Self::SkillsList
                | Self::SkillsGet
        )
    }
}
