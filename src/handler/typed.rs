//! [`tool`]: the one way to write a tool. Its arguments are a Rust type (the input schema
//! is generated from it, the arguments deserialized into it before the handler runs), its
//! result anything [`IntoToolResult`], and any error converts with `?`.

use std::any::Any;
use std::future::Future;

use serde_json::{Map, Value, json};

use super::RequestContext;
use super::tools::{Tool, ToolError, is_object_schema};
use crate::protocol::methods::{CallToolResult, Content, ToolDefinition};

/// What a tool may return: a whole result, its content, or structured output ([`Json`]).
pub trait IntoToolResult {
    /// The JSON Schema of the `structuredContent` this type gives, if it gives one.
    fn output_schema() -> Option<Value> {
        None
    }

    /// The result.
    fn into_tool_result(self) -> Result<CallToolResult, ToolError>;
}

impl IntoToolResult for CallToolResult {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(self)
    }
}

impl IntoToolResult for String {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::text(self))
    }
}

impl IntoToolResult for &'static str {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::text(self))
    }
}

impl IntoToolResult for Content {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::content(vec![self]))
    }
}

impl IntoToolResult for Vec<Content> {
    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        Ok(CallToolResult::content(self))
    }
}

/// Structured output: a tool returning `Json<T>` declares `T`'s JSON Schema as its output
/// schema, and each result is sent as `structuredContent` plus, for clients that predate
/// structured results, the same JSON as text.
#[derive(Debug, Clone, PartialEq)]
pub struct Json<T>(pub T);

impl<T: serde::Serialize + schemars::JsonSchema> IntoToolResult for Json<T> {
    fn output_schema() -> Option<Value> {
        Some(schemars::schema_for!(T).to_value())
    }

    fn into_tool_result(self) -> Result<CallToolResult, ToolError> {
        let value = serde_json::to_value(self.0).map_err(|e| ToolError::Failed(e.to_string()))?;
        let mut result = CallToolResult::text(value.to_string());
        result.structured_content = Some(value);
        Ok(result)
    }
}

/// A tool called `name`, run by `handler(arguments, ctx)`.
///
/// - **Arguments**: any type that is `Deserialize` and `JsonSchema`. Its schema (JSON
///   Schema 2020-12) is the tool's input schema, and its doc comment the tool's
///   description unless [`Tool::description`] says otherwise. Arguments that do not fit
///   get a result with `isError` and serde's explanation. A tool without arguments takes
///   `()` (its input schema is an empty object's, and it ignores what it is given); a
///   tool that reads them raw takes `serde_json::Map<String, Value>` and gives its schema
///   with [`Tool::input_schema`].
/// - **Result**: a [`CallToolResult`], a `String`, [`Content`], or [`Json`] for
///   structured output; errors are [`ToolError`], into which any error converts with `?`.
/// - **Context**: the [`RequestContext`], through which the handler reports progress,
///   logs and asks the client things.
///
/// The builder methods of [`Tool`] add what else it declares: task support, scopes, an
/// output schema, a title and annotations.
///
/// # Panics
///
/// If the argument type's schema is not an object's (a `String`, a number, a `Vec`, an
/// enum of plain values; an enum whose variants are all objects is one): MCP passes a
/// tool's arguments as a JSON object, so such a tool could never be called. The message
/// says how to wrap the value in a struct. It panics where the tool is made, at
/// start-up, never while serving.
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
/// tools
///     .register(tool("add", add))
///     .register(tool("ping", |(), _ctx| async { Ok("pong") }).description("Answers pong."));
/// assert_eq!(tools.list()[0].description, "Adds two integers.");
/// ```
pub fn tool<A, R, F, Fut>(name: &str, handler: F) -> Tool
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    R: IntoToolResult,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, ToolError>> + Send + 'static,
{
    let ArgumentType {
        schema,
        takes_nothing,
        description,
    } = ArgumentType::of::<A>(name);
    let input_schema = match takes_nothing {
        true => json!({"type": "object", "properties": {}}),
        false => objects_typed(schema),
    };
    if !is_object_schema(&input_schema) {
        // Registration is start-up, and a tool MCP clients could never call is a mistake in
        // the author's code, not in a request: said at once, with the fix.
        panic!(
            "tool `{name}`: its argument type `{}` is not a JSON object (its schema: {}), \
             and MCP passes a tool's arguments as an object; wrap the value in a struct, \
             e.g. `#[derive(Deserialize, JsonSchema)] struct Args {{ value: {0} }}`, and \
             take `Args` (a tool without arguments takes `()`)",
            std::any::type_name::<A>(),
            input_schema,
        );
    }
    let definition = ToolDefinition {
        name: name.into(),
        description,
        input_schema,
        output_schema: R::output_schema(),
        ..Default::default()
    };
    Tool::new(
        definition,
        Box::new(move |arguments, ctx| {
            let call = decode::<A>(arguments, takes_nothing)
                .map_err(|e| ToolError::InvalidArguments(e.to_string()))
                .map(|args| handler(args, ctx));
            Box::pin(async move { call?.await?.into_tool_result() })
        }),
    )
}

