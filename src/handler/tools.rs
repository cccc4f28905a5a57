//! Tools: the [`Tool`] trait and the registry `tools/list` and `tools/call` use.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::scopes::ScopeMap;
pub use super::typed::{structured_tool, tool, typed_tool};
use super::{BoxFuture, ClientRequestError, RequestContext};
use crate::auth::Principal;
use crate::protocol::meta::{HeaderParam, header_params};
use crate::protocol::methods::{CallToolResult, TaskOptions, TaskSupport, ToolDefinition};

/// Why a tool call failed.
///
/// Any error converts into it with `?` (as [`ToolError::Failed`], its message shown to
/// the model), so a tool's body reads like any Rust function's. For that, `ToolError`
/// itself is not a [`std::error::Error`] (as `anyhow::Error` is not): it is where errors
/// end, not one more to wrap.
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

impl<E: std::error::Error + Send + Sync + 'static> From<E> for ToolError {
    /// A question the client was not equipped to answer (a
    /// [`ClientRequestError::NotDeclared`]) is -32021; any other error is the tool's
    /// failure, its message shown to the model.
    fn from(e: E) -> Self {
        match (&e as &dyn std::any::Any).downcast_ref::<ClientRequestError>() {
            Some(ClientRequestError::NotDeclared(required)) => {
                Self::MissingCapability(required.clone())
            }
            _ => Self::Failed(e.to_string()),
        }
    }
}

/// A callable tool.
pub trait Tool: Send + Sync + 'static {
    /// Name, description and input schema.
    fn definition(&self) -> ToolDefinition;

    /// Runs the tool.
    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> BoxFuture<'_, Result<CallToolResult, ToolError>>;
}

/// The tools a server offers, listed in registration order.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    order: Vec<String>,
    tools: HashMap<String, Arc<dyn Tool>>,
    /// What each request to a tool needs before it runs, worked out once.
    routing: HashMap<String, ToolRouting>,
    /// The scopes each tool needs (`[auth]`).
    scopes: ScopeMap,
}

/// What the runtime checks of a tool on every call, worked out when it is registered (a
/// tool's definition is built anew each time it is asked for).
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
        f.debug_list().entries(&self.order).finish()
    }
}

impl ToolRegistry {
    /// Adds `tool`, replacing any tool of the same name.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        let definition = tool.definition();
        let name = definition.name;
        let routing = ToolRouting {
            name: name.as_str().into(),
            span_name: format!("tools/call {name}").into(),
            header_params: header_params(&definition.input_schema).into(),
            tasks: definition.tasks,
        };
        self.routing.insert(name.clone(), routing);
        if self.tools.insert(name.clone(), Arc::new(tool)).is_none() {
            self.order.push(name);
        }
        self
    }

    /// Declares that calling tool `name` needs every scope in `scopes` (`[auth]`): a
    /// caller without them does not see it in `tools/list` and gets 403 when it calls it.
    ///
    /// ```
    /// use otpmcp::handler::builtin::Echo;
    /// use otpmcp::handler::tools::ToolRegistry;
    ///
    /// let mut tools = ToolRegistry::default();
    /// tools.register(Echo).require_scopes("echo", ["mcp:echo"]);
    /// assert_eq!(&*tools.scopes("echo"), ["mcp:echo".to_owned()]);
    /// ```
    pub fn require_scopes<S: Into<String>>(
        &mut self,
        name: &str,
        scopes: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.scopes.require(name, scopes);
        self
    }

    /// The scopes calling tool `name` needs.
    pub fn scopes(&self, name: &str) -> Arc<[String]> {
        self.scopes.of(name)
    }

    /// The definitions of the tools `principal` may call (all of them without `[auth]`).
    pub fn list_for(&self, principal: Option<&Principal>) -> Vec<ToolDefinition> {
        self.order
            .iter()
            .filter(|n| self.scopes.allows(n, principal))
            .filter_map(|n| self.tools.get(n))
            .map(|t| t.definition())
            .collect()
    }

    /// Removes tool `name`; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.order.retain(|n| n != name);
        self.routing.remove(name);
        self.scopes.remove(name);
        self.tools.remove(name).is_some()
    }

    /// What a call to tool `name` needs checked, if there is such a tool.
    pub fn routing(&self, name: &str) -> Option<&ToolRouting> {
        self.routing.get(name)
    }

    /// Definitions of all tools.
    pub fn list(&self) -> Vec<ToolDefinition> {
        self.order
            .iter()
            .filter_map(|n| self.tools.get(n))
            .map(|t| t.definition())
            .collect()
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Tool>> {
        self.tools.get(name).cloned()
    }
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

type ToolFn = Box<
    dyn Fn(
            Map<String, Value>,
            RequestContext,
        ) -> BoxFuture<'static, Result<CallToolResult, ToolError>>
        + Send
        + Sync,
>;

/// A tool made of a definition and an async function; see [`tool_fn`], [`typed_tool`] and
/// [`structured_tool`].
pub struct FnTool {
    definition: ToolDefinition,
    f: ToolFn,
}

impl std::fmt::Debug for FnTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.definition.name)
            .finish()
    }
}

impl FnTool {
    /// Declares the JSON Schema of the tool's `structuredContent`.
    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.definition.output_schema = Some(schema);
        self
    }

    /// Lets the tool run as a task (tasks extension) for requests that declare it:
    /// [`TaskSupport::Optional`] or [`TaskSupport::Required`].
    pub fn with_task_support(mut self, support: TaskSupport) -> Self {
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
}

/// A tool from a name, a description, a JSON Schema for its arguments and an async
/// function.
///
/// ```
/// use otpmcp::handler::{ToolRegistry, tools::tool_fn, tools::required_str};
/// use otpmcp::protocol::methods::CallToolResult;
/// use serde_json::json;
///
/// let mut tools = ToolRegistry::default();
/// tools.register(tool_fn(
///     "shout",
///     "Upper-cases its text.",
///     json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
///     |args, _ctx| async move {
///         Ok(CallToolResult::text(required_str(&args, "text")?.to_uppercase()))
///     },
/// ));
/// ```
pub fn tool_fn<F, Fut>(name: &str, description: &str, input_schema: Value, f: F) -> FnTool
where
    F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    FnTool {
        definition: ToolDefinition {
            name: name.into(),
            description: description.into(),
            input_schema,
            output_schema: None,
            tasks: Default::default(),
        },
        f: Box::new(move |args, ctx| Box::pin(f(args, ctx))),
    }
}

impl Tool for FnTool {
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> BoxFuture<'_, Result<CallToolResult, ToolError>> {
        (self.f)(arguments, ctx)
    }
}
