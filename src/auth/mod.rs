//! Who is calling: bearer tokens checked as an OAuth 2.1 resource server would (MCP's
//! authorization section), and the [`Principal`] a valid token names.
//!
//! This layer knows tokens, keys and claims, not HTTP's answers: the [`Gate`] reads the
//! token from the `Authorization` header, asks the [`Verifier`], and says why it refused;
//! the transport answers 401, 403 or 429 itself. What
//! a principal owns (sessions, tasks, their events) is bound to its [`Owner`], a hash of
//! issuer and subject (and the OAuth client, with `auth.bind_to_client`), which is what
//! the stores keep.

mod failures;
mod fetch;
mod gate;
mod introspect;
mod keys;
mod limits;
pub mod verifier;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

pub(crate) use failures::Failures;
pub use gate::{Gate, Refused};
pub(crate) use limits::{Busy, PrincipalRequests, RequestSlot};
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

    /// The token's `exp`, in seconds since the epoch, if it names one.
    pub fn expires_at(&self) -> Option<u64> {
        self.claims.get("exp").and_then(numeric_date)
    }

    /// True when every scope in `needed` was granted.
    pub fn has_scopes(&self, needed: &[String]) -> bool {
        needed.iter().all(|s| self.scopes.contains(s))
    }
}

/// A principal as the store keeps it for a call that another replica may run again (a
/// handover, an in-flight entry): what its [`Owner`] is worked out from, its scopes, and
/// when its token expires. None of the token's other claims: Redis keeps such an entry for
/// up to a day, and a claim a handler read once (an e-mail, a name, group lists) has no
/// business there.
///
/// Written with [`Principal`]'s field names, so a replica of an older version reads it as
/// a principal without claims; and an entry that older replica wrote (the whole
/// principal, `claims` included) reads as one of these, the claims dropped but for `exp`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "HandedWire")]
pub struct HandedPrincipal {
    /// The token's issuer (`iss`).
    pub issuer: String,
    /// The token's subject (`sub`).
    pub subject: String,
    /// The scopes granted.
    pub scopes: Vec<String>,
    /// The OAuth client the token was issued through, if named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
    /// `auth.bind_to_client` when the token was checked: the owner covers `client_id`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bound_to_client: bool,
    /// When the token stops being valid, in seconds since the epoch (its `exp`); `None`
    /// when it named none. A call is not run again past it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// What [`HandedPrincipal`] reads: its own fields, or an older replica's whole
/// [`Principal`], of whose claims only `exp` is kept.
#[derive(Deserialize)]
struct HandedWire {
    issuer: String,
    subject: String,
    scopes: Vec<String>,
    #[serde(default)]
    client_id: Option<String>,
    #[serde(default)]
    bound_to_client: bool,
    #[serde(default)]
    expires_at: Option<u64>,
    /// Only in an entry an older replica wrote; every other claim is skipped unread.
    #[serde(default)]
    claims: Option<ExpiryClaim>,
}

#[derive(Deserialize)]
struct ExpiryClaim {
    #[serde(default)]
    exp: Option<Value>,
}

impl From<HandedWire> for HandedPrincipal {
    fn from(wire: HandedWire) -> Self {
        let old_exp = wire
            .claims
            .and_then(|c| c.exp)
            .as_ref()
            .and_then(numeric_date);
        Self {
            issuer: wire.issuer,
            subject: wire.subject,
            scopes: wire.scopes,
            client_id: wire.client_id,
            bound_to_client: wire.bound_to_client,
            expires_at: wire.expires_at.or(old_exp),
        }
    }
}

impl From<&Principal> for HandedPrincipal {
    fn from(principal: &Principal) -> Self {
        Self {
            issuer: principal.issuer.clone(),
            subject: principal.subject.clone(),
            scopes: principal.scopes.clone(),
            client_id: principal.client_id.clone(),
            bound_to_client: principal.bound_to_client,
            expires_at: principal.expires_at(),
        }
    }
}

impl HandedPrincipal {
    /// What the principal's sessions, tasks and events are bound to: the same as the
    /// [`Principal`]'s it was made from.
    pub fn owner(&self) -> Owner {
        if self.bound_to_client {
            Owner::of_client(&self.issuer, &self.subject, self.client_id.as_deref())
        } else {
            Owner::of(&self.issuer, &self.subject)
        }
    }

