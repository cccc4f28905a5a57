//! POST of a stateless (2026-07-28) request: no session, no stored stream, no resumption.
//! Every request carries its revision and the client's capabilities in `params._meta` and
//! is checked against its routing headers; its answer is JSON, or an SSE stream when the
//! handler sends notes (progress, logs) before it answers. Closing that stream cancels the
//! request. A method whose reply streams gets the server's [`Streaming`] as SSE, for as
//! long as the server says.
//!
//! Which era a POST belongs to is decided by [`is_stateless`]: a 2025-11-25 session's
//! requests keep everything they had, on the same endpoint.

mod body;
pub mod headers;

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;

use super::AppState;
use super::endpoint::json_response;
use super::extract::{PROTOCOL_VERSION, SESSION_ID};
use crate::auth::Principal;
use crate::handler::{BoxFuture, RequestContext};
use crate::protocol::meta::{self, RequestMeta};
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, Outgoing};
use crate::server::{Call, Exchange, PipeOutbox, Refused, Streaming};
use crate::telemetry::operation::{Operation, Outcome};
use body::Streamed;

/// True when a POST is a stateless request: its `MCP-Protocol-Version` names the
/// stateless revision (or one we do not know, which only that revision's error answers),
/// or it has no such header and no session but names its revision in `params._meta`.
pub(super) fn is_stateless(headers: &HeaderMap, exchange: &Exchange) -> bool {
    match headers.get(&PROTOCOL_VERSION).map(|v| v.to_str()) {
        Some(Ok(text)) => text
            .trim()
            .parse::<ProtocolVersion>()
            .map_or(true, ProtocolVersion::is_stateless),
        Some(Err(_)) => true,
        None => {
            !headers.contains_key(&SESSION_ID)
                && matches!(exchange, Exchange::Call(c) if meta::names_version(c.request()))
        }
    }
}

/// Serves one stateless message; `op` is taken by whatever answers it.
pub(super) async fn serve(
    state: &AppState,
    headers: &HeaderMap,
    exchange: Exchange,
    principal: Option<Arc<Principal>>,
    client: Option<std::net::IpAddr>,
    op: &mut Option<Operation>,
) -> Response {
    let call = match exchange {
        Exchange::Call(call) => call,
        // Nothing to answer: the stateless revision's only client notification is a
        // cancellation, which over HTTP is closing the response stream.
        Exchange::Told(_) => return StatusCode::ACCEPTED.into_response(),
        Exchange::Answer { id, .. } => {
            let error = ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Invalid request: a stateless server sends no requests, so there is nothing to answer",
            );
            return error_response(Some(id), error, StatusCode::BAD_REQUEST);
        }
    };
    let meta = match check(headers, &call) {
        Ok(meta) => meta,
        Err((error, status)) => {
            let answer = Outgoing::Error {
                id: Some(call.id().clone()),
                error,
            };
            if let Some(op) = op.take() {
                op.answered(&answer);
            }
            return json_response(answer.to_bytes(), status);
        }
    };
    if call.streams() {
        return stream(state, call, &meta, principal.as_deref(), op.take()).await;
    }
    answer(state, call, meta, principal, client, op.take()).await
}

/// Opens a reply that streams (`subscriptions/listen`, `tasks/stream`). Its operation
/// ends when the stream starts or is refused.
async fn stream(
    state: &AppState,
    call: Call,
    meta: &RequestMeta,
    principal: Option<&Principal>,
    op: Option<Operation>,
) -> Response {
    let inner = &state.inner;
    // Boxed: a stream's opening is a large future, kept out of every request's.
    let opened =
        Box::pin(call.open_stream(meta, principal, body::frame, inner.shutdown.clone())).await;
    let (response, outcome) = match opened {
        Ok(streaming) => (streamed(state, streaming), Outcome::Ok),
        Err(Refused::Request(answer)) => {
            let status = status_of(&answer);
            (json_response(answer.to_bytes(), status), refusal(status))
        }
        Err(Refused::Busy(answer)) => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            (json_response(answer.to_bytes(), status), refusal(status))
        }
    };
    if let Some(op) = op {
        op.finish(outcome);
    }
    response
}

fn refusal(status: StatusCode) -> Outcome<'static> {
    Outcome::Rejected {
        status: status.as_u16(),
        message: "the stream was refused",
    }
}

