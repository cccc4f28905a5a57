//! Tools: the [`Tool`] trait and the registry `tools/list` and `tools/call` use.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::{BoxFuture, RequestContext};
use crate::protocol::methods::{CallToolResult, ToolDefinition};

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolError {
    /// The arguments do not fit the tool's schema: a protocol error (-32602).
    #[error("invalid arguments: {0}")]
    InvalidArguments(String),
    /// The tool ran and failed: reported to the model as a result with `isError`.
    #[error("{0}")]
    Failed(String),
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

/// A tool made of a definition and an async function; see [`tool_fn`].
pub struct FnTool<F> {
    definition: ToolDefinition,
    f: F,
}

impl<F> std::fmt::Debug for FnTool<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnTool")
            .field("name", &self.definition.name)
            .finish()
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
pub fn tool_fn<F, Fut>(name: &str, description: &str, input_schema: Value, f: F) -> FnTool<F>
where
    F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    FnTool {
        definition: ToolDefinition {
            name: name.into(),
            description: description.into(),
            input_schema,
        },
        f,
    }
}

impl<F, Fut> Tool for FnTool<F>
where
    F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<CallToolResult, ToolError>> + Send + 'static,
{
    fn definition(&self) -> ToolDefinition {
        self.definition.clone()
    }

    fn call(
        &self,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> BoxFuture<'_, Result<CallToolResult, ToolError>> {
        Box::pin((self.f)(arguments, ctx))
    }
}
