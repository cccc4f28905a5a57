//! `[auth]`: otpmcp as an OAuth 2.1 resource server (MCP's authorization section).

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, NonZeroDuration, human_duration, nz};
use super::error::{ConfigError, invalid};
use super::secret::Secret;

/// otpmcp as an OAuth 2.1 resource server (MCP's authorization section): every MCP request
/// carries `Authorization: Bearer <token>`, checked against the issuer's keys, or by
/// introspection for opaque tokens. Off by default; [security.md](security.md) has the
/// threat model and a walk-through with a real identity provider. A missing token or a bad
/// one gets 401, a missing scope 403, an authorization server that cannot be reached 503.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Require a valid bearer token on every POST, GET and DELETE of `sse.path`, and serve
    /// the protected resource metadata. Off: no token is read and
    /// `RequestContext::principal()` is `None`.
    pub enabled: bool,
    /// The authorization server, the exact `iss` of accepted tokens; required when enabled.
    /// With `jwks_url` empty its metadata is fetched from it, so it must then be `https://`
    /// (`http://` only to a loopback host).
    pub issuer: String,
    /// This server's canonical resource URI (RFC 8707), the exact `aud` a token must name,
    /// e.g. `https://mcp.example.com/mcp`; required when enabled. Its origin and path give
    /// the metadata's address.
    pub audience: String,
    /// Where the issuer's keys are: `https://`, or `http://` to a loopback host only.
    /// Empty: `jwks_uri` from the issuer's metadata (RFC 8414, then OpenID Connect
    /// discovery); while neither answers, requests get 503.
    pub jwks_url: String,
    /// Signature algorithms accepted, among RS256/384/512, PS256/384/512, ES256/384 and
    /// EdDSA. `none` and `HS*` exit 2: a resource server verifies with public keys only.
    pub algorithms: Vec<String>,
    /// Clock skew allowed on `exp` and `nbf`.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub leeway: Duration,
    /// Scopes every request needs, named in every 401's challenge; a token without them
    /// gets 403 `insufficient_scope`.
    pub required_scopes: Vec<String>,
    /// Scopes listed in the protected resource metadata, so clients know what to ask for.
    pub scopes_supported: Vec<String>,
    /// Keys are fetched again after this long, so a retired key stops working. While the
    /// issuer cannot be reached, the keys fetched last go on verifying until
    /// `jwks_max_stale`.
    pub jwks_max_age: NonZeroDuration,
    /// A token naming an unknown `kid` fetches the keys again (rotation), at most once per
    /// this interval, so forged `kid`s cannot hammer the issuer.
    pub jwks_min_refresh: NonZeroDuration,
    /// Timeout of each fetch from the authorization server (metadata, keys, introspection);
    /// answers are capped at 1 MiB.
    pub fetch_timeout: NonZeroDuration,
    /// RFC 7662 endpoint for opaque (non-JWT) tokens: `https://`, or `http://` to a
    /// loopback host only. An answer is accepted when `active`, its `iss` (if named) is
    /// `issuer`, its `aud` contains `audience`, it is within `nbf` and `exp`, and its
    /// `token_type` (if named) is an access token's. Empty: only JWTs are accepted.
    pub introspection_url: String,
    /// This server's client id at the introspection endpoint (HTTP Basic). Empty:
    /// introspection without credentials.
    pub introspection_client_id: String,
    /// Its secret. Prefer the environment: `OTPMCP__AUTH__INTROSPECTION_CLIENT_SECRET`.
    pub introspection_client_secret: Secret,
    /// An active answer is reused this long (never past the token's `exp`), keyed by the
    /// token's SHA-256: a revoked token keeps working at most this long.
    pub introspection_cache: NonZeroDuration,
    /// Most answers cached; while all are live, a new one is not cached.
    pub introspection_cache_entries: NonZeroUsize,
    /// An active answer must name `audience` in `aud`. Off: an answer without `aud` is
    /// accepted (one naming only other resources is still refused).
    pub introspection_require_aud: bool,
    /// Most introspections in flight at once on this replica; a token that would need one
    /// more gets 503 at once, so a flood of made-up tokens does not reach the authorization
    /// server.
    pub introspection_concurrency: NonZeroUsize,
    /// A refused token is refused again without asking for this long (a failed call, 503,
    /// is not remembered).
    pub introspection_negative_ttl: NonZeroDuration,
    /// Most refusals remembered; while all are live, a new one is not.
    pub introspection_negative_entries: NonZeroUsize,
    /// While fetches of the keys fail, the keys fetched last keep verifying until this long
    /// after that fetch; then every JWT gets 503 until a fetch succeeds. Must be at least
    /// `jwks_max_age`.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub jwks_max_stale: Duration,
    /// Requests one client address (behind a trusted proxy, the address it reports; IPv6 by
    /// /64) may have refused with 401 for a bad credential per minute; past it the address
    /// gets 429 before any token is looked at. A request without a token does not count. 0:
    /// no limit. Clients behind one NAT share the count.
    pub max_failures_per_client: u32,
    /// Most client addresses whose failures are counted at once; while all are within their
    /// minute, a new address is not counted and none is forgotten.
    pub failure_clients: NonZeroUsize,
    /// A principal's sessions, tasks and events are bound to issuer, subject and OAuth
    /// client (`client_id`, else `azp`), so one client app of a user cannot see another's;
    /// the per-principal caps then count per app. Changing it makes existing sessions and
    /// tasks unreachable.
    pub bind_to_client: bool,
    /// Live sessions one principal holds on this replica; past it `initialize` ends that
    /// principal's least recently used idle session, or gets 429 when all are busy. 0: no
    /// cap beyond `server.max_sessions`.
    pub max_sessions_per_principal: usize,
    /// Requests one principal has running at once on this replica, a streamed answer
    /// counting until its stream closes; past it, 429. 0: no cap.
    pub max_requests_per_principal: usize,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            issuer: String::new(),
            audience: String::new(),
            jwks_url: String::new(),
            algorithms: vec!["RS256".into(), "ES256".into()],
            leeway: Duration::from_secs(30),
            required_scopes: Vec::new(),
            scopes_supported: Vec::new(),
            jwks_max_age: NonZeroDuration::from_secs(600),
            jwks_min_refresh: NonZeroDuration::from_secs(30),
            fetch_timeout: NonZeroDuration::from_secs(5),
            introspection_url: String::new(),
            introspection_client_id: String::new(),
            introspection_client_secret: Secret::default(),
            introspection_cache: NonZeroDuration::from_secs(30),
            introspection_cache_entries: nz!(10_000),
            introspection_require_aud: true,
            introspection_concurrency: nz!(16),
            introspection_negative_ttl: NonZeroDuration::from_secs(30),
            introspection_negative_entries: nz!(10_000),
            jwks_max_stale: Duration::from_secs(3600),
            max_failures_per_client: 60,
            failure_clients: nz!(10_000),
            bind_to_client: false,
            max_sessions_per_principal: 0,
            max_requests_per_principal: 0,
        }
    }
}

