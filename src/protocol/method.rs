//! [`Method`]: the methods this server knows, classified once from a request's name, and
//! [`MethodSpec`]: what the runtime decides by method, written once per method.

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
    /// Anything else (answered with -32601). Stays last: [`Method::ALL`] is checked
    /// against it.
    Unknown,
}

impl Method {
    /// Every method we know, in declaration order ([`Method::Unknown`] aside): what
    /// [`Method::parse`] reads, and what the tests check the transports against.
    pub const ALL: [Self; 22] = [
        Self::Initialize,
        Self::Ping,
        Self::ToolsList,
        Self::ToolsCall,
        Self::SetLevel,
        Self::ResourcesList,
        Self::ResourceTemplatesList,
        Self::ResourcesRead,
        Self::ResourcesSubscribe,
        Self::ResourcesUnsubscribe,
        Self::PromptsList,
        Self::PromptsGet,
        Self::Complete,
        Self::Discover,
        Self::Listen,
        Self::TasksGet,
        Self::TasksUpdate,
        Self::TasksCancel,
        Self::TasksStream,
        Self::SkillsList,
        Self::SkillsGet,
        Self::ResourcesDirectoryRead,
    ];

    /// Everything the runtime decides by method, in one exhaustive match: a new method
    /// does not compile until each decision is made here.
    pub const fn spec(self) -> MethodSpec {
        use Eras::{Both, Neither, Session, Stateless};
        const NAME: Option<Routing> = Some(Routing {
            param: NameParam::Name,
            required: true,
        });
        const URI: Option<Routing> = Some(Routing {
            param: NameParam::Uri,
            required: true,
        });
        // The tasks methods may go without `Mcp-Name`: the clients people have omit it
        // there (fastmcp-tasks 4.1.4, the MCP Inspector's issue #1917; the TypeScript SDK
        // fixed the same bug in its pull request #2613), FastMCP's own server accepts it,
        // and the task id routes nothing a proxy needs before the body. A header that is
        // there must still match.
        const TASK: Option<Routing> = Some(Routing {
            param: NameParam::TaskId,
            required: false,
        });
        match self {
            Self::Initialize => MethodSpec {
                name: Some("initialize"),
                eras: Session,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::Ping => MethodSpec {
                name: Some("ping"),
                eras: Session,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ToolsList => MethodSpec {
                name: Some("tools/list"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ToolsCall => MethodSpec {
                name: Some("tools/call"),
                eras: Both,
                cacheable: false,
                asks_for_input: true,
                routed_by: NAME,
                streams: false,
            },
            Self::SetLevel => MethodSpec {
                name: Some("logging/setLevel"),
                eras: Session,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ResourcesList => MethodSpec {
                name: Some("resources/list"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ResourceTemplatesList => MethodSpec {
                name: Some("resources/templates/list"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ResourcesRead => MethodSpec {
                name: Some("resources/read"),
                eras: Both,
                cacheable: true,
                asks_for_input: true,
                routed_by: URI,
                streams: false,
            },
            Self::ResourcesSubscribe => MethodSpec {
                name: Some("resources/subscribe"),
                eras: Session,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ResourcesUnsubscribe => MethodSpec {
                name: Some("resources/unsubscribe"),
                eras: Session,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::PromptsList => MethodSpec {
                name: Some("prompts/list"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::PromptsGet => MethodSpec {
                name: Some("prompts/get"),
                eras: Both,
                cacheable: false,
                asks_for_input: true,
                routed_by: NAME,
                streams: false,
            },
            Self::Complete => MethodSpec {
                name: Some("completion/complete"),
                eras: Both,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::Discover => MethodSpec {
                name: Some("server/discover"),
                eras: Stateless,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::Listen => MethodSpec {
                name: Some("subscriptions/listen"),
                eras: Stateless,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: true,
            },
            Self::TasksGet => MethodSpec {
                name: Some("tasks/get"),
                eras: Stateless,
                cacheable: false,
                asks_for_input: false,
                routed_by: TASK,
                streams: false,
            },
            Self::TasksUpdate => MethodSpec {
                name: Some("tasks/update"),
                eras: Stateless,
                cacheable: false,
                asks_for_input: false,
                routed_by: TASK,
                streams: false,
            },
            Self::TasksCancel => MethodSpec {
                name: Some("tasks/cancel"),
                eras: Stateless,
                cacheable: false,
                asks_for_input: false,
                routed_by: TASK,
                streams: false,
            },
            Self::TasksStream => MethodSpec {
                name: Some("tasks/stream"),
                eras: Stateless,
                cacheable: false,
                asks_for_input: false,
                routed_by: TASK,
                streams: true,
            },
            Self::SkillsList => MethodSpec {
                name: Some("skills/list"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::SkillsGet => MethodSpec {
                name: Some("skills/get"),
                eras: Both,
                cacheable: true,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::ResourcesDirectoryRead => MethodSpec {
                name: Some("resources/directory/read"),
                eras: Both,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
            Self::Unknown => MethodSpec {
                name: None,
                eras: Neither,
                cacheable: false,
                asks_for_input: false,
                routed_by: None,
                streams: false,
            },
        }
    }

    /// Classifies a method name.
    pub fn parse(name: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|m| m.name() == Some(name))
            .unwrap_or(Self::Unknown)
    }

    /// The method's name, as [`Method::parse`] reads it; `None` for [`Method::Unknown`].
    pub const fn name(self) -> Option<&'static str> {
        self.spec().name
    }

    /// True for the methods a stateless (2026-07-28) request may not call: the session
    /// era's handshake and session state.
    pub const fn is_session_only(self) -> bool {
        matches!(self.spec().eras, Eras::Session)
    }

    /// True for the methods of the stateless revision only.
    pub const fn is_stateless_only(self) -> bool {
        matches!(self.spec().eras, Eras::Stateless)
    }

    /// True for the methods whose answer may be `input_required` (2026-07-28).
    pub const fn may_ask_for_input(self) -> bool {
        self.spec().asks_for_input
    }

    /// True for the methods whose results carry caching hints (2026-07-28).
    pub const fn is_cacheable(self) -> bool {
        self.spec().cacheable
    }
}

// `ALL` holds every variant but `Unknown`, each at its own index: a variant added and
// not listed fails the build here.
const _: () = {
    assert!(Method::ALL.len() == Method::Unknown as usize);
    let mut i = 0;
    while i < Method::ALL.len() {
        assert!(Method::ALL[i] as usize == i);
        i += 1;
    }
};

/// What the runtime decides by method ([`Method::spec`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MethodSpec {
    /// The name on the wire; `None` for [`Method::Unknown`].
    pub name: Option<&'static str>,
    /// The protocol eras that have the method.
    pub eras: Eras,
    /// A stateless result carries caching hints (`ttlMs`, `cacheScope`).
    pub cacheable: bool,
    /// The handler may ask the client for input: a stateless answer may be
    /// `input_required`.
    pub asks_for_input: bool,
    /// The param a stateless request's `Mcp-Name` header mirrors, if any.
    pub routed_by: Option<Routing>,
    /// The reply is a stream of notes ending with the answer, not one answer.
    pub streams: bool,
}

/// The protocol eras a method belongs to: the session era (2025-11-25 and before:
/// `initialize`, `Mcp-Session-Id`) and the stateless era (2026-07-28).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eras {
    /// The session era only.
    Session,
    /// The stateless era only.
    Stateless,
    /// Both.
    Both,
    /// Neither: a method we do not know.
    Neither,
}

impl Eras {
    /// The session era has the method.
    pub const fn session(self) -> bool {
        matches!(self, Self::Session | Self::Both)
    }

    /// The stateless era has the method.
    pub const fn stateless(self) -> bool {
        matches!(self, Self::Stateless | Self::Both)
    }
}

/// How a stateless request's `Mcp-Name` header routes a method: the param it mirrors,
/// and whether it must be there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Routing {
    /// The param mirrored.
    pub param: NameParam,
    /// A request without the header is refused (-32020).
    pub required: bool,
}

/// A param that names what a request is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameParam {
    /// `params.name`: a tool or a prompt.
    Name,
    /// `params.uri`: a resource.
    Uri,
    /// `params.taskId`: a task.
    TaskId,
}

impl NameParam {
    /// The param's key in `params`.
    pub const fn key(self) -> &'static str {
        match self {
            Self::Name => "name",
            Self::Uri => "uri",
            Self::TaskId => "taskId",
        }
    }
}

/// The notifications we know by name, parsed once from a notification's method: the
/// ones the OpenTelemetry MCP conventions name (so they may name a span or a series) and
/// the client's we act on (`cancelled`, `initialized`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    /// `notifications/cancelled`: the client gave up on a request.
    Cancelled,
    /// `notifications/initialized`: sent by the client after `initialize`.
    Initialized,
    /// `notifications/message`: a log message.
    Message,
    /// `notifications/progress`: progress of a request.
    Progress,
    /// `notifications/roots/list_changed`: the client's roots changed.
    RootsListChanged,
}

impl NotificationKind {
    /// Every notification we know.
    pub const ALL: [Self; 5] = [
        Self::Cancelled,
        Self::Initialized,
        Self::Message,
        Self::Progress,
        Self::RootsListChanged,
    ];

    /// Classifies a notification's method; `None` for one we do not know.
    pub fn parse(method: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|n| n.name() == method)
    }

    /// The notification's method.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Cancelled => "notifications/cancelled",
            Self::Initialized => "notifications/initialized",
            Self::Message => "notifications/message",
            Self::Progress => "notifications/progress",
            Self::RootsListChanged => "notifications/roots/list_changed",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_to_their_method() {
        for method in Method::ALL {
            let name = method.name();
            assert_eq!(name.map(Method::parse), Some(method), "{method:?}");
        }
        assert_eq!(Method::parse("tools/cal"), Method::Unknown);
        assert_eq!(Method::Unknown.name(), None);
        for kind in NotificationKind::ALL {
            assert_eq!(NotificationKind::parse(kind.name()), Some(kind));
        }
        assert_eq!(
            NotificationKind::parse("notifications/tools/list_changed"),
            None
        );
    }

    // The predicates as they were before the spec, listed by hand: the spec keeps them.
    #[test]
    fn the_spec_keeps_the_classes() {
        let named = |f: fn(Method) -> bool| -> Vec<&str> {
            Method::ALL
                .into_iter()
                .filter(|m| f(*m))
                .filter_map(Method::name)
                .collect()
        };
        assert_eq!(
            named(Method::is_session_only),
            [
                "initialize",
                "ping",
                "logging/setLevel",
                "resources/subscribe",
                "resources/unsubscribe"
            ]
        );
        assert_eq!(
            named(Method::is_stateless_only),
            [
                "server/discover",
                "subscriptions/listen",
                "tasks/get",
                "tasks/update",
                "tasks/cancel",
                "tasks/stream"
            ]
        );
        assert_eq!(
            named(Method::may_ask_for_input),
            ["tools/call", "resources/read", "prompts/get"]
        );
        assert_eq!(
            named(Method::is_cacheable),
            [
                "tools/list",
                "resources/list",
                "resources/templates/list",
                "resources/read",
                "prompts/list",
                "server/discover",
                "skills/list",
                "skills/get"
            ]
        );
        assert_eq!(
            named(|m| m.spec().streams),
            ["subscriptions/listen", "tasks/stream"]
        );
        let routed: Vec<_> = Method::ALL
            .into_iter()
            .filter_map(|m| Some((m.name()?, m.spec().routed_by?)))
            .map(|(name, r)| (name, r.param.key(), r.required))
            .collect();
        assert_eq!(
            routed,
            [
                ("tools/call", "name", true),
                ("resources/read", "uri", true),
                ("prompts/get", "name", true),
                ("tasks/get", "taskId", false),
                ("tasks/update", "taskId", false),
                ("tasks/cancel", "taskId", false),
                ("tasks/stream", "taskId", false),
            ]
        );
        let unknown = Method::Unknown.spec();
        assert!(!unknown.eras.session() && !unknown.eras.stateless());
        assert!(Method::ToolsCall.spec().eras.session() && Method::Ping.spec().eras.session());
        assert!(!Method::Ping.spec().eras.stateless());
    }
}
