//! Every HTTP-level refusal as a type that knows its status and body.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::AuthError;
use crate::net::guard::Forbidden;
use crate::protocol::{ErrorObject, Outgoing, ParseFailure};

/// What every `WWW-Authenticate` challenge of this server names: where its protected
/// resource metadata is, and the scopes every request needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Challenge {
    /// The protected resource metadata's URL (RFC 9728).
    pub resource_metadata: std::sync::Arc<str>,
    /// `auth.required_scopes`, space-separated; empty: none.
    pub scope: std::sync::Arc<str>,
}

impl Challenge {
    /// The header's value: `Bearer resource_metadata="…"`, then `scope` and the error.
    fn header(&self, error: Option<(&str, String)>, scope: Option<&str>) -> String {
        let mut out = format!("Bearer resource_metadata=\"{}\"", self.resource_metadata);
        let scope = scope.unwrap_or(&self.scope);
        if !scope.is_empty() {
            out.push_str(&format!(", scope=\"{}\"", quoted(scope)));
        }
        if let Some((code, description)) = error {
            out.push_str(&format!(
                ", error=\"{code}\", error_description=\"{}\"",
                quoted(&description)
            ));
        }
        out
    }
}

/// A quoted-string's content: no quote or backslash, printable ASCII only.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect()
}

/// A request refused before it reached a handler.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    /// 400: a request other than `initialize` without `Mcp-Session-Id`.
    #[error("Bad Request: Mcp-Session-Id header is required")]
    MissingSession,
    /// 404: unknown, expired or terminated session (the client must re-initialize).
    #[error("Not Found: session not found")]
    UnknownSession,
    /// 400: `MCP-Protocol-Version` names a revision we do not speak.
    #[error("Bad Request: {0}")]
    UnsupportedVersion(String),
    /// 406: `Accept` does not allow what we must send.
    #[error("Not Acceptable: {0}")]
    NotAcceptable(&'static str),
    /// 415: the body is not `application/json`.
    #[error("Unsupported Media Type: Content-Type must be application/json")]
    UnsupportedMediaType,
    /// 408: the body did not arrive within `server.body_timeout`.
    #[error("Request Timeout: the body did not arrive in time")]
    BodyTimeout,
    /// 413: the body exceeds `server.max_body_bytes`.
    #[error("Payload Too Large: the body exceeds {0} bytes")]
    PayloadTooLarge(usize),
    /// 403: `Origin` or `Host` not allowed; 400: a header the server decides by came
    /// more than once (the guard's checks).
    #[error(transparent)]
    Forbidden(#[from] Forbidden),
    /// 400: JSON-RPC parse error or invalid request.
    #[error("{}", .0.error.message)]
    JsonRpc(ParseFailure),
    /// 405: GET while SSE is disabled.
    #[error("Method Not Allowed: SSE streams are disabled on this server")]
    StreamsDisabled,
    /// 410: `Last-Event-ID` names a POST stream whose history is gone.
    #[error("Gone: the stream named by Last-Event-ID has expired or never existed")]
    StreamGone,
    /// 400: the id of a request still running in this session was used again.
    #[error("Bad Request: a running request of this session already uses this id")]
    DuplicateRequestId,
    /// 429: `server.max_open_per_session` reached.
    #[error("Too Many Requests: this session has too many requests and streams open")]
    TooBusy,
    /// 503 with `Retry-After`: `server.max_sessions` reached and every session busy.
    #[error("Service Unavailable: too many sessions, all of them busy; retry shortly")]
    TooManySessions,
    /// 429 with `Retry-After`: `server.max_sessions_per_client` reached and every session
    /// of this client address busy.
    #[error(
        "Too Many Requests: too many sessions from this address, all of them busy; retry shortly"
    )]
    TooManyClientSessions,
    /// 429 with `Retry-After`: `auth.max_sessions_per_principal` reached and every session
    /// of this principal busy.
    #[error(
        "Too Many Requests: too many sessions of this principal, all of them busy; retry shortly"
    )]
    TooManyPrincipalSessions,
    /// 429 with `Retry-After`: `auth.max_requests_per_principal` requests of this principal
    /// are running.
    #[error("Too Many Requests: too many requests of this principal are running; retry shortly")]
    PrincipalBusy,
    /// 401 with `WWW-Authenticate`: no valid bearer token (`[auth]`).
    #[error("Unauthorized: {}", .error.as_ref().map_or_else(|| AuthError::Missing.to_string(), ToString::to_string))]
    Unauthorized {
        /// Why the token was refused; `None`: there was none.
        error: Option<AuthError>,
        /// What the `WWW-Authenticate` challenge names.
        challenge: Challenge,
    },
    /// 403 with `WWW-Authenticate: Bearer error="insufficient_scope"`: the token lacks a
    /// scope the request needs.
    #[error("Forbidden: this request needs scope {scope:?}")]
    InsufficientScope {
        /// The scopes needed, space-separated.
        scope: String,
        /// What the `WWW-Authenticate` challenge names.
        challenge: Challenge,
    },
    /// 429 with `Retry-After`: this client address had `auth.max_failures_per_client`
    /// requests refused with 401 this minute; its next token is not even looked at.
    #[error("Too Many Requests: too many failed authentications from this address; retry later")]
    TooManyFailures {
        /// Seconds until the address's minute ends.
        retry_after: u64,
    },
    /// 400: an access token in the query string, where it would be logged on the way.
    #[error("Bad Request: access tokens are accepted only in the Authorization header")]
    TokenInQuery,
    /// 503: an actor of the runtime is down (restarting or shutting down).
    #[error("Service Unavailable: {0}")]
    Unavailable(String),
    /// 503 with `Retry-After`: the server drains before it stops; another replica, or this
    /// one restarted, takes the request.
    #[error("Service Unavailable: the server is shutting down; retry shortly")]
    Draining,
}

