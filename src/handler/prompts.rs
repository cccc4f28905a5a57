//! Prompts: named message templates with arguments, each rendered by an async function.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::registry::Registry;
use super::{BoxFuture, RequestContext};
use crate::auth::Principal;
use crate::protocol::methods::{GetPromptResult, PromptDefinition};

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

    /// Declares that prompt `name` needs every scope in `scopes` (`[auth]`), as
    /// [`super::tools::ToolRegistry::require_scopes`] does for a tool.
    pub fn require_scopes<S: Into<String>>(
        &mut self,
        name: &str,
        scopes: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.0.require_scopes(name, scopes);
        self
    }

    /// The scopes prompt `name` needs.
    pub fn scopes(&self, name: &str) -> Arc<[String]> {
        self.0.scopes(name)
    }

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
