//! What tools, prompts and resources share: entries by name, listed in registration
//! order, each with the scopes a caller needs to see and use it (`[auth]`).

use std::sync::Arc;

use indexmap::IndexMap;

use super::scopes::ScopeMap;
use crate::auth::Principal;

/// Entries by name (a tool's or prompt's name, a resource's URI or URI template), in the
/// order they were first registered, with the scopes each needs.
#[derive(Clone)]
pub(crate) struct Registry<T> {
    entries: IndexMap<String, T>,
    scopes: ScopeMap,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Self {
            entries: IndexMap::new(),
            scopes: ScopeMap::default(),
        }
    }
}

impl<T> std::fmt::Debug for Registry<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.entries.keys()).finish()
    }
}

impl<T> Registry<T> {
    /// Adds `entry` as `name`; one already called so is replaced where it stood (and keeps
    /// the scopes declared for it).
    pub(crate) fn insert(&mut self, name: String, entry: T) {
        self.entries.insert(name, entry);
    }

    /// Removes `name` and the scopes declared for it; false if there was no such entry.
    pub(crate) fn remove(&mut self, name: &str) -> bool {
        self.scopes.remove(name);
        self.entries.shift_remove(name).is_some()
    }

    /// The entry called `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&T> {
        self.entries.get(name)
    }

    /// True when `name` is registered.
    pub(crate) fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// True when nothing is registered.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many entries there are.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Every entry with its name, in registration order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.entries
            .iter()
            .map(|(name, entry)| (name.as_str(), entry))
    }

    /// Declares that `name` needs every scope in `scopes` (`[auth]`; none: it needs
    /// nothing). It may come before `name` is registered.
    pub(crate) fn require_scopes<S: Into<String>>(
        &mut self,
        name: &str,
        scopes: impl IntoIterator<Item = S>,
    ) {
        self.scopes.require(name, scopes);
    }

    /// The scopes `name` needs.
    pub(crate) fn scopes(&self, name: &str) -> Arc<[String]> {
        self.scopes.of(name)
    }

    /// The entries `principal` may see and use, in registration order (all of them
    /// without `[auth]`).
    pub(crate) fn list_for<'a>(
        &'a self,
        principal: Option<&'a Principal>,
    ) -> impl Iterator<Item = &'a T> {
        self.entries
            .iter()
            .filter(move |(name, _)| self.scopes.allows(name, principal))
            .map(|(_, entry)| entry)
    }
}

/// `require_scopes` and `scopes` of a public registry whose `.0` is a [`Registry`]: written
/// once for tools and prompts, `$what` naming an entry in the docs; `$extra` adds to
/// `require_scopes`'s doc (an example).
macro_rules! scope_methods {
    ($what:literal $(, $(#[$extra:meta])+)?) => {
        #[doc = concat!("Declares that ", $what, " `name` needs every scope in `scopes` \
            (`[auth]`): a caller without them does not see it listed and gets 403 when it \
            uses it.")]
        $($(#[$extra])+)?
        pub fn require_scopes<S: Into<String>>(
            &mut self,
            name: &str,
            scopes: impl IntoIterator<Item = S>,
        ) -> &mut Self {
            self.0.require_scopes(name, scopes);
            self
        }

        #[doc = concat!("The scopes ", $what, " `name` needs.")]
        pub fn scopes(&self, name: &str) -> std::sync::Arc<[String]> {
            self.0.scopes(name)
        }
    };
}
pub(crate) use scope_methods;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replacing_keeps_the_place_and_removing_closes_the_gap() {
        let mut registry = Registry::default();
        for (name, n) in [("a", 1), ("b", 2), ("c", 3), ("a", 4)] {
            registry.insert(name.to_owned(), n);
        }
        assert_eq!(
            registry.list_for(None).copied().collect::<Vec<_>>(),
            [4, 2, 3]
        );
        registry.require_scopes("b", ["x"]);
        assert!(registry.remove("b"));
        assert!(!registry.remove("b"));
        assert!(registry.scopes("b").is_empty());
        assert_eq!(
            registry.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            ["a", "c"]
        );
    }
}