/// `streaming` as an SSE response.
fn streamed(state: &AppState, streaming: Streaming) -> Response {
    let sse = &state.inner.config.sse;
    let body = Streamed::new(streaming, sse.keepalive_interval.get(), sse.retry_timeout);
    super::sse_response(Body::new(body))
}

/// The checks before a handler sees the request, in the order the spec's errors need:
/// `_meta` (-32602), the version header against `_meta` (-32020), the version (-32022),
/// then the routing headers (-32020).
fn check(headers: &HeaderMap, call: &Call) -> Result<RequestMeta, (ErrorObject, StatusCode)> {
    let request = call.request();
    let bad = |error| (error, StatusCode::BAD_REQUEST);
    let meta = RequestMeta::read(request).map_err(bad)?;
    let header = headers
        .get(&PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .map(str::trim);
    match header {
        None => {
            return Err(bad(ErrorObject::header_mismatch(
                "the MCP-Protocol-Version header is required",
            )));
        }
        Some(version) if version != meta.protocol_version => {
            return Err(bad(ErrorObject::header_mismatch(format!(
                "MCP-Protocol-Version {version:?} does not match params._meta {:?}",
                meta.protocol_version
            ))));
        }
        Some(_) => {}
    }
    meta.check_revision().map_err(bad)?;
    headers::check_standard(headers, request).map_err(bad)?;
    if let Some(mirrored) = call.header_params() {
        headers::check_params(headers, mirrored, request.arguments()).map_err(bad)?;
    }
    Ok(meta)
}

/// How long a silent handler may take and still be answered with a JSON body: past it, or
/// at its first note, the answer streams (with keep-alive comments while it works).
const JSON_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs the handler. Answered within [`JSON_GRACE`] and silent: a JSON body. Otherwise an
/// SSE stream that carries its notes as they come and ends with the answer; the handler
/// runs inside that stream's body, so a client that closes it cancels the request.
async fn answer(
    state: &AppState,
    call: Call,
    meta: RequestMeta,
    principal: Option<Arc<Principal>>,
    client: Option<std::net::IpAddr>,
    op: Option<Operation>,
) -> Response {
    let inner = &state.inner;
    let id = call.id().clone();
    let (tx, notes) = mpsc::channel(inner.config.sse.stream_buffer.get());
    let outbox = Arc::new(PipeOutbox {
        notes: tx,
        asker: None,
        closed: "the client closed the response stream",
        announce: state.announcer(),
    });
    let ctx = RequestContext::new(meta.progress_token.clone(), Some(outbox))
        .with_principal(principal)
        .with_client(client)
        .with_client_capabilities(meta.client_capabilities.clone())
        .with_request_log_level(meta.log_level);
    // The operation ends with the answer, or as cancelled when the client closes the
    // stream (which drops this).
    let work: BoxFuture<'static, Outgoing> = Box::pin(async move {
        let answer = call.run_stateless(&meta, ctx).await;
        if let Some(op) = op {
            op.answered(&answer);
        }
        answer
    });
    let grace = inner.config.sse.keepalive_interval.get().min(JSON_GRACE);
    let mut streaming = Streaming::answering(id, work, notes, body::frame);
    match streaming.answer_within(grace).await {
        Some(answer) => {
            let status = status_of(&answer);
            json_response(answer.to_bytes(), status)
        }
        None => streamed(state, streaming),
    }
}

/// The HTTP status this revision gives a JSON-RPC answer: 404 for an unknown method, 400
/// for the errors that mean the request itself is not acceptable.
fn status_of(answer: &Outgoing) -> StatusCode {
    match answer {
        Outgoing::Error { error, .. } => match error.code {
            ErrorObject::METHOD_NOT_FOUND => StatusCode::NOT_FOUND,
            ErrorObject::HEADER_MISMATCH
            | ErrorObject::MISSING_CAPABILITY
            | ErrorObject::UNSUPPORTED_VERSION => StatusCode::BAD_REQUEST,
            _ => StatusCode::OK,
        },
        _ => StatusCode::OK,
    }
}

fn error_response(
    id: Option<crate::protocol::RequestId>,
    error: ErrorObject,
    status: StatusCode,
) -> Response {
    json_response(Outgoing::Error { id, error }.to_bytes(), status)
}