/// Algorithms a resource server may accept: asymmetric ones, whose verifying key is
/// public. An HMAC key would be a secret shared with the issuer, and `none` no key at all.
pub const ASYMMETRIC_ALGORITHMS: [&str; 9] = [
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA",
];

impl AuthConfig {
    /// Checks what serde cannot; only when `enabled`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if !is_http_url(&self.issuer) {
            return invalid("auth.issuer", "must be an http(s) URL");
        }
        if !is_http_url(&self.audience) {
            return invalid(
                "auth.audience",
                "must be this server's resource URI, an http(s) URL",
            );
        }
        if !self.jwks_url.is_empty() && !is_http_url(&self.jwks_url) {
            return invalid("auth.jwks_url", "must be an http(s) URL");
        }
        if !self.introspection_url.is_empty() && !is_http_url(&self.introspection_url) {
            return invalid("auth.introspection_url", "must be an http(s) URL");
        }
        // Over plain http the introspection secret and every token checked go out in
        // clear, and whoever is on the path can swap the keys or answer `active`.
        for (key, url) in [
            ("auth.jwks_url", &self.jwks_url),
            ("auth.introspection_url", &self.introspection_url),
        ] {
            if plain_http_off_loopback(url) {
                return invalid(key, HTTPS_ONLY);
            }
        }
        // Without `jwks_url` the keys' address comes from the issuer's metadata, fetched
        // from the issuer's own URL.
        if self.jwks_url.is_empty() && plain_http_off_loopback(&self.issuer) {
            return invalid(
                "auth.issuer",
                format!(
                    "is where the keys are discovered (auth.jwks_url is empty), so it {HTTPS_ONLY}; \
                     or set auth.jwks_url to the keys' https URL"
                ),
            );
        }
        if self.algorithms.is_empty() {
            return invalid("auth.algorithms", "must name at least one algorithm");
        }
        if let Some(bad) = self
            .algorithms
            .iter()
            .find(|a| !ASYMMETRIC_ALGORITHMS.contains(&a.as_str()))
        {
            return invalid(
                "auth.algorithms",
                format!(
                    "`{bad}` is not accepted; choose among {}",
                    ASYMMETRIC_ALGORITHMS.join(", ")
                ),
            );
        }
        // Keys are only fetched again once older than jwks_max_age: a shorter staleness
        // limit would refuse them before anyone tried to refresh them.
        if self.jwks_max_stale < self.jwks_max_age.get() {
            return invalid(
                "auth.jwks_max_stale",
                format!(
                    "must be at least auth.jwks_max_age ({:?})",
                    self.jwks_max_age.get()
                ),
            );
        }
        Ok(())
    }

    /// The protected resource metadata's path (RFC 9728): the well-known prefix, then
    /// the resource's path, e.g. `/.well-known/oauth-protected-resource/mcp`.
    pub fn metadata_path(&self) -> String {
        let path = path_of(&self.audience).trim_end_matches('/');
        format!("{WELL_KNOWN_RESOURCE}{path}")
    }

    /// The protected resource metadata's URL, named in every 401.
    pub fn metadata_url(&self) -> String {
        format!("{}{}", origin_of(&self.audience), self.metadata_path())
    }
}

