//! Tools: what [`super::typed::tool`] makes, and the registry `tools/list` and
//! `tools/call` use.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::{Registry, scope_methods};
use super::{BoxFuture, ClientRequestError, RequestContext};
use crate::auth::Principal;
use crate::protocol::meta::{HeaderParam, header_params};
use crate::protocol::methods::{
    CallToolResult, Icon, TaskOptions, TaskSupport, ToolAnnotations, ToolDefinition,
};

/// Why a tool call failed.
///
/// Any error converts into it with `?` (as [`ToolError::Failed`], its message shown to
/// the model), so a tool's body reads like any Rust function's: every
/// [`std::error::Error`], `Box<dyn Error + Send + Sync>`, `anyhow::Error`, and a `String`
/// or `&str` — whatever converts into `Box<dyn Error + Send + Sync>`. Only the error's
/// own message is kept (for `anyhow::Error`, its outermost context), not its chain of
/// sources. For that, `ToolError` itself is not a [`std::error::Error`] (as
/// `anyhow::Error` is not): it is where errors end, not one more to wrap.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema: a result with `isError`, its message
    /// naming the tool and what is wrong, so the model can correct the call (SEP-1303; an
    /// unknown tool is still -32602).
    InvalidArguments(String),
    /// The tool ran and failed: reported to the model as a result with `isError`.
    Failed(String),
    /// The server could not run the tool for a reason that is not the model's to correct:
    /// a protocol error (-32603), and a task that ends with it is `failed`.
    Internal(String),
    /// The tool cannot run without a capability the client did not declare (the
    /// capabilities object it needs): a protocol error (-32021).
    MissingCapability(Value),
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::InvalidArguments(why) => write!(f, "invalid arguments: {why}"),
            Self::Failed(why) => f.write_str(why),
            Self::Internal(why) => write!(f, "internal error: {why}"),
            Self::MissingCapability(required) => write!(f, "the client must declare {required}"),
        }
    }
}

/// The bound is `Into<Box<dyn Error + Send + Sync>>` rather than `Error`: that takes in
/// every `Error` through std's own conversion, and also the boxed error and
/// `anyhow::Error` (which convert into it but are not `Error`s), where a second impl
/// beside an `Error` blanket would conflict.
impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for ToolError {
    /// A question the client was not equipped to answer (a
    /// [`ClientRequestError::NotDeclared`]) is -32021; any other error is the tool's
    /// failure, its message shown to the model.
    fn from(e: E) -> Self {
        let e: Box<dyn std::error::Error + Send + Sync> = e.into();
        match e.downcast_ref::<ClientRequestError>() {
            Some(ClientRequestError::NotDeclared(required)) => {
                Self::MissingCapability(required.clone())
            }
            _ => Self::Failed(e.to_string()),
        }
    }
}

/// What runs a tool: its arguments and context in, its result out.
pub(super) type Handler = Box<
    dyn Fn(
            Map<String, Value>,
            RequestContext,
        ) -> BoxFuture<'static, Result<CallToolResult, ToolError>>
        + Send
        + Sync,
>;

/// A tool: its definition and its handler. Made by [`tool`](super::typed::tool) and adjusted
/// by the methods below before it is registered.
pub struct Tool {
    definition: ToolDefinition,
    handler: Handler,
    /// The scopes a caller needs (`[auth]`), applied when the tool is registered.
    scopes: Vec<String>,
}

impl std::fmt::Debug for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.definition.name)
            .finish()
    }
}

impl Tool {
    /// A tool of `definition` run by `handler`.
    pub(super) fn new(definition: ToolDefinition, handler: Handler) -> Self {
        Self {
            definition,
            handler,
            scopes: Vec::new(),
        }
    }

    /// Its name, description, schemas and task options.
    pub fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    /// Runs the tool.
    pub fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> BoxFuture<'static, Result<CallToolResult, ToolError>> {
        (self.handler)(arguments, ctx)
    }

    /// What the model reads about the tool (default: the argument type's doc comment, or
    /// else the tool's name).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.definition.description = description.into();
        self
    }

    /// The name a host shows people (`title`), where `name` is the one the model calls.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.definition.title = Some(title.into());
        self
    }

    /// Hints a host shows when asking to run the tool: read-only, destructive, idempotent,
    /// open world ([`ToolAnnotations`]).
    pub fn annotations(mut self, annotations: ToolAnnotations) -> Self {
        self.definition.annotations = Some(annotations);
        self
    }

    /// One more picture a host may show beside the tool ([`Icon`]).
    pub fn icon(mut self, icon: Icon) -> Self {
        self.definition.icons.push(icon);
        self
    }

    /// Replaces the JSON Schema of the arguments, which is otherwise generated from the
    /// argument type. For a tool that takes its arguments as a raw
    /// `serde_json::Map<String, Value>` and says what it accepts by hand.
    ///
    /// # Panics
    ///
    /// If `schema` is not an object's (`"type": "object"`), which MCP requires of a tool's
    /// arguments.
    pub fn input_schema(mut self, schema: Value) -> Self {
        assert!(
            is_object_schema(&schema),
            "tool `{}`: an input schema must describe an object (\"type\": \"object\"), \
             not {schema}",
            self.definition.name
        );
        self.definition.input_schema = schema;
        self
    }

    /// Declares the JSON Schema of the tool's `structuredContent`; a tool that returns
    /// [`super::typed::Json`] has it already.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.definition.output_schema = Some(schema);
        self
    }

    /// Lets the tool run as a task (tasks extension) for requests that declare it:
    /// [`TaskSupport::Optional`] or [`TaskSupport::Required`].
    pub fn task_support(mut self, support: TaskSupport) -> Self {
        self.definition.tasks.support = support;
        self
    }

    /// The handler becomes a task itself, with [`RequestContext::start_task`], instead of
    /// at its start: it may first ask the client what it needs, in the request.
    pub fn starting_task_itself(mut self) -> Self {
        self.definition.tasks.started_by_handler = true;
        self
    }

    /// Declares the tool safe to run again from its start (idempotent): if the replica
    /// running its task dies, another replica runs it again once and the task completes,
    /// where it would otherwise fail.
    pub fn rerunnable(mut self) -> Self {
        self.definition.tasks.rerunnable = true;
        self
    }

    /// Declares that calling the tool needs every scope in `scopes` (`[auth]`): a caller
    /// without them does not see it in `tools/list` and gets 403 when it calls it. The
    /// same as [`ToolRegistry::require_scopes`] once it is registered.
    pub fn scopes<S: Into<String>>(mut self, scopes: impl IntoIterator<Item = S>) -> Self {
        self.scopes = scopes.into_iter().map(Into::into).collect();
        self
    }
}

