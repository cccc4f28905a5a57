//! Tools: the [`Tool`] trait and the registry `tools/list` and `tools/call` use.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{BoxFuture, ClientRequestError, RequestContext};
use crate::protocol::methods::{CallToolResult, TaskSupport, ToolDefinition};

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema: a protocol error (-32602).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed: reported to the model as a result with `isError`.
    #[error("{0}")]
    Failed(String),
    /// The tool cannot run without a capability the client did not declare (the
    /// capabilities object it needs): a protocol error (-32021).
    #[error("the client must declare {0}")]
    MissingCapability(Value),
}

impl From<ClientRequestError> for ToolError {
    /// A question the client was not equipped to answer is -32021; any other failure to
    /// get an answer is the tool's failure.
    fn from(e: ClientRequestError) -> Self {
        match e {
            ClientRequestError::NotDeclared(required) => Self::MissingCapability(required),
            other => Self::Failed(other.to_string()),
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
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(&self.order).finish()
    }
}

impl ToolRegistry {
    /// Adds `tool`, replacing any tool of the same name.
    pub fn register(&mut self, tool: impl Tool) -> &mut Self {
        let name = tool.definition().name;
        if self.tools.insert(name.clone(), Arc::new(tool)).is_none() {
            self.order.push(name);
        }
        self
    }

    /// Removes tool `name`; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.order.retain(|n| n != name);
        self.tools.remove(name).is_some()
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

/// A tool whose arguments are a Rust type: the input schema (JSON Schema 2020-12) is
/// generated from `A`, and the arguments are deserialized into it; arguments that do not
/// fit get -32602 with serde's explanation.
///
/// ```
/// use otpmcp::handler::{ToolRegistry, tools::typed_tool};
/// use otpmcp::protocol::methods::CallToolResult;
///
/// #[derive(serde::Deserialize, schemars::JsonSchema)]
/// struct Add {
///     /// First addend.
///     a: i64,
///     /// Second addend.
///     b: i64,
/// }
///
/// let mut tools = ToolRegistry::default();
/// tools.register(typed_tool("add", "Adds two integers.", |args: Add, _ctx| async move {
///     Ok(CallToolResult::text((args.a + args.b).to_string()))
/// }));
/// ```
pub fn typed_tool<A, F, Fut>(name: &str, description: &str, f: F) -> FnTool
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    let schema = schemars::schema_for!(A).to_value();
    tool_fn(name, description, schema, move |args, ctx| {
        let call = serde_json::from_value::<A>(Value::Object(args))
            .map(|a| f(a, ctx))
            .map_err(|e| ToolError::InvalidArguments(e.to_string()));
        async move { call?.await }
    })
}

/// A tool with typed arguments and a typed result: the output schema is generated from
/// `O`, and each result is sent as `structuredContent` plus, for clients that predate
/// structured results, the same JSON as text.
pub fn structured_tool<A, O, F, Fut>(name: &str, description: &str, f: F) -> FnTool
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    O: serde::Serialize + schemars::JsonSchema + 'static,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<O, ToolError>> + Send + 'static,
{
    let output_schema = schemars::schema_for!(O).to_value();
    typed_tool(name, description, move |args: A, ctx| {
        let output = f(args, ctx);
        async move {
            let value = serde_json::to_value(output.await?)
                .map_err(|e| ToolError::Failed(e.to_string()))?;
            let mut result = CallToolResult::text(value.to_string());
            result.structured_content = Some(value);
            Ok(result)
        }
    })
    .with_output_schema(output_schema)
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