/// Why an identity provider's `http://` URL is refused.
const HTTPS_ONLY: &str =
    "must be https: plain http only to a loopback host (127.0.0.0/8, ::1, localhost)";

/// True for an `http://` URL whose host is not loopback: the identity provider's URLs may
/// not be one (a stand-in on loopback, as in the tests, may).
pub(crate) fn plain_http_off_loopback(url: &str) -> bool {
    let Some(rest) = url
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case("http://"))
        .and(url.get(7..))
    else {
        return false;
    };
    let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host_port.split(':').next().unwrap_or_default(),
    };
    !is_loopback_host(host)
}

/// `localhost`, or an address in 127.0.0.0/8 or `::1` (`[::1]` as a URL writes it, or
/// IPv4-mapped).
pub(crate) fn is_loopback_host(host: &str) -> bool {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.to_canonical().is_loopback())
}

/// Where protected resource metadata lives (RFC 9728).
pub const WELL_KNOWN_RESOURCE: &str = "/.well-known/oauth-protected-resource";

fn is_http_url(text: &str) -> bool {
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
}

/// `https://host:port/path?q` → `https://host:port`.
fn origin_of(url: &str) -> &str {
    let start = url.find("://").map_or(0, |i| i + 3);
    let end = url[start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| start + i);
    &url[..end]
}

