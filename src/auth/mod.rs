//! Who is calling: bearer tokens checked as an OAuth 2.1 resource server would (MCP's
//! authorization section), and the [`Principal`] a valid token names.
//!
//! This layer knows tokens, keys and claims, not HTTP: the transport takes the token from
//! the `Authorization` header, asks the [`Verifier`], and answers 401 or 403 itself. What
//! a principal owns (sessions, tasks, their events) is bound to its [`Owner`], a hash of
//! issuer and subject (and the OAuth client, with `auth.bind_to_client`), which is what
//! the stores keep.

mod fetch;
mod introspect;
mod keys;
pub mod verifier;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub use verifier::Verifier;

/// The caller a valid token names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Principal {
    /// The token's issuer (`iss`).
    pub issuer: String,
    /// The token's subject (`sub`): the user or client it was issued to.
    pub subject: String,
    /// The scopes granted (`scope`, space-separated, or `scp`).
    pub scopes: Vec<String>,
    /// The OAuth client the token was issued through (`client_id` or `azp`), if named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// Every claim of the token (or of the introspection answer), for a handler's own
    /// decisions.
    #[serde(default)]
    pub claims: Map<String, Value>,
    /// `auth.bind_to_client`: its `Owner` covers `client_id` too. Kept with the
    /// principal (a task record holds one) so its owner is the same wherever it is
    /// worked out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bound_to_client: bool,
}

