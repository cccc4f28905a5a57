//! Prompts: named message templates with arguments, each rendered by an async function:
//! typed ([`prompt`], arguments from a Rust type, as [`super::tool`] does for tools) or
//! raw ([`PromptRegistry::prompt`], a definition and the argument map).

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::{Registry, scope_methods};
use super::typed::{ArgumentType, decode};
use super::{BoxFuture, RequestContext};
use crate::auth::Principal;
use crate::protocol::methods::{
    Content, GetPromptResult, PromptArgument, PromptDefinition, PromptMessage, Role,
};

/// Why a prompt could not be rendered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PromptError {
    /// Unknown prompt, missing or bad arguments (-32602).
    #[error("{0}")]
    InvalidParams(String),
    /// The renderer failed (-32603).
    #[error("{0}")]
    Failed(String),
}

type Renderer = Arc<
    dyn Fn(
            Map<String, Value>,
            RequestContext,
        ) -> BoxFuture<'static, Result<GetPromptResult, PromptError>>
        + Send
        + Sync,
>;

/// The prompts a server offers, listed in registration order.
#[derive(Clone, Default)]
pub struct PromptRegistry(Registry<(PromptDefinition, Renderer)>);

impl std::fmt::Debug for PromptRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl PromptRegistry {
    /// Adds a prompt rendered by `render(arguments, ctx)`, replacing any prompt of the same
    /// name where it stood. Required arguments are checked before `render` runs.
    pub fn prompt<F, Fut>(&mut self, definition: PromptDefinition, render: F) -> &mut Self
    where
        F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, PromptError>> + Send + 'static,
    {
        let renderer: Renderer = Arc::new(move |args, ctx| Box::pin(render(args, ctx)));
        self.0
            .insert(definition.name.clone(), (definition, renderer));
        self
    }

    /// Adds a prompt made by [`prompt`], replacing any prompt of the same name where it
    /// stood.
    pub fn register(&mut self, prompt: Prompt) -> &mut Self {
        self.0.insert(
            prompt.definition.name.clone(),
            (prompt.definition, prompt.render),
        );
        self
    }

    scope_methods!("prompt");

    /// The prompts `principal` may get (all of them without `[auth]`).
    pub fn list_for(&self, principal: Option<&Principal>) -> Vec<PromptDefinition> {
        self.0.list_for(principal).map(|(d, _)| d.clone()).collect()
    }