    /// True when the token was past its `exp` (and `leeway`, as the token check allows)
    /// at `now` (seconds since the epoch). One without `exp` never is.
    pub fn expired(&self, now: u64, leeway: u64) -> bool {
        self.expires_at
            .is_some_and(|exp| exp.saturating_add(leeway) < now)
    }

    /// The principal the call runs as again: the same owner and scopes; its claims are
    /// only those kept (`iss`, `sub`, `scope`, `client_id`, `exp`).
    pub fn into_principal(self) -> Principal {
        let mut claims = Map::new();
        claims.insert("iss".into(), Value::from(self.issuer.clone()));
        claims.insert("sub".into(), Value::from(self.subject.clone()));
        claims.insert("scope".into(), Value::from(self.scopes.join(" ")));
        if let Some(client) = &self.client_id {
            claims.insert("client_id".into(), Value::from(client.clone()));
        }
        if let Some(exp) = self.expires_at {
            claims.insert("exp".into(), Value::from(exp));
        }
        Principal {
            issuer: self.issuer,
            subject: self.subject,
            scopes: self.scopes,
            client_id: self.client_id,
            claims,
            bound_to_client: self.bound_to_client,
        }
    }
}

/// Seconds since the epoch, as token times are written.
pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A JWT NumericDate (RFC 7519: seconds, possibly with a fraction) as whole seconds.
fn numeric_date(value: &Value) -> Option<u64> {
    value.as_u64().or_else(|| {
        value
            .as_f64()
            .filter(|f| f.is_finite() && *f >= 0.0)
            // Truncated toward zero, as a whole second is all exp is compared at; the
            // filter above keeps the cast in range (it saturates above u64::MAX).
            .map(|f| f as u64)
    })
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

    fn principal(value: Value) -> Principal {
        Principal::from_claims(claims(value)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_handed_principal_keeps_its_owner_scopes_and_expiry_and_no_other_claim() {
        let full = Principal {
            bound_to_client: true,
            ..principal(json!({
                "iss": "https://a", "sub": "alice", "scope": "mcp admin", "azp": "app",
                "exp": 1_700_000_000, "email": "secret@x", "groups": ["staff"]
            }))
        };
        let handed = HandedPrincipal::from(&full);
        assert_eq!(handed.owner(), full.owner());
        assert_eq!(handed.expires_at, Some(1_700_000_000));
        let text = serde_json::to_string(&handed).unwrap_or_default();
        for dropped in ["secret@x", "email", "groups", "claims"] {
            assert!(!text.contains(dropped), "{dropped}: {text}");
        }
        // A replica of the version before reads ours as a principal without claims...
        let there: Principal = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((there.owner(), &there.scopes), (full.owner(), &full.scopes));
        // ...and we read the whole principal it wrote, keeping of its claims only `exp`.
        let old = serde_json::to_string(&full).unwrap_or_default();
        let here: HandedPrincipal = serde_json::from_str(&old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(here, handed);
        let again = handed.into_principal();
        assert_eq!(again.owner(), full.owner());
        assert!(again.has_scopes(&["mcp".into(), "admin".into()]));
        let mut kept: Vec<&str> = again.claims.keys().map(String::as_str).collect();
        kept.sort_unstable();
        assert_eq!(kept, ["client_id", "exp", "iss", "scope", "sub"]);
    }

    #[test]
    fn a_handed_principal_expires_past_exp_and_the_leeway() {
        let handed = |exp| HandedPrincipal {
            expires_at: exp,
            ..HandedPrincipal::from(&principal(json!({"iss": "i", "sub": "s"})))
        };
        assert!(!handed(Some(100)).expired(100, 0));
        assert!(handed(Some(100)).expired(101, 0));
        assert!(!handed(Some(100)).expired(130, 30));
        assert!(handed(Some(100)).expired(131, 30));
        assert!(
            !handed(None).expired(u64::MAX, 0),
            "no exp, nothing to check"
        );
        // NumericDate may carry a fraction.
        let p = principal(json!({"iss": "i", "sub": "s", "exp": 1_500_000_000.5}));
        assert_eq!(p.expires_at(), Some(1_500_000_000));
        let p = principal(json!({"iss": "i", "sub": "s", "exp": "soon"}));
        assert_eq!(p.expires_at(), None);
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
