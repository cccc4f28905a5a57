//! [`SkillPath`]: a path inside the skills root, as validated components, and its
//! `skill://` URI. The one place a URI or a file name becomes a path: no empty, `.` or
//! `..` component, no separator, nothing a URI would have to escape.

use std::fmt;

use crate::protocol::methods::SKILL_SCHEME;

/// Longest `skill://` URI looked up.
pub(super) const MAX_URI_LEN: usize = 2048;

/// A relative path under the skills root: one or more checked components.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct SkillPath(Vec<String>);

/// Why a URI or file name is no path under the root.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// Not a `skill://` URI.
    #[error("not a skill:// URI")]
    Scheme,
    /// Longer than the longest URI looked up.
    #[error("longer than {MAX_URI_LEN} bytes")]
    TooLong,
    /// An empty component: an absolute path (`skill:///…`), `//`, or a trailing `/`.
    #[error("an empty path segment")]
    Empty,
    /// `.` or `..`.
    #[error("a `.` or `..` segment")]
    Dots,
    /// A character outside the unreserved and sub-delimiter sets of RFC 3986.
    #[error("segment {0:?} has a character a skill path may not have")]
    Character(String),
}

impl SkillPath {
    /// The root itself (no component), to join below.
    pub(super) fn root() -> Self {
        Self(Vec::new())
    }

    /// The path a `skill://` URI names.
    pub(super) fn from_uri(uri: &str) -> Result<Self, PathError> {
        if uri.len() > MAX_URI_LEN {
            return Err(PathError::TooLong);
        }
        let rest = uri.strip_prefix(SKILL_SCHEME).ok_or(PathError::Scheme)?;
        let mut path = Self::root();
        for component in rest.split('/') {
            path = path.join(component)?;
        }
        Ok(path)
    }

    /// This path with `component` appended, once checked.
    pub(super) fn join(&self, component: &str) -> Result<Self, PathError> {
        check_component(component)?;
        let mut components = self.0.clone();
        components.push(component.to_owned());
        Ok(Self(components))
    }

    /// The `skill://` URI of this path.
    pub(super) fn uri(&self) -> String {
        format!("{SKILL_SCHEME}{}", self.0.join("/"))
    }

    /// The last component (`None` for the root).
    pub(super) fn last(&self) -> Option<&str> {
        self.0.last().map(String::as_str)
    }

    /// The path without its last component (`None` for the root).
    pub(super) fn parent(&self) -> Option<Self> {
        let (_, rest) = self.0.split_last()?;
        Some(Self(rest.to_vec()))
    }

    /// True when `self` is `ancestor` or lies below it.
    pub(super) fn starts_with(&self, ancestor: &Self) -> bool {
        self.0.starts_with(&ancestor.0)
    }

    /// The number of components.
    pub(super) fn depth(&self) -> usize {
        self.0.len()
    }
}

impl fmt::Display for SkillPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("/"))
    }
}

/// A component is non-empty, not `.` or `..`, and made of ASCII letters, digits and
/// `-._~!$&'()*+,;=`: valid as a URI authority (reg-name) and as a path segment, with
/// nothing to percent-encode, and never a separator on any platform.
fn check_component(component: &str) -> Result<(), PathError> {
    match component {
        "" => Err(PathError::Empty),
        "." | ".." => Err(PathError::Dots),
        _ if component
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)) =>
        {
            Ok(())
        }
        _ => Err(PathError::Character(component.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_map_to_checked_paths() {
        let path = SkillPath::from_uri("skill://acme/billing/refunds/SKILL.md");
        assert_eq!(
            path.as_ref().map(SkillPath::uri).ok().as_deref(),
            Some("skill://acme/billing/refunds/SKILL.md")
        );
        assert_eq!(
            path.ok().and_then(|p| p.parent()).map(|p| p.to_string()),
            Some("acme/billing/refunds".to_owned())
        );
    }

    #[test]
    fn dots_absolute_paths_and_odd_characters_are_refused() {
        for (uri, why) in [
            ("skill://a/../../etc/passwd", PathError::Dots),
            ("skill://../x", PathError::Dots),
            ("skill://a/./SKILL.md", PathError::Dots),
            ("skill:///etc/passwd", PathError::Empty),
            ("skill://a//b", PathError::Empty),
            ("skill://a/", PathError::Empty),
            ("skill://", PathError::Empty),
            ("file:///etc/passwd", PathError::Scheme),
            ("skill://a/%2e%2e/b", PathError::Character("%2e%2e".into())),
            ("skill://a\\..\\b", PathError::Character("a\\..\\b".into())),
            ("skill://a/b c", PathError::Character("b c".into())),
            ("skill://a/\0", PathError::Character("\0".into())),
        ] {
            assert_eq!(SkillPath::from_uri(uri), Err(why), "{uri}");
        }
        let long = format!("skill://{}", "a".repeat(MAX_URI_LEN));
        assert_eq!(SkillPath::from_uri(&long), Err(PathError::TooLong));
    }
}
