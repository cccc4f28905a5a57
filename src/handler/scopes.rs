//! The OAuth scopes a tool, prompt or resource declares (`[auth]`): a caller without them
//! does not see it listed and is refused (403) when it calls it. Without `[auth]` there is
//! no caller to check, and everything is listed.

use std::collections::HashMap;
use std::sync::Arc;

use crate::auth::Principal;

/// Scopes by name (a tool's or prompt's name, a resource's URI or URI template).
#[derive(Debug, Clone, Default)]
pub(crate) struct ScopeMap(HashMap<String, Arc<[String]>>);

impl ScopeMap {
    /// Declares that `name` needs every scope in `scopes`.
    pub(crate) fn require<S: Into<String>>(
        &mut self,
        name: &str,
        scopes: impl IntoIterator<Item = S>,
    ) {
        let scopes: Arc<[String]> = scopes.into_iter().map(Into::into).collect();
        if scopes.is_empty() {
            self.0.remove(name);
        } else {
            self.0.insert(name.to_owned(), scopes);
        }
    }

    /// What `name` needs (none if it declared nothing).
    pub(crate) fn of(&self, name: &str) -> Arc<[String]> {
        self.0.get(name).cloned().unwrap_or_else(|| Arc::new([]))
    }

    /// True when `principal` may see and use `name`: no `[auth]`, or every scope granted.
    pub(crate) fn allows(&self, name: &str, principal: Option<&Principal>) -> bool {
        match (principal, self.0.get(name)) {
            (Some(principal), Some(needed)) => principal.has_scopes(needed),
            _ => true,
        }
    }

    /// Forgets what `name` needed.
    pub(crate) fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }
}
