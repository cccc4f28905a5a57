//! axum's tools for the MCP endpoint, shared by GET, POST and DELETE: extractors that
//! refuse with [`Rejection`] (the caller, the session id, the protocol version), POST's
//! reader of the JSON-RPC message, the one wrapper that turns a refusal into the response on the
//! request's span, and the JSON and SSE response builders.
//!
//! The verbs call the extractors in their handler's body rather than naming them as
//! arguments: the checks run in a fixed order that the tests pin (the bearer token before
//! the body is read, GET's `Accept` before its session id), and a refusal is recorded on
//! the span of the request, which must exist before the first check runs.

use std::future::Future;

use axum::body::{Body, Bytes};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::AppState;
use super::extract;
use super::rejection::Rejection;
use super::session_request::Caller;
use crate::net::ClientAddr;
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{self, ErrorObject, Incoming};
use crate::session::SessionId;

/// Runs a verb's work inside its span; a refusal becomes the response there, recorded on
/// the span (the one place the span → work → `reject` → instrument shape is written).
/// Not an `async fn`: that would hold `work` three times over (its argument, the block,
/// the instrumented block), and the handler's future, which axum boxes by copying, with it.
pub(super) fn answer_in(
    span: tracing::Span,
    work: impl Future<Output = Result<Response, Rejection>>,
) -> impl Future<Output = Response> {
    async move { work.await.unwrap_or_else(super::reject) }.instrument(span)
}

/// The caller: the origin and host checks, then the bearer token (`[auth]`), with the
/// client's address.
impl FromRequestParts<AppState> for Caller {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Rejection> {
        state.inner.guard.check(&parts.headers)?;
        let client = parts
            .extensions
            .get::<ClientAddr>()
            .map(|ClientAddr(addr)| *addr);
        let principal = state
            .authenticate(parts.uri.query(), &parts.headers, client)
            .await?;
        // Worked out once: a hash of issuer and subject.
        let owner = principal.as_ref().map(|p| p.owner());
        Ok(Self {
            client,
            principal,
            owner,
        })
    }
}

/// `Mcp-Session-Id`, required: 400 without it, 404 for a value that is none of our ids.
/// Recorded on the current span.
#[derive(Debug, Clone, Copy)]
pub(super) struct Session(pub(super) SessionId);

impl Session {
    /// The session `headers` name.
    pub(super) fn read(headers: &HeaderMap) -> Result<Self, Rejection> {
        let id = extract::required_session_id(headers)?;
        tracing::Span::current().record("mcp.session.id", tracing::field::display(id));
        Ok(Self(id))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Session {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Rejection> {
        Self::read(&parts.headers)
    }
}

/// `MCP-Protocol-Version`, if sent: 400 when it names a revision we do not speak.
#[derive(Debug, Clone, Copy)]
// GET and DELETE only check it: their session knows its revision.
#[allow(dead_code)]
pub(super) struct Version(pub(super) Option<ProtocolVersion>);

impl<S: Send + Sync> FromRequestParts<S> for Version {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Rejection> {
        extract::protocol_version(&parts.headers).map(Self)
    }
}

/// The JSON-RPC message of a POST: its `Content-Type` and `Accept`, its body within
/// `server.max_body_bytes` and `server.body_timeout`, parsed, its `progressToken` within
/// `server.max_progress_token_bytes`.
#[derive(Debug)]
pub(super) struct Message(pub(super) Incoming);

impl Message {
    /// Reads the message of a request whose headers are `headers`.
    pub(super) async fn read(
        headers: &HeaderMap,
        body: Body,
        state: &AppState,
    ) -> Result<Self, Rejection> {
        if !extract::is_json_content(headers) {
            return Err(Rejection::UnsupportedMediaType);
        }
        let accepts = extract::accepts(headers);
        if !(accepts.json && accepts.sse) {
            return Err(Rejection::NotAcceptable(
                "POST requires Accept listing both application/json and text/event-stream",
            ));
        }
        let server = &state.inner.config.server;
        let body = tokio::time::timeout(
            server.body_timeout.get(),
            read_body(headers, body, server.max_body_bytes),
        )
        .await
        .map_err(|_| Rejection::BodyTimeout)??;
        let message = protocol::parse(&body).map_err(Rejection::JsonRpc)?;
        check_progress_token(&message, server.max_progress_token_bytes)?;
        Ok(Self(message))
    }
}

/// The body, refused past `limit` bytes: at once when `Content-Length` says so, otherwise
/// as soon as that many have arrived.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, Rejection> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Rejection::PayloadTooLarge(limit));
    }
    axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| Rejection::PayloadTooLarge(limit))
}

