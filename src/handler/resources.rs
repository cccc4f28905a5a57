//! Resources: fixed URIs and URI templates, each read by an async function.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use super::registry::Registry;
use super::{BoxFuture, RequestContext};
use crate::auth::Principal;
use crate::protocol::methods::{ResourceContents, ResourceDefinition, ResourceTemplateDefinition};

/// Why a read failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// No resource has that URI (-32002).
    #[error("resource not found: {0}")]
    NotFound(String),
    /// The reader failed (-32603).
    #[error("{0}")]
    Failed(String),
}

type Reader = Arc<
    dyn Fn(
            String,
            HashMap<String, String>,
            RequestContext,
        ) -> BoxFuture<'static, Result<Vec<ResourceContents>, ResourceError>>
        + Send
        + Sync,
>;

/// The resources and templates a server offers, listed in registration order.
#[derive(Clone, Default)]
pub struct ResourceRegistry {
    /// Fixed resources by URI.
    fixed: Registry<(ResourceDefinition, Reader)>,
    /// Templates by their template; a URI is read through the first that matches.
    templates: Registry<(ResourceTemplateDefinition, UriTemplate, Reader)>,
}

impl std::fmt::Debug for ResourceRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResourceRegistry")
            .field("resources", &self.fixed.len())
            .field("templates", &self.templates.len())
            .finish()
    }
}

impl ResourceRegistry {
    /// Adds a resource with a fixed URI, read by `read(uri, ctx)`; it replaces any
    /// resource of the same URI where it stood.
    pub fn resource<F, Fut>(&mut self, definition: ResourceDefinition, read: F) -> &mut Self
    where
        F: Fn(String, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        let reader: Reader = Arc::new(move |uri, _, ctx| Box::pin(read(uri, ctx)));
        self.fixed
            .insert(definition.uri.clone(), (definition, reader));
        self
    }

    /// Adds a URI template (`{name}` variables, each matching one path segment), read by
    /// `read(uri, variables, ctx)`; it replaces any template written the same.
    pub fn template<F, Fut>(&mut self, definition: ResourceTemplateDefinition, read: F) -> &mut Self
    where
        F: Fn(String, HashMap<String, String>, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<ResourceContents>, ResourceError>> + Send + 'static,
    {
        let template = UriTemplate::parse(&definition.uri_template);
        let reader: Reader = Arc::new(move |uri, vars, ctx| Box::pin(read(uri, vars, ctx)));
        let key = definition.uri_template.clone();
        self.templates.insert(key, (definition, template, reader));
        self
    }

    /// Removes the resource with URI `uri`, or the template whose template is `uri`;
    /// false if there was none.
    pub fn remove(&mut self, uri: &str) -> bool {
        // Both, as `require_scopes` declared for both.
        let fixed = self.fixed.remove(uri);
        self.templates.remove(uri) || fixed
    }

    /// True when `uri` is one of the fixed resources or matches a template.
    pub fn contains(&self, uri: &str) -> bool {
        self.fixed.contains(uri) || self.template_for(uri).is_some()
    }

    /// True when nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.templates.is_empty()
    }

    /// Declares that reading `uri` (a fixed resource's URI, or a template as registered)
    /// needs every scope in `scopes` (`[auth]`), as
    /// [`super::tools::ToolRegistry::require_scopes`] does for a tool.
    pub fn require_scopes<S: Into<String>>(
        &mut self,
        uri: &str,
        scopes: impl IntoIterator<Item = S>,
    ) -> &mut Self {
        // Either may be registered later, so both hear it.
        let scopes: Vec<String> = scopes.into_iter().map(Into::into).collect();
        self.fixed.require_scopes(uri, scopes.iter().cloned());
        self.templates.require_scopes(uri, scopes);
        self
    }

    /// The scopes reading `uri` needs: its own, or those of the first template it matches
    /// when it is no fixed resource.
    pub fn scopes(&self, uri: &str) -> Arc<[String]> {
        if self.fixed.contains(uri) {
            return self.fixed.scopes(uri);
        }
        self.template_for(uri).map_or_else(
            || Arc::new([]) as Arc<[String]>,
            |(name, _, _)| self.templates.scopes(name),
        )
    }

    /// The fixed resources `principal` may read (all of them without `[auth]`).
    pub fn list_for(&self, principal: Option<&Principal>) -> Vec<ResourceDefinition> {
        self.fixed
            .list_for(principal)
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// The templates `principal` may read through.
    pub fn list_templates_for(
        &self,
        principal: Option<&Principal>,
    ) -> Vec<ResourceTemplateDefinition> {
        self.templates
            .list_for(principal)
            .map(|(d, _, _)| d.clone())
            .collect()
    }

    /// Reads `uri`: a fixed resource first, then the first template that matches.
    pub async fn read(
        &self,
        uri: &str,
        ctx: RequestContext,
    ) -> Result<Vec<ResourceContents>, ResourceError> {
        if let Some((_, reader)) = self.fixed.get(uri) {
            return reader(uri.to_owned(), HashMap::new(), ctx).await;
        }
        match self.template_for(uri) {
            Some((_, reader, vars)) => reader(uri.to_owned(), vars, ctx).await,
            None => Err(ResourceError::NotFound(uri.to_owned())),
        }
    }

    /// The first template `uri` matches: its key, its reader and the variables' values.
    fn template_for(&self, uri: &str) -> Option<(&str, &Reader, HashMap<String, String>)> {
        self.templates
            .iter()
            .find_map(|(name, (_, template, reader))| {
                template.matches(uri).map(|vars| (name, reader, vars))
            })
    }
}

/// A level-1 URI template: literals and `{name}` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
struct UriTemplate(Vec<Part>);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Variable(String),
}

impl UriTemplate {
    fn parse(template: &str) -> Self {
        let mut parts = Vec::new();
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let Some(close) = rest[open..].find('}').map(|c| open + c) else {
                break;
            };
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            parts.push(Part::Variable(rest[open + 1..close].to_owned()));
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        Self(parts)
    }

    /// The variables' values if `uri` matches; a variable takes a non-empty run of
    /// characters up to the next `/`, `?` or `#`.
    fn matches(&self, uri: &str) -> Option<HashMap<String, String>> {
        let mut vars = HashMap::new();
        let mut rest = uri;
        for part in &self.0 {
            match part {
                Part::Literal(lit) => rest = rest.strip_prefix(lit.as_str())?,
                Part::Variable(name) => {
                    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
                    if end == 0 {
                        return None;
                    }
                    vars.insert(name.clone(), rest[..end].to_owned());
                    rest = &rest[end..];
                }
            }
        }
        rest.is_empty().then_some(vars)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_one_segment_per_variable() {
        let t = UriTemplate::parse("test://template/{id}/data");
        let vars = t.matches("test://template/123/data");
        assert_eq!(
            vars.and_then(|v| v.get("id").cloned()).as_deref(),
            Some("123")
        );
        for miss in [
            "test://template//data",
            "test://template/1/2/data",
            "test://template/1/dat",
            "x",
        ] {
            assert_eq!(t.matches(miss), None, "{miss}");
        }
        let two = UriTemplate::parse("db://{table}/{row}");
        let vars = two.matches("db://users/42").unwrap_or_default();
        assert_eq!(
            (vars["table"].as_str(), vars["row"].as_str()),
            ("users", "42")
        );
    }
}