impl Rejection {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::MissingSession
            | Self::UnsupportedVersion(_)
            | Self::JsonRpc(_)
            | Self::Forbidden(Forbidden::DuplicateHeader(_))
            | Self::DuplicateRequestId => StatusCode::BAD_REQUEST,
            Self::UnknownSession => StatusCode::NOT_FOUND,
            Self::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::Forbidden(Forbidden::Origin(_) | Forbidden::Host(_))
            | Self::InsufficientScope { .. } => StatusCode::FORBIDDEN,
            Self::TokenInQuery => StatusCode::BAD_REQUEST,
            Self::Unauthorized {
                error: Some(error), ..
            } if error.is_server_side() => StatusCode::SERVICE_UNAVAILABLE,
            Self::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            Self::StreamsDisabled => StatusCode::METHOD_NOT_ALLOWED,
            Self::StreamGone => StatusCode::GONE,
            Self::TooBusy
            | Self::TooManyClientSessions
            | Self::TooManyPrincipalSessions
            | Self::PrincipalBusy
            | Self::TooManyFailures { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::TooManySessions | Self::Unavailable(_) | Self::Draining => {
                StatusCode::SERVICE_UNAVAILABLE
            }
        }
    }
}

impl IntoResponse for Rejection {
    /// A JSON-RPC error object with id null (the SDKs' convention for transport errors),
    /// so clients show the message.
    fn into_response(self) -> Response {
        let status = self.status();
        let retry_after = match &self {
            Self::TooManyFailures { retry_after } => Some(*retry_after),
            Self::Draining
            | Self::TooManySessions
            | Self::TooManyClientSessions
            | Self::TooManyPrincipalSessions
            | Self::PrincipalBusy => Some(1),
            Self::Unauthorized {
                error: Some(error), ..
            } if error.is_server_side() => Some(1),
            _ => None,
        };
        let challenge = match &self {
            // The authorization server being away, or busy, is not the token's fault: no
            // challenge.
            Self::Unauthorized {
                error: Some(error), ..
            } if error.is_server_side() => None,
            Self::Unauthorized { error, challenge } => Some(challenge.header(
                error.as_ref().map(|e| ("invalid_token", e.to_string())),
                None,
            )),
            Self::InsufficientScope { scope, challenge } => {
                Some(challenge.header(Some(("insufficient_scope", self.to_string())), Some(scope)))
            }
            _ => None,
        };
        let body = match self {
            Self::JsonRpc(failure) => Outgoing::Error {
                id: failure.id,
                error: failure.error,
            },
            other => Outgoing::Error {
                id: None,
                error: ErrorObject::new(-32000, other.to_string()),
            },
        };
        let mut response = (status, body.to_bytes()).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(seconds) = retry_after {
            // A load balancer moves traffic away, or a session frees up, within about a
            // second; an address refused for its failures waits for its minute to end.
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if let Some(value) = challenge.and_then(|c| HeaderValue::from_str(&c).ok()) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        if status == StatusCode::METHOD_NOT_ALLOWED {
            response
                .headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
        }
        response
    }
}
