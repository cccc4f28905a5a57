//! Prompts: named message templates with arguments, each rendered by an async function.

use std::future::Future;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::scopes::ScopeMap;
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
pub struct PromptRegistry {
    prompts: Vec<(PromptDefinition, Renderer)>,
    /// The scopes each prompt needs (`[auth]`).
    scopes: ScopeMap,
}

impl std::fmt::Debug for PromptRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.prompts.iter().map(|(d, _)| &d.name))
            .finish()
    }
}

impl PromptRegistry {
    /// Adds a prompt rendered by `render(arguments, ctx)`. Required arguments are checked
    /// before `render` runs.
    pub fn prompt<F, Fut>(&mut self, definition: PromptDefinition, render: F) -> &mut Self
    where
        F: Fn(Map<String, Value>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<GetPromptResult, PromptError>> + Send + 'static,
    {
        let renderer: Renderer = Arc::new(move |args, ctx| Box::pin(render(args, ctx)));
        self.prompts.push((definition, renderer));
        self
    }

    /// Declares that prompt `name` needs every scope in `scopes` (`[auth]`), as
    /// [`super::tools::ToolRegistry::require_scopes`] does for a tool.
    pub fn require_scopes<S: Into<String>>(
        &mut self,
        name: &str,
        scopes: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        self.scopes.require(name, scopes);
        self
    }

    /// The scopes prompt `name` needs.
    pub fn scopes(&self, name: &str) -> Arc<[String]> {
        self.scopes.of(name)
    }

    /// The prompts `principal` may get (all of them without `[auth]`).
    pub fn list_for(&self, principal: Option<&Principal>) -> Vec<PromptDefinition> {
        self.prompts
            .iter()
            .filter(|(d, _)| self.scopes.allows(&d.name, principal))
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// Removes prompt `name`; false if there was none.
    pub fn remove(&mut self, name: &str) -> bool {
        self.scopes.remove(name);
        let before = self.prompts.len();
        self.prompts.retain(|(d, _)| d.name != name);
        self.prompts.len() != before
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.prompts.is_empty()
    }

    /// True when prompt `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.prompts.iter().any(|(d, _)| d.name == name)
    }

    /// Renders prompt `name`.
    pub async fn get(
        &self,
        name: &str,
        arguments: Map<String, Value>,
        ctx: RequestContext,
    ) -> Result<GetPromptResult, PromptError> {
        let (definition, render) = self
            .prompts
            .iter()
            .find(|(d, _)| d.name == name)
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
