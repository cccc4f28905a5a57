//! MCP protocol revisions we speak, and negotiation.

use std::fmt;
use std::str::FromStr;

/// A supported MCP revision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ProtocolVersion {
    /// 2025-03-26: first Streamable HTTP revision.
    V2025_03_26,
    /// 2025-06-18: `MCP-Protocol-Version` header, no batching.
    V2025_06_18,
    /// 2025-11-25: SSE polling (priming events, server-closed streams).
    V2025_11_25,
    /// 2026-07-28: stateless. No `initialize` and no session: every request carries its
    /// version and the client's capabilities in `params._meta`.
    V2026_07_28,
}

impl ProtocolVersion {
    /// The newest revision with sessions, offered at `initialize` when the client asks for
    /// one we do not know (or for a stateless one, which has no `initialize`).
    pub const LATEST: Self = Self::V2025_11_25;
    /// The newest revision.
    pub const NEWEST: Self = Self::V2026_07_28;
    /// Assumed when a request has no `MCP-Protocol-Version` header (the spec's rule for
    /// clients that predate the header).
    pub const DEFAULT_WITHOUT_HEADER: Self = Self::V2025_03_26;
    /// All supported revisions, oldest first.
    pub const ALL: [Self; 4] = [
        Self::V2025_03_26,
        Self::V2025_06_18,
        Self::V2025_11_25,
        Self::V2026_07_28,
    ];

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::V2025_03_26 => "2025-03-26",
            Self::V2025_06_18 => "2025-06-18",
            Self::V2025_11_25 => "2025-11-25",
            Self::V2026_07_28 => "2026-07-28",
        }
    }

    /// True for the stateless revisions (no `initialize`, no session).
    pub fn is_stateless(self) -> bool {
        self >= Self::V2026_07_28
    }

    /// Every supported revision, newest first, as `server/discover` and the
    /// unsupported-version error list them.
    pub fn supported() -> Vec<&'static str> {
        Self::ALL.iter().rev().map(|v| v.as_str()).collect()
    }

    /// Answer to the client's requested revision at `initialize`: the same if we support
    /// it with sessions, else our latest such (the client then decides whether to continue).
    pub fn negotiate(requested: &str) -> Self {
        requested
            .parse()
            .ok()
            .filter(|v: &Self| !v.is_stateless())
            .unwrap_or(Self::LATEST)
    }
}

impl fmt::Display for ProtocolVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The revision string is not one we support.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unsupported protocol version {0:?} (supported: 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26)"
)]
pub struct UnsupportedVersion(pub String);

impl FromStr for ProtocolVersion {
    type Err = UnsupportedVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| UnsupportedVersion(s.chars().take(40).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_echoes_known_versions_and_offers_latest_otherwise() {
        for v in ProtocolVersion::ALL
            .into_iter()
            .filter(|v| !v.is_stateless())
        {
            assert_eq!(ProtocolVersion::negotiate(v.as_str()), v);
        }
        assert_eq!(
            ProtocolVersion::negotiate("2026-07-28"),
            ProtocolVersion::LATEST
        );
        assert_eq!(
            ProtocolVersion::negotiate("2024-11-05"),
            ProtocolVersion::LATEST
        );
        assert_eq!(
            ProtocolVersion::negotiate("nonsense"),
            ProtocolVersion::LATEST
        );
        assert!("2099-01-01".parse::<ProtocolVersion>().is_err());
    }
}