    /// Removes prompt `name`; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.0.remove(name)
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True when prompt `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// Renders prompt `name`.
    pub async fn get(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> Result<GetPromptResult, PromptError> {
        let (definition, render) = self
            .0
            .get(name)
            .ok_or_else(|| PromptError::InvalidParams(format!("Unknown prompt: {name}")))?;
        if let Some(missing) = definition
            .arguments
            .iter()
            .find(|a| a.required && !arguments.contains_key(&a.name))
        {
            return Err(PromptError::InvalidParams(format!(
                "prompt {name} needs argument `{}`",
                missing.name
            )));
        }
        render(arguments, ctx).await
    }
}

/// What a typed prompt may return: the whole result, its messages, or one text the user
/// says.
pub trait IntoPromptResult {
    /// The result.
    fn into_prompt_result(self) -> GetPromptResult;
}

impl IntoPromptResult for GetPromptResult {
    fn into_prompt_result(self) -> GetPromptResult {
        self
    }
}

impl IntoPromptResult for Vec<PromptMessage> {
    fn into_prompt_result(self) -> GetPromptResult {
        GetPromptResult {
            description: None,
            messages: self,
        }
    }
}

impl IntoPromptResult for String {
    fn into_prompt_result(self) -> GetPromptResult {
        vec![PromptMessage {
            role: Role::User,
            content: Content::text(self),
        }]
        .into_prompt_result()
    }
}

/// A prompt made by [`prompt`]: add it with [`PromptRegistry::register`].
pub struct Prompt {
    definition: PromptDefinition,
    render: Renderer,
}

impl std::fmt::Debug for Prompt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.definition.fmt(f)
    }
}

impl Prompt {
    /// What the prompt is for (default: the argument type's doc comment, or else the
    /// prompt's name).
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.definition.description = description.into();
        self
    }

    /// What `prompts/list` says of it.
    pub fn definition(&self) -> &PromptDefinition {
        &self.definition
    }
}

/// A prompt called `name`, rendered by `render(arguments, ctx)`: the prompt counterpart of
/// [`super::tool`].
///
/// - **Arguments**: a type that is `Deserialize` and `JsonSchema`, whose fields are the
///   prompt's arguments: each field's doc comment its description, an `Option` one not
///   required. MCP passes prompt arguments as strings, so each field is a `String`, an
///   `Option<String>` or an enum of plain names (parse numbers in the prompt). A prompt
///   without arguments takes `()`. A required argument left out, or one that does not
///   fit, is answered with -32602 before `render` runs.
/// - **Result**: a [`GetPromptResult`], its `Vec<PromptMessage>`, or a `String`: one
///   message from the user.
///
/// # Panics
///
/// If the argument type is not a struct of such fields: said at start-up, where the
/// prompt is made, with the field and how to fix it; never while serving.
///
/// ```
/// use otpmcp::prelude::*;
///
/// /// Asks for a review of some code.
/// #[derive(serde::Deserialize, JsonSchema)]
/// struct Review {
///     /// The code to review.
///     code: String,
///     /// What to look for (anything, if not given).
///     focus: Option<String>,
/// }
///
/// let mut prompts = PromptRegistry::default();
/// prompts.register(prompt("review", |args: Review, _ctx| async move {
///     let focus = args.focus.unwrap_or_else(|| "anything".into());
///     Ok(format!("Review this code, looking for {focus}:\n{}", args.code))
/// }));
/// let listed = &prompts.list_for(None)[0];
/// assert_eq!(listed.description, "Asks for a review of some code.");
/// assert!(listed.arguments.iter().any(|a| a.name == "code" && a.required));
/// assert!(listed.arguments.iter().any(|a| a.name == "focus" && !a.required));
/// ```
pub fn prompt<A, R, F, Fut>(name: &str, render: F) -> Prompt
where
    A: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
    R: IntoPromptResult,
    F: Fn(A, RequestContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<R, PromptError>> + Send + 'static,
{
    let ArgumentType {
        schema,
        takes_nothing,
        description,
    } = ArgumentType::of::<A>(name);
    let arguments = match takes_nothing {
        true => Vec::new(),
        false => arguments_of(name, std::any::type_name::<A>(), &schema),
    };
    let prompt_name = name.to_owned();
    let render: Renderer = Arc::new(move |arguments, ctx| {
        let rendered = decode::<A>(arguments, takes_nothing)
            .map_err(|e| PromptError::InvalidParams(format!("prompt {prompt_name}: {e}")))
            .map(|args| render(args, ctx));
        Box::pin(async move { Ok(rendered?.await?.into_prompt_result()) })
    });
    Prompt {
        definition: PromptDefinition {
            name: name.into(),
            description,
            arguments,
        },
        render,
    }
}

/// The arguments a prompt's argument type declares: its schema's properties, each of
/// which must take a string.
fn arguments_of(name: &str, type_name: &str, schema: &Value) -> Vec<PromptArgument> {
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        // Registration is start-up: a mistake in the author's code, said at once.
        panic!(
            "prompt `{name}`: its argument type `{type_name}` is not a struct (its schema: \
             {schema}); MCP passes a prompt's arguments by name: take a struct of `String` \
             fields, or `()` for none"
        );
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    properties
        .iter()
        .map(|(field, property)| {
            if !takes_a_string(property, schema, 0) {
                panic!(
                    "prompt `{name}`: argument `{field}` of `{type_name}` does not take a \
                     string (its schema: {property}); MCP passes prompt arguments as \
                     strings: make it a `String` (or `Option<String>`) and parse it in the \
                     prompt"
                );
            }
            PromptArgument {
                name: field.clone(),
                description: property
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                required: required.contains(&field.as_str()),
            }
        })
        .collect()
}

/// Whether a value of `schema` may be a string: a string type, a string constant or
/// enum, a reference to one in `root`'s `$defs`, or a choice (`Option`) of which one is.
fn takes_a_string(schema: &Value, root: &Value, depth: u8) -> bool {
    if depth > 8 {
        return false;
    }
    let is_string = |v: &Value| v.as_str() == Some("string");
    if schema.get("type").is_some_and(|t| {
        is_string(t)
            || t.as_array()
                .is_some_and(|types| types.iter().any(is_string))
    }) || schema.get("const").is_some_and(Value::is_string)
        || schema
            .get("enum")
            .and_then(Value::as_array)
            .is_some_and(|values| values.iter().all(Value::is_string))
    {
        return true;
    }
    if let Some(target) = schema
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| root.get("$defs")?.get(name))
    {
        return takes_a_string(target, root, depth + 1);
    }
    ["anyOf", "oneOf"].iter().any(|key| {
        schema
            .get(key)
            .and_then(Value::as_array)
            .is_some_and(|choices| choices.iter().any(|c| takes_a_string(c, root, depth + 1)))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A plan for a trip.
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)] // Read through serde only.
    struct Trip {
        /// Where to.
        city: String,
        /// How (walking if not given).
        by: Option<Mode>,
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        Walking,
        Train,
    }

    fn trip_prompt() -> Prompt {
        prompt("trip", |args: Trip, _ctx| async move {
            let by = match args.by {
                Some(Mode::Train) => "train",
                Some(Mode::Walking) | None => "foot",
            };
            Ok(format!("Plan a trip to {} by {by}.", args.city))
        })
    }

    #[test]
    fn a_types_fields_are_the_prompts_arguments() {
        let prompt = trip_prompt();
        let definition = prompt.definition();
        assert_eq!(definition.description, "A plan for a trip.");
        assert_eq!(
            serde_json::to_value(&definition.arguments).unwrap_or_default(),
            json!([
                {"name": "by", "description": "How (walking if not given).", "required": false},
                {"name": "city", "description": "Where to.", "required": true},
            ])
        );
    }

    #[tokio::test]
    async fn arguments_are_decoded_and_checked_before_the_prompt_runs() {
        let mut prompts = PromptRegistry::default();
        prompts.register(trip_prompt());
        let args = |v: Value| v.as_object().cloned().unwrap_or_default();
        let got = prompts
            .get(
                "trip",
                args(json!({"city": "Lyon", "by": "train"})),
                RequestContext::default(),
            )
            .await;
        let text = got.map(|r| serde_json::to_value(&r.messages).unwrap_or_default());
        assert_eq!(
            text,
            Ok(
                json!([{"role": "user", "content": {"type": "text", "text": "Plan a trip to Lyon by train."}}])
            )
        );
        let missing = prompts
            .get("trip", args(json!({})), RequestContext::default())
            .await;
        assert!(matches!(missing, Err(PromptError::InvalidParams(m)) if m.contains("city")));
        let bad = prompts
            .get(
                "trip",
                args(json!({"city": "Lyon", "by": "plane"})),
                RequestContext::default(),
            )
            .await;
        assert!(matches!(bad, Err(PromptError::InvalidParams(m)) if m.contains("plane")));
    }

    #[tokio::test]
    async fn a_prompt_without_arguments_takes_unit() {
        let mut prompts = PromptRegistry::default();
        prompts.register(prompt("hello", |(), _ctx| async {
            Ok(String::from("Say hello."))
        }));
        assert!(prompts.list_for(None)[0].arguments.is_empty());
        let got = prompts
            .get("hello", Map::new(), RequestContext::default())
            .await;
        assert_eq!(got.map(|r| r.messages.len()), Ok(1));
    }

    #[derive(serde::Deserialize, schemars::JsonSchema)]
    #[allow(dead_code)] // Never made: the prompt is refused.
    struct Count {
        n: u32,
    }

    #[test]
    #[should_panic(expected = "argument `n` of")]
    fn a_field_that_takes_no_string_is_refused_where_the_prompt_is_made() {
        let _ = prompt("count", |_: Count, _ctx| async { Ok(String::new()) });
    }
}
