//! POST: one JSON-RPC message per request.
//!
//! - `initialize` creates a session and is answered with JSON and `Mcp-Session-Id`.
//! - Notifications and responses get 202 with no body.
//! - Other requests get their own SSE stream when SSE is enabled (see [`super::streamed`]);
//!   otherwise the answer is one JSON body.

use axum::body::{Body, Bytes};

use axum::extract::{FromRequestParts, Request as HttpRequest, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;
use tracing::field::Empty;

use super::endpoint::{Message, Session, answer_in, with_session};
use super::extract;
use super::rejection::Rejection;
use super::session_request::{Caller, apply_session_effects};
use super::{AppState, reject, session_rejection};
use crate::auth::Owner;
use crate::protocol::{ErrorObject, Incoming, Outgoing};
use crate::server::{Call, Exchange, Opening, Told};
use crate::session::SessionId;
use crate::telemetry::operation::{Operation, Outcome};

/// Handles POST on the MCP endpoint.
pub(crate) async fn handle(State(state): State<AppState>, request: HttpRequest) -> Response {
    let (mut parts, body) = request.into_parts();
    let (caller, message) = match admit(&state, &mut parts, body).await {
        Ok(admitted) => admitted,
        Err(r) => return refused(&parts.headers, r),
    };
    let headers = parts.headers;
    let inner = &state.inner;
    // A drain refuses new requests; answers and notifications (a cancellation, a reply a
    // running handler waits for) still arrive.
    if matches!(message, Incoming::Request(_))
        && let Err(r) = state.admit()
    {
        return refused(&headers, r);
    }
    let mut exchange = inner.server.exchange(message);
    let Some(op) = super::trace::operation(inner.local, &headers, &mut exchange) else {
        // A client's answer to one of our requests: part of that request's trace.
        let span = tracing::debug_span!("mcp.client_response", mcp.session.id = Empty);
        // Boxed, like initialize below: rare paths kept out of every request's future.
        let work = Box::pin(respond(&state, &headers, exchange, caller.owner));
        return answer_in(span, work).await;
    };
    // A request of a principal counts against its running requests for as long as its
    // answer is being sent, and must carry the scopes its target declares.
    let slot = match (&exchange, &inner.gate, &caller.principal, caller.owner) {
        (Exchange::Call(call), Some(gate), Some(principal), Some(owner)) => {
            let checked = gate
                .authorize(principal, &call.scopes())
                .and_then(|()| gate.start_request(owner))
                .map_err(|refused| super::auth::rejection(refused, gate.config()));
            match checked {
                Ok(slot) => slot,
                Err(r) => return finish_refused(op, r),
            }
        }
        _ => None,
    };
    let span = op.span().clone();
    let mut op = Some(op);
    async move {
        let result = if super::stateless::is_stateless(&headers, &exchange) {
            let Caller {
                client, principal, ..
            } = caller;
            Ok(
                super::stateless::serve(&state, &headers, exchange, principal, client, &mut op)
                    .await,
            )
        } else {
            serve(&state, &headers, caller, exchange, &mut op).await
        };
        match (result, op) {
            (Ok(response), op) => {
                if let Some(op) = op {
                    op.finish(Outcome::Ok);
                }
                super::auth::hold_until_sent(response, slot)
            }
            (Err(r), Some(op)) => finish_refused(op, r),
            (Err(r), None) => reject(r),
        }
    }
    .instrument(span)
    .await
}

/// The checks every POST passes before its body is read as a JSON-RPC message, the
/// bearer token first among them; the caller and the message.
async fn admit(
    state: &AppState,
    parts: &mut Parts,
    body: Body,
) -> Result<(Caller, Incoming), Rejection> {
    let caller = Caller::from_request_parts(parts, state).await?;
    let Message(message) = Message::read(&parts.headers, body, state).await?;
    Ok((caller, message))
}

/// A POST refused before it has an operation: answered on an HTTP span of its own.
fn refused(headers: &HeaderMap, r: Rejection) -> Response {
    let span = super::trace::http_span("POST", headers);
    let _entered = span.enter();
    reject(r)
}

/// A POST refused once its operation began: answered on the operation's span, which ends
/// as rejected.
fn finish_refused(op: Operation, r: Rejection) -> Response {
    let message = r.to_string();
    let status = r.status().as_u16();
    let response = op.span().in_scope(|| reject(r));
    op.finish(Outcome::Rejected {
        status,
        message: &message,
    });
    response
}

/// A client's response to a request of ours (sampling, elicitation, roots).
async fn respond(
    state: &AppState,
    headers: &HeaderMap,
    exchange: Exchange,
    caller: Option<Owner>,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    let Exchange::Answer { id, outcome } = exchange else {
        return Err(Rejection::Unavailable("not a response".into()));
    };
    extract::protocol_version(headers)?;
    let Session(session) = Session::read(headers)?;
    inner
        .sessions
        .touch(session, caller)
        .await
        .map_err(session_rejection)?;
    // The answer goes to whichever handler asked; one that gave up, or an id we never
    // sent, is logged and accepted (the client did nothing wrong).
    inner
        .sessions
        .resolve_client_request(session, id, outcome)
        .await
        .map_err(session_rejection)?;
    Ok(StatusCode::ACCEPTED.into_response())
}

/// Serves a request or notification of the session era; `op` is taken by whatever
/// answers it, and left for the caller to end otherwise.
async fn serve(
    state: &AppState,
    headers: &HeaderMap,
    caller: Caller,
    exchange: Exchange,
    op: &mut Option<Operation>,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    extract::protocol_version(headers)?;

    let call = match exchange {
        Exchange::Call(call) => call,
        Exchange::Told(told) => {
            let Session(session) = Session::read(headers)?;
            let touched = inner
                .sessions
                .touch(session, caller.owner)
                .await
                .map_err(session_rejection)?;
            if let Some(op) = op {
                op.set_version(touched.protocol_version.as_str());
            }
            if let Told::Cancel(request, _) = told
                && let Err(e) = inner.sessions.cancel_request(session, request).await
            {
                tracing::warn!(%session, error = %e, "could not deliver a cancellation");
            }
            return Ok(StatusCode::ACCEPTED.into_response());
        }
        Exchange::Answer { .. } => {
            return Box::pin(respond(state, headers, exchange, caller.owner)).await;
        }
    };

    if call.opening() == Opening::Opens {
        return Box::pin(initialize(state, call, caller, op)).await;
    }

    let Session(session) = Session::read(headers)?;

    if !inner.config.sse.enabled {
        let (touched, hold) = inner
            .sessions
            .hold(session, caller.owner, false, Some(call.id().clone()))
            .await
            .map_err(session_rejection)?;
        if let Some(op) = op {
            op.set_version(touched.protocol_version.as_str());
        }
        apply_session_effects(state, session, &call).await?;
        let id = call.id().clone();
        let ctx = call
            .context(None)
            .with_session(session)
            .with_principal(caller.principal)
            .with_log_level(touched.log_level.clone())
            .with_client_capabilities(touched.client_capabilities.clone());
        // A JSON answer cannot be withheld (the HTTP request waits for it), so a cancelled
        // request gets an error that says so.
        let answer = tokio::select! {
            answer = call.run(ctx) => answer,
            () = touched.cancel.cancelled() => Outgoing::Error {
                id: Some(id),
                error: ErrorObject::internal(
                    "request cancelled (by the client, or because its session ended)",
                ),
            },
        };
        drop(hold);
        if let Some(op) = op.take() {
            op.answered(&answer);
        }
        return Ok(json_response(answer.to_bytes(), None));
    }

    super::streamed::serve(state, session, caller, call, op).await
}

async fn initialize(
    state: &AppState,
    call: Call,
    caller: Caller,
    op: &mut Option<Operation>,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    let id = call.id().clone();
    let (result, mut new_session) = match call.initialize() {
        Ok(pair) => pair,
        Err(error) => {
            let answer = Outgoing::Error {
                id: Some(id.clone()),
                error,
            };
            if let Some(op) = op.take() {
                op.answered(&answer);
            }
            let mut response = json_response(answer.to_bytes(), None);
            *response.status_mut() = StatusCode::BAD_REQUEST;
            return Ok(response);
        }
    };
    new_session.client = caller.client;
    new_session.owner = caller.owner;
    let version = new_session.protocol_version.as_str();
    let session = inner
        .sessions
        .create(new_session)
        .await
        .map_err(session_rejection)?;
    if let Some(op) = op {
        op.span()
            .record("mcp.session.id", tracing::field::display(session));
        op.set_version(version);
    }
    let answer = Outgoing::Result { id, result };
    if let Some(op) = op.take() {
        op.answered(&answer);
    }
    Ok(json_response(answer.to_bytes(), Some(session)))
}

/// A JSON answer, naming the session it created if any.
fn json_response(body: Bytes, session: Option<SessionId>) -> Response {
    let response = super::endpoint::json_response(body, StatusCode::OK);
    match session {
        Some(session) => with_session(response, session),
        None => response,
    }
}