/// What a handler's argument type says of itself: for a tool's and a prompt's arguments.
pub(super) struct ArgumentType {
    /// Its JSON Schema.
    pub(super) schema: Value,
    /// `()` (or a unit struct), made from null: the handler takes no arguments.
    pub(super) takes_nothing: bool,
    /// Its doc comment, or else the handler's `name`.
    pub(super) description: String,
}

impl ArgumentType {
    pub(super) fn of<A: schemars::JsonSchema>(name: &str) -> Self {
        let schema = schemars::schema_for!(A).to_value();
        let takes_nothing = schema.get("type").and_then(Value::as_str) == Some("null");
        let description = schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or(name)
            .to_owned();
        Self {
            schema,
            takes_nothing,
            description,
        }
    }
}

/// An enum's schema (`oneOf` or `anyOf`, no `type`) whose every variant is an object
/// gets `"type": "object"` at its top, as MCP requires of an input schema; any other
/// schema is returned as it is.
fn objects_typed(mut schema: Value) -> Value {
    let all_objects = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_array)
            .is_some_and(|variants| variants.iter().all(is_object_schema))
    };
    let typed = schema.get("type").is_some();
    if !typed
        && (all_objects("oneOf") || all_objects("anyOf"))
        && let Some(object) = schema.as_object_mut()
    {
        object.insert("type".into(), Value::from("object"));
    }
    schema
}

/// A tool's or a prompt's arguments as `A`: taken as they are when `A` is the raw map,
/// null when the handler takes nothing, deserialized otherwise.
pub(super) fn decode<A: serde::de::DeserializeOwned + 'static>(
    arguments: Map<String, Value>,
    takes_nothing: bool,
) -> Result<A, serde_json::Error> {
    let mut raw = Some(arguments);
    if let Some(same) = (&mut raw as &mut dyn Any).downcast_mut::<Option<A>>()
        && let Some(arguments) = same.take()
    {
        return Ok(arguments);
    }
    let value = match (takes_nothing, raw) {
        (false, Some(arguments)) => Value::Object(arguments),
        _ => Value::Null,
    };
    serde_json::from_value(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_maps_pass_through_and_unit_ignores_its_arguments() {
        let mut arguments = Map::new();
        arguments.insert("k".into(), json!(1));
        let raw = decode::<Map<String, Value>>(arguments.clone(), false);
        assert_eq!(raw.ok(), Some(arguments.clone()));
        assert_eq!(decode::<()>(arguments.clone(), true).ok(), Some(()));
        assert!(decode::<String>(arguments, false).is_err());
    }

    #[test]
    fn a_tool_of_unit_takes_an_empty_object() {
        let ping = tool("ping", |(), _| async { Ok("pong") });
        let definition = ping.definition();
        assert_eq!(
            definition.input_schema,
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            (definition.description.as_str(), &definition.output_schema),
            ("ping", &None)
        );
    }
}