impl Principal {
    /// A principal from verified claims: `sub` and `iss` must be strings.
    pub(crate) fn from_claims(claims: Map<String, Value>) -> Result<Self, AuthError> {
        let text = |name: &'static str| {
            claims
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(AuthError::MissingClaim(name))
        };
        let issuer = text("iss")?;
        let subject = text("sub")?;
        let client_id = claims
            .get("client_id")
            .or_else(|| claims.get("azp"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let scopes = scopes_of(&claims);
        Ok(Self {
            issuer,
            subject,
            scopes,
            client_id,
            claims,
            bound_to_client: false,
        })
    }

    /// What this principal's sessions, tasks and events are bound to.
    pub fn owner(&self) -> Owner {
        if self.bound_to_client {
            Owner::of_client(&self.issuer, &self.subject, self.client_id.as_deref())
        } else {
            Owner::of(&self.issuer, &self.subject)
        }
    }

    /// True when every scope in `needed` was granted.
    pub fn has_scopes(&self, needed: &[String]) -> bool {
        needed.iter().all(|s| self.scopes.contains(s))
    }
}

/// `scope` (RFC 9068: one space-separated string) or `scp` (a list, or a string).
fn scopes_of(claims: &Map<String, Value>) -> Vec<String> {
    let words = |s: &str| s.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    match (claims.get("scope"), claims.get("scp")) {
        (Some(Value::String(s)), _) | (None, Some(Value::String(s))) => words(s),
        (None, Some(Value::Array(list))) => list
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// Who owns a session, a task and their events: the first 128 bits of SHA-256 over the
/// issuer and subject. Fixed-size, cheap to compare on every request, and what Redis
/// keeps instead of the subject itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner([u8; 16]);

impl Owner {
    /// The owner for `issuer` and `subject`.
    pub fn of(issuer: &str, subject: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(issuer.as_bytes());
        // A separator no URL holds, so ("a", "bc") and ("ab", "c") differ.
        hash.update([0]);
        hash.update(subject.as_bytes());
        Self::truncated(hash)
    }

    /// The owner for `issuer`, `subject` and the OAuth client (`auth.bind_to_client`).
    /// Never equal to [`Owner::of`] for the same pair: a token without a client id is
    /// still its own owner when binding is on.
    pub fn of_client(issuer: &str, subject: &str, client_id: Option<&str>) -> Self {
        let mut hash = Sha256::new();
        hash.update(issuer.as_bytes());
        hash.update([0]);
        hash.update(subject.as_bytes());
        hash.update([1]);
        hash.update(client_id.unwrap_or_default().as_bytes());
        Self::truncated(hash)
    }

    fn truncated(hash: Sha256) -> Self {
        let digest = hash.finalize();
        let mut out = [0; 16];
        out.copy_from_slice(&digest[..16]);
        Self(out)
    }

    /// Parses what [`Owner`]'s `Display` wrote (32 hex digits).
    pub fn parse(text: &str) -> Option<Self> {
        if text.len() != 32 {
            return None;
        }
        let mut out = [0; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
        }
        Some(Self(out))
    }
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// A short hash of a token, the only thing about it that is ever logged.
pub fn token_hash(token: &str) -> String {
    let digest = Sha256::digest(token.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// Why a token was not accepted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AuthError {
    /// No `Authorization: Bearer` header.
    #[error("a bearer token is required")]
    Missing,
    /// Not a JWT this server can read (and no introspection for opaque tokens).
    #[error("the token is malformed: {0}")]
    Malformed(String),
    /// Signed with an algorithm not in `auth.algorithms`.
    #[error("the token's algorithm {0} is not accepted")]
    Algorithm(String),
    /// No key of the issuer matches the token's `kid` and algorithm.
    #[error("no key of the issuer matches the token")]
    UnknownKey,
    /// The signature does not verify.
    #[error("the token's signature is invalid")]
    BadSignature,
    /// Past `exp` (and the leeway).
    #[error("the token has expired")]
    Expired,
    /// Before `nbf` (less the leeway).
    #[error("the token is not valid yet")]
    NotYetValid,
    /// `aud` does not name this server.
    #[error("the token was issued for another resource")]
    WrongAudience,
    /// `iss` is not the configured issuer.
    #[error("the token was issued by another authorization server")]
    WrongIssuer,
    /// A claim the server needs is absent.
    #[error("the token has no `{0}` claim")]
    MissingClaim(&'static str),
    /// Introspection says the token is not active.
    #[error("the token is not active")]
    Inactive,
    /// Introspection names a `token_type` other than an access token's (a refresh
    /// token, say).
    #[error("the token is not an access token")]
    WrongTokenType,
    /// The authorization server could not be reached to check it. The detail (its URL,
    /// the fetch error) is for the log: the client is told only that it is unavailable.
    #[error("the authorization server is unavailable")]
    Unavailable(String),
    /// `auth.introspection_concurrency` introspections are in flight already.
    #[error("too many tokens are being checked; retry shortly")]
    Busy,
}

impl AuthError {
    /// A word for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed(_) => "malformed",
            Self::Algorithm(_) => "algorithm",
            Self::UnknownKey => "unknown_key",
            Self::BadSignature => "bad_signature",
            Self::Expired => "expired",
            Self::NotYetValid => "not_yet_valid",
            Self::WrongAudience => "wrong_audience",
            Self::WrongIssuer => "wrong_issuer",
            Self::MissingClaim(_) => "missing_claim",
            Self::Inactive => "inactive",
            Self::WrongTokenType => "wrong_token_type",
            Self::Unavailable(_) => "unavailable",
            Self::Busy => "busy",
        }
    }

    /// True when the server, not the token, is why it was not accepted: the answer is
    /// 503, with no challenge.
    pub fn is_server_side(&self) -> bool {
        matches!(self, Self::Unavailable(_) | Self::Busy)
    }

    /// What the log says beyond the client's message (`Unavailable`'s detail).
    pub fn detail(&self) -> Option<&str> {
        match self {
            Self::Unavailable(detail) => Some(detail),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claims(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    #[test]
    fn scopes_come_from_scope_or_scp() {
        let p = |v| Principal::from_claims(claims(v)).map(|p| p.scopes);
        assert_eq!(
            p(json!({"iss": "i", "sub": "s", "scope": "a  b"})),
            Ok(vec!["a".to_owned(), "b".to_owned()])
        );
        assert_eq!(
            p(json!({"iss": "i", "sub": "s", "scp": ["x"]})),
            Ok(vec!["x".to_owned()])
        );
        assert_eq!(p(json!({"iss": "i", "sub": "s"})), Ok(vec![]));
        assert_eq!(p(json!({"iss": "i"})), Err(AuthError::MissingClaim("sub")));
    }

    #[test]
    fn owners_differ_by_issuer_and_subject_and_round_trip() {
        let a = Owner::of("https://a", "alice");
        assert_ne!(a, Owner::of("https://b", "alice"));
        assert_ne!(Owner::of("ab", "c"), Owner::of("a", "bc"));
        assert_eq!(Owner::parse(&a.to_string()), Some(a));
        assert_eq!(Owner::parse("zz"), None);
        let bound = |c| Owner::of_client("https://a", "alice", c);
        assert_ne!(bound(Some("app1")), bound(Some("app2")));
        assert_ne!(bound(None), a);
        assert_ne!(bound(Some("")), a);
    }
}