/// Refuses a request whose `progressToken` is longer than `max` bytes: the token is copied
/// into every progress notification, so a long one multiplies into memory held for the
/// stream (a 1 MB token once took 270 MB).
fn check_progress_token(message: &Incoming, max: usize) -> Result<(), Rejection> {
    let Incoming::Request(request) = message else {
        return Ok(());
    };
    let token = request.progress_token().and_then(|t| t.as_str());
    match token {
        Some(token) if token.len() > max => Err(Rejection::JsonRpc(protocol::ParseFailure {
            id: Some(request.id.clone()),
            error: ErrorObject::invalid_params(format!(
                "progressToken is {} bytes; at most {max} are accepted (server.max_progress_token_bytes)",
                token.len()
            )),
        })),
        _ => Ok(()),
    }
}

/// A JSON body with `status`.
pub(super) fn json_response(body: Bytes, status: StatusCode) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `response` naming its session in `Mcp-Session-Id`.
pub(super) fn with_session(mut response: Response, session: SessionId) -> Response {
    if let Ok(value) = HeaderValue::from_str(&session.to_string()) {
        response
            .headers_mut()
            .insert(extract::SESSION_ID.clone(), value);
    }
    response
}

/// The SSE response around a stream body.
pub(super) fn sse_response(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tell nginx-style proxies not to buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(pairs: &[(&'static str, &'static str)]) -> Parts {
        let mut request = axum::http::Request::new(());
        *request.headers_mut() = extract::header_map(pairs);
        request.into_parts().0
    }

    #[tokio::test]
    async fn the_session_header_is_required_and_must_be_one_of_ours() {
        let missing = Session::from_request_parts(&mut parts(&[]), &()).await;
        assert_eq!(missing.err(), Some(Rejection::MissingSession));
        let foreign =
            Session::from_request_parts(&mut parts(&[("mcp-session-id", "nope")]), &()).await;
        assert_eq!(foreign.err(), Some(Rejection::UnknownSession));
    }

    #[tokio::test]
    async fn the_version_header_is_optional_but_must_be_known() {
        let absent = Version::from_request_parts(&mut parts(&[]), &()).await;
        assert!(matches!(absent, Ok(Version(None))));
        let known =
            Version::from_request_parts(&mut parts(&[("mcp-protocol-version", "2025-06-18")]), &())
                .await;
        assert!(matches!(
            known,
            Ok(Version(Some(ProtocolVersion::V2025_06_18)))
        ));
        let unknown =
            Version::from_request_parts(&mut parts(&[("mcp-protocol-version", "1999-01-01")]), &())
                .await;
        assert!(matches!(unknown, Err(Rejection::UnsupportedVersion(_))));
    }

    #[tokio::test]
    async fn a_body_past_its_declared_limit_is_refused_unread() {
        let headers = extract::header_map(&[("content-length", "100")]);
        let refused = read_body(&headers, Body::from("x".repeat(100)), 10).await;
        assert_eq!(refused, Err(Rejection::PayloadTooLarge(10)));
        let read = read_body(&HeaderMap::new(), Body::from("{}"), 10).await;
        assert_eq!(read, Ok(Bytes::from_static(b"{}")));
    }
}