/// A registered tool and what its calls need checked.
#[derive(Clone)]
struct Registered {
    tool: Arc<Tool>,
    routing: ToolRouting,
}

/// The tools a server offers, listed in registration order.
#[derive(Clone, Default)]
pub struct ToolRegistry(Registry<Registered>);

/// What the runtime checks of a tool on every call, worked out when it is registered.
#[derive(Debug, Clone, Default)]
pub struct ToolRouting {
    /// The tool's name, shared by the spans and metric series that name it.
    pub name: Arc<str>,
    /// Its operation's span name, `tools/call {name}`.
    pub span_name: Arc<str>,
    /// The arguments its `Mcp-Param-*` headers mirror.
    pub header_params: Arc<[HeaderParam]>,
    /// How it runs as a task.
    pub tasks: TaskOptions,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl ToolRegistry {
    /// Adds `tool`, replacing any tool of the same name where it stood. Scopes the tool
    /// declares ([`Tool::scopes`]) replace those declared for its name before.
    pub fn register(&mut self, mut tool: Tool) -> &mut Self {
        let name = tool.definition.name.clone();
        let routing = ToolRouting {
            name: name.as_str().into(),
            span_name: format!("tools/call {name}").into(),
            header_params: header_params(&tool.definition.input_schema).into(),
            tasks: tool.definition.tasks,
        };
        let scopes = std::mem::take(&mut tool.scopes);
        if !scopes.is_empty() {
            self.0.require_scopes(&name, scopes);
        }
        let tool = Arc::new(tool);
        self.0.insert(name, Registered { tool, routing });
        self
    }

    scope_methods!(
        "calling tool",
        ///
        /// ```
        /// use otpmcp::handler::builtin::echo;
        /// use otpmcp::handler::ToolRegistry;
        ///
        /// let mut tools = ToolRegistry::default();
        /// tools.register(echo()).require_scopes("echo", ["mcp:echo"]);
        /// assert_eq!(&*tools.scopes("echo"), ["mcp:echo".to_owned()]);
        /// ```
    );

    /// The definitions of the tools `principal` may call (all of them without `[auth]`).
    pub fn list_for(&self, principal: Option<&Principal>) -> Vec<ToolDefinition> {
        self.0
            .list_for(principal)
            .map(|r| r.tool.definition.clone())
            .collect()
    }

    /// Removes tool `name`; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name)
    }

    /// What a call to tool `name` needs checked, if there is such a tool.
    pub fn routing(&self, name: &str) -> Option<&ToolRouting> {
        self.0.get(name).map(|r| &r.routing)
    }

    /// Definitions of all tools.
    pub fn list(&self) -> Vec<ToolDefinition> {
        self.list_for(None)
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<Tool>> {
        self.0.get(name).map(|r| r.tool.clone())
    }
}

/// True when `schema` describes a JSON object (`"type": "object"`), which is what MCP
/// requires of a tool's `inputSchema`.
pub(super) fn is_object_schema(schema: &Value) -> bool {
    schema.get("type").and_then(Value::as_str) == Some("object")
}

/// Reads a required string argument.
pub fn required_str<'a>(args: &'a Map<String, Value>, key: &str) -> Result<&'a str, ToolError> {
    match args.get(key) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(ToolError::InvalidArguments(format!(
            "`{key}` must be a string"
        ))),
        None => Err(ToolError::InvalidArguments(format!(
            "missing required argument `{key}`"
        ))),
    }
}

/// Reads an optional non-negative integer argument no larger than `max`.
pub fn optional_u64(
    args: &Map<String, Value>,
    key: &str,
    default: u64,
    max: u64,
) -> Result<u64, ToolError> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(n),
            _ => Err(ToolError::InvalidArguments(format!(
                "`{key}` must be an integer from 0 to {max}"
            ))),
        },
    }
}