/// `https://host/path?q` → `/path` (empty for none).
fn path_of(url: &str) -> &str {
    let rest = &url[origin_of(url).len()..];
    let end = rest.find(['?', '#']).unwrap_or(rest.len());
    &rest[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enabled() -> AuthConfig {
        AuthConfig {
            enabled: true,
            issuer: "https://as.example".into(),
            audience: "https://mcp.example:8443/mcp".into(),
            ..AuthConfig::default()
        }
    }

    #[test]
    fn metadata_lives_under_the_resource_path() {
        let config = enabled();
        assert_eq!(
            config.metadata_path(),
            "/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            config.metadata_url(),
            "https://mcp.example:8443/.well-known/oauth-protected-resource/mcp"
        );
        let root = AuthConfig {
            audience: "https://mcp.example/".into(),
            ..enabled()
        };
        assert_eq!(root.metadata_path(), WELL_KNOWN_RESOURCE);
    }

    #[test]
    fn symmetric_and_none_algorithms_are_refused() {
        assert!(enabled().validate().is_ok());
        for bad in ["none", "HS256"] {
            let config = AuthConfig {
                algorithms: vec!["RS256".into(), bad.into()],
                ..enabled()
            };
            let err = config.validate().err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(bad)),
                "{bad}: {err:?}"
            );
        }
        let no_issuer = AuthConfig {
            issuer: String::new(),
            ..enabled()
        };
        assert!(no_issuer.validate().is_err());
        assert!(AuthConfig::default().validate().is_ok(), "off: not checked");
    }

    /// Issue 36, finding 10: `http://` identity provider URLs to any host were accepted.
    #[test]
    fn the_identity_providers_urls_are_https_but_on_loopback() {
        let refused = |config: AuthConfig| config.validate().err().map(|e| e.to_string());
        for key in ["jwks_url", "introspection_url"] {
            let with = |url: &str| {
                let mut config = enabled();
                match key {
                    "jwks_url" => config.jwks_url = url.into(),
                    _ => config.introspection_url = url.into(),
                }
                config
            };
            for bad in [
                "http://as.example/keys",
                "http://127.0.0.1@as.example/keys",
                "http://10.0.0.5:8080/keys",
                "http://127.0.0.1.evil.example/keys",
                "http://localhost.evil.example/keys",
                "http://[::2]/keys",
                "http://user@as.example/keys",
            ] {
                let err = refused(with(bad));
                assert!(
                    err.as_deref()
                        .is_some_and(|e| e.contains(&format!("auth.{key}")) && e.contains("https")),
                    "{key} = {bad}: {err:?}"
                );
            }
            for good in [
                "https://as.example/keys",
                "http://127.0.0.1:8080/keys",
                "http://127.8.9.10/keys",
                "http://localhost:9000/keys",
                "http://LOCALHOST./keys",
                "http://[::1]:9000/keys",
                "http://[::ffff:127.0.0.1]/keys",
                "http://as:pw@127.0.0.1/keys",
            ] {
                assert_eq!(refused(with(good)), None, "{key} = {good}");
            }
        }
        // Without jwks_url, the issuer's own URL is fetched for its metadata.
        let issuer = |issuer: &str, jwks_url: &str| AuthConfig {
            issuer: issuer.into(),
            jwks_url: jwks_url.into(),
            ..enabled()
        };
        let err = refused(issuer("http://as.example", ""));
        assert!(
            err.as_deref().is_some_and(|e| e.contains("auth.issuer")),
            "{err:?}"
        );
        assert_eq!(
            refused(issuer("http://as.example", "https://as.example/keys")),
            None
        );
        assert_eq!(refused(issuer("http://127.0.0.1:1", "")), None);
    }

    #[test]
    fn the_hardening_limits_are_checked_at_start_up() {
        let named = |config: AuthConfig| config.validate().err().map(|e| e.to_string());
        let stale = named(AuthConfig {
            jwks_max_stale: Duration::from_secs(60),
            ..enabled()
        });
        assert!(
            stale
                .as_deref()
                .is_some_and(|e| e.contains("auth.jwks_max_stale")),
            "{stale:?}"
        );
        // The zero checks of the other limits are their types (NonZero*), tested at
        // load in mod.rs.
        let off = AuthConfig {
            max_failures_per_client: 0,
            ..enabled()
        };
        assert!(off.validate().is_ok(), "0 turns the per-address limit off");
    }
}
