//! Tools whose arguments (and results) are Rust types: the input schema is generated from
//! the argument type, arguments are deserialized before the tool runs, and any error
//! converts with `?`. [`tool`] is the shortest form: a plain async fn and a name, its
//! description taken from the argument type's doc comment.

use std::future::Future;

use serde_json::Value;

use super::RequestContext;
use super::tools::{FnTool, ToolError, tool_fn};
use crate::protocol::methods::{CallToolResult, Content};

/// What a tool may return: a whole result, or its content.
pub trait IntoToolResult {
    /// The result.
    fn into_tool_result(self) -> CallToolResult;
}

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> CallToolResult {
        self
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::text(self)
    }
}

impl IntoToolResult for Content {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::content(vec![self])
    }
}

impl IntoToolResult for Vec<Content> {
    fn into_tool_result(self) -> CallToolResult {
        CallToolResult::content(self)
    }
}

/// A tool from a name and an async fn of a typed argument: the input schema is generated
/// from `A` (JSON Schema 2020-12), and its doc comment is the tool's description. Any
/// error converts with `?` (see [`ToolError`]); the result is a [`CallToolResult`], a
/// `String` or content.
///
/// ```
/// use otpmcp::prelude::*;
///
/// /// Adds two integers.
/// #[derive(serde::Deserialize, JsonSchema)]
/// struct Add {
///     /// First addend.
///     a: i64,
///     /// Second addend.
///     b: i64,
/// }
///
/// async fn add(args: Add, _ctx: RequestContext) -> Result<String, ToolError> {
///     let sum = args.a.checked_add(args.b).ok_or(ToolError::Failed("overflow".into()))?;
///     Ok(sum.to_string())
/// }
///
/// let mut tools = ToolRegistry::default();
/// tools.register(tool("add", add));
/// assert_eq!(tools.list()[0].description, "Adds two integers.");
/// ```
pub fn tool<A, R, E, F, Fut>(name: &str, f: F) -> FnTool
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    R: IntoToolResult,
    E: Into<ToolError>,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, E>> + Send + 'static,
{
    let schema = schemars::schema_for!(A).to_value();
    let description = schema
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or(name)
        .to_owned();
    typed_tool(name, &description, move |args: A, ctx| {
        let call = f(args, ctx);
        async move {
            call.await
                .map(IntoToolResult::into_tool_result)
                .map_err(Into::into)
        }
    })
}

/// A tool whose arguments are a Rust type: the input schema (JSON Schema 2020-12) is
/// generated from `A`, and the arguments are deserialized into it; arguments that do not
/// fit get a result with `isError` and serde's explanation.
///
/// ```
/// use otpmcp::handler::{ToolRegistry, typed::typed_tool};
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
