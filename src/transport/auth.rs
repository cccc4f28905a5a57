//! `[auth]` at the HTTP edge: the bearer token of every MCP request is checked before
//! the request is read further; the protected resource metadata (RFC 9728) is served
//! without one; and a principal past its running requests is refused.

use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

use super::rejection::{Challenge, Rejection};
use crate::auth::{
    AuthError, Busy, Failures, Owner, Principal, PrincipalRequests, RequestSlot, Verifier,
    token_hash,
};
use crate::config::AuthConfig;
use crate::telemetry::metrics::{AUTH_REFUSED, AuthRefusal, Refusal, SESSIONS_REFUSED};

/// The verifier and what the edge needs around it; present only with `auth.enabled`.
#[derive(Debug)]
pub struct Gate {
    verifier: Arc<Verifier>,
    challenge: Challenge,
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
            challenge: Challenge {
                resource_metadata: config.metadata_url().into(),
                scope: config.required_scopes.join(" ").into(),
            },
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
    ) -> Result<Arc<Principal>, Rejection> {
        if let Some(retry_after) = self.failures.blocked(client) {
            AUTH_REFUSED.inc(AuthRefusal::TooManyFailures);
            return Err(Rejection::TooManyFailures { retry_after });
        }
        let refuse = |reason: AuthRefusal, error: Option<AuthError>| {
            AUTH_REFUSED.inc(reason);
            // Only a bad credential counts against the address: a request without any is
            // ordinary OAuth discovery (the 401 tells the client where to get a token),
            // and an authorization server that is away or busy is not the client's doing.
            if error.as_ref().is_some_and(|e| !e.is_server_side()) {
                self.failures.record(client);
            }
            Rejection::Unauthorized {
                error,
                challenge: self.challenge.clone(),
            }
        };
        if query.is_some_and(has_token_param) {
            AUTH_REFUSED.inc(AuthRefusal::TokenInQuery);
            return Err(Rejection::TokenInQuery);
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
            return Err(Rejection::InsufficientScope {
                scope: required.join(" "),
                challenge: self.challenge.clone(),
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
    ) -> Result<(), Rejection> {
        if principal.has_scopes(scopes) {
            return Ok(());
        }
        AUTH_REFUSED.inc(AuthRefusal::InsufficientScope);
        Err(Rejection::InsufficientScope {
            scope: scopes.join(" "),
            challenge: self.challenge.clone(),
        })
    }

    /// Counts a request of `owner` in until the returned guard drops; refused past
    /// `auth.max_requests_per_principal`.
    pub(crate) fn start_request(&self, owner: Owner) -> Result<Option<RequestSlot>, Rejection> {
        self.requests.start(owner).map_err(|Busy| {
            SESSIONS_REFUSED.inc(Refusal::PrincipalBusy);
            Rejection::PrincipalBusy
        })
    }
}

/// `response` with `slot` held until its body ends or is dropped: a streamed answer
/// counts as running for as long as its stream is open.
pub(crate) fn hold_until_sent(response: Response, slot: Option<RequestSlot>) -> Response {
    let Some(slot) = slot else {
        return response;
    };
    response.map(|body| Body::new(Held { body, _slot: slot }))
}

/// A body that keeps a request slot until it is done.
struct Held {
    body: Body,
    _slot: RequestSlot,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
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

/// The protected resource metadata (RFC 9728): this resource, its authorization server,
/// its scopes, and that tokens go in the header.
pub(crate) fn metadata(config: &AuthConfig) -> Response {
    let mut body = json!({
        "resource": config.audience,
        "authorization_servers": [config.issuer],
        "bearer_methods_supported": ["header"],
    });
    if !config.scopes_supported.is_empty() {
        body["scopes_supported"] = json!(config.scopes_supported);
    }
    let mut response = body.to_string().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    // Clients fetch it before they have a token, often from a browser.
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        axum::http::HeaderValue::from_static("*"),
    );
    response
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
