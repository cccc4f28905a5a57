//! The bearer-token gate every MCP request passes with `[auth]`: the token read from the
//! `Authorization` header and verified, the scopes a request needs, the 401s an address
//! may cause a minute, and the requests a principal may run at once. It says why it
//! refused ([`Refused`]); the transport turns that into the HTTP answer.

use std::net::IpAddr;
use std::sync::Arc;

use http::{HeaderMap, header};

use super::{
    AuthError, Busy, Failures, Owner, Principal, PrincipalRequests, RequestSlot, Verifier,
    token_hash,
};
use crate::config::AuthConfig;
use crate::telemetry::metrics::{AUTH_REFUSED, AuthRefusal, Refusal, SESSIONS_REFUSED};

/// Why the gate refused a request; each carries what its answer names.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    /// The client address had `auth.max_failures_per_client` 401s this minute.
    #[error("too many failed authentications from this address")]
    TooManyFailures {
        /// Seconds until the address's minute ends.
        retry_after: u64,
    },
    /// An access token in the query string.
    #[error("an access token in the query string")]
    TokenInQuery,
    /// No valid bearer token; `None`: there was none.
    #[error("no valid bearer token")]
    Unauthorized(Option<AuthError>),
    /// The token lacks a scope the request needs.
    #[error("the request needs scope {scope:?}")]
    InsufficientScope {
        /// The scopes needed, space-separated.
        scope: String,
    },
    /// `auth.max_requests_per_principal` requests of this principal are running.
    #[error("too many requests of this principal are running")]
    PrincipalBusy,
}

/// The verifier and what is counted around it; present only with `auth.enabled`.
#[derive(Debug)]
pub struct Gate {
    verifier: Arc<Verifier>,
    /// Requests running per principal (`auth.max_requests_per_principal`).
    requests: PrincipalRequests,
    /// 401s per client address (`auth.max_failures_per_client`).
    failures: Failures,
}

impl Gate {
    /// The gate for `verifier`.
    pub fn new(verifier: Arc<Verifier>) -> Self {
        let config = verifier.config();
        Self {
            requests: PrincipalRequests::new(config.max_requests_per_principal),
            failures: Failures::new(config.max_failures_per_client, config.failure_clients.get()),
            verifier,
        }
    }

    /// What `[auth]` says.
    pub fn config(&self) -> &AuthConfig {
        self.verifier.config()
    }

    /// The principal of a request from `client`: its bearer token, verified, with the
    /// scopes every request needs. An address with too many refusals this minute is
    /// refused before its token is looked at.
    pub(crate) async fn authenticate(
        &self,
        query: Option<&str>,
        headers: &HeaderMap,
        client: Option<IpAddr>,
    ) -> Result<Arc<Principal>, Refused> {
        if let Some(retry_after) = self.failures.blocked(client) {
            AUTH_REFUSED.inc(AuthRefusal::TooManyFailures);
            return Err(Refused::TooManyFailures { retry_after });
        }
        let refuse = |reason: AuthRefusal, error: Option<AuthError>| {
            AUTH_REFUSED.inc(reason);
            // Only a bad credential counts against the address: a request without any is
            // ordinary OAuth discovery (the 401 tells the client where to get a token),
            // and an authorization server that is away or busy is not the client's doing.
            if error.as_ref().is_some_and(|e| !e.is_server_side()) {
                self.failures.record(client);
            }
            Refused::Unauthorized(error)
        };
        if query.is_some_and(has_token_param) {
            AUTH_REFUSED.inc(AuthRefusal::TokenInQuery);
            return Err(Refused::TokenInQuery);
        }
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else {
            return Err(refuse(AuthRefusal::Missing, None));
        };
        let Some(token) = bearer(value.as_bytes()) else {
            let error =
                AuthError::Malformed("the Authorization header is not `Bearer <token>`".into());
            return Err(refuse(AuthRefusal::Malformed, Some(error)));
        };
        let principal = match self.verifier.verify(token).await {
            Ok(principal) => principal,
            Err(error) => {
                match error.detail() {
                    // What the client is not told (the authorization server's address,
                    // why the fetch failed) is logged here.
                    Some(detail) => {
                        tracing::warn!(token = %token_hash(token), reason = error.kind(), detail, "bearer token not checked");
                    }
                    None => {
                        tracing::info!(token = %token_hash(token), reason = error.kind(), "bearer token refused");
                    }
                }
                return Err(refuse(refusal_of(&error), Some(error)));
            }
        };
        let required = &self.verifier.config().required_scopes;
        if !principal.has_scopes(required) {
            AUTH_REFUSED.inc(AuthRefusal::InsufficientScope);
            return Err(Refused::InsufficientScope {
                scope: required.join(" "),
            });
        }
        tracing::debug!(subject = %principal.subject, token = %token_hash(token), "bearer token accepted");
        Ok(Arc::new(principal))
    }

    /// Refuses a request that needs `scopes` the principal was not granted.
    pub(crate) fn authorize(
        &self,
        principal: &Principal,
        scopes: &[String],
    ) -> Result<(), Refused> {
        if principal.has_scopes(scopes) {
            return Ok(());
        }
        AUTH_REFUSED.inc(AuthRefusal::InsufficientScope);
        Err(Refused::InsufficientScope {
            scope: scopes.join(" "),
        })
    }

    /// Counts a request of `owner` in until the returned guard drops; refused past
    /// `auth.max_requests_per_principal`.
    pub(crate) fn start_request(&self, owner: Owner) -> Result<Option<RequestSlot>, Refused> {
        self.requests.start(owner).map_err(|Busy| {
            SESSIONS_REFUSED.inc(Refusal::PrincipalBusy);
            Refused::PrincipalBusy
        })
    }
}

/// The token of `Bearer <token>` (the scheme is case-insensitive).
fn bearer(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    let (scheme, token) = text.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// True when a query string carries an `access_token` parameter (RFC 6750 §2.3, which
/// MCP forbids).
fn has_token_param(query: &str) -> bool {
    query
        .split('&')
        .any(|pair| pair.split('=').next() == Some("access_token"))
}

fn refusal_of(error: &AuthError) -> AuthRefusal {
    match error {
        AuthError::Missing => AuthRefusal::Missing,
        AuthError::Malformed(_) => AuthRefusal::Malformed,
        AuthError::Algorithm(_) => AuthRefusal::Algorithm,
        AuthError::UnknownKey => AuthRefusal::UnknownKey,
        AuthError::BadSignature => AuthRefusal::BadSignature,
        AuthError::Expired => AuthRefusal::Expired,
        AuthError::NotYetValid => AuthRefusal::NotYetValid,
        AuthError::WrongAudience => AuthRefusal::WrongAudience,
        AuthError::WrongIssuer => AuthRefusal::WrongIssuer,
        AuthError::MissingClaim(_) => AuthRefusal::MissingClaim,
        AuthError::Inactive => AuthRefusal::Inactive,
        AuthError::WrongTokenType => AuthRefusal::WrongTokenType,
        AuthError::Unavailable(_) => AuthRefusal::Unavailable,
        AuthError::Busy => AuthRefusal::Busy,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bearer_tokens_are_read() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer"), None);
    }

    #[test]
    fn a_token_parameter_is_found_among_others() {
        assert!(has_token_param("a=1&access_token=x"));
        assert!(has_token_param("access_token"));
        assert!(!has_token_param("my_access_token=x"));
    }
}
