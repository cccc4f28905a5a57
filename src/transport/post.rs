//! POST: one JSON-RPC message per request.
//!
//! - `initialize` creates a session and is answered with JSON and `Mcp-Session-Id`.
//! - Notifications and responses get 202 with no body.
//! - Other requests get their own SSE stream when SSE is enabled (see [`super::streamed`]);
//!   otherwise the answer is one JSON body.

use axum::body::{Body, Bytes};
use std::net::IpAddr;
use std::sync::Arc;

use axum::Extension;
use axum::extract::RawQuery;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;
use tracing::field::Empty;

use super::extract::{self, SESSION_ID};
use super::rejection::Rejection;
use super::serve::ClientAddr;
use super::session_request::{Caller, apply_session_effects};
use super::{AppState, reject, session_rejection};
use crate::auth::{Owner, Principal};
use crate::protocol::{self, ErrorObject, Incoming, Outgoing};
use crate::server::{Call, Exchange, Opening, Told, guarded};
use crate::session::SessionId;
use crate::telemetry::operation::{Operation, Outcome};

/// Handles POST on the MCP endpoint.
pub(crate) async fn handle(
    State(state): State<AppState>,
    client: Option<Extension<ClientAddr>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let client = client.map(|Extension(ClientAddr(addr))| addr);
    let (message, principal) = match admit(&state, query.as_deref(), &headers, client, body).await {
        Ok(admitted) => admitted,
        Err(r) => {
            let span = super::trace::http_span("POST", &headers);
            let _entered = span.enter();
            return reject(r);
        }
    };
    let inner = &state.inner;
    // A drain refuses new requests; answers and notifications (a cancellation, a reply a
    // running handler waits for) still arrive.
    if matches!(message, Incoming::Request(_))
        && let Err(r) = state.admit()
    {
        let span = super::trace::http_span("POST", &headers);
        let _entered = span.enter();
        return reject(r);
    }
    // Worked out once: a hash of issuer and subject.
    let owner = principal.as_ref().map(|p| p.owner());
    let exchange = inner.server.exchange(message);
    let Some(op) = super::trace::operation(inner.local, &headers, &exchange) else {
        // A client's answer to one of our requests: part of that request's trace.
        let span = tracing::debug_span!("mcp.client_response", mcp.session.id = Empty);
        return respond(&state, &headers, exchange, owner)
            .instrument(span)
            .await
            .unwrap_or_else(reject);
    };
    // A request of a principal counts against its running requests for as long as its
    // answer is being sent, and must carry the scopes its target declares.
    let slot = match (&exchange, &inner.gate, &principal, owner) {
        (Exchange::Call(call), Some(gate), Some(principal), Some(owner)) => {
            let checked = gate
                .authorize(principal, call.scopes())
                .and_then(|()| gate.start_request(owner));
            match checked {
                Ok(slot) => slot,
                Err(r) => {
                    let message = r.to_string();
                    let status = r.status().as_u16();
                    let response = op.span().in_scope(|| reject(r));
                    op.finish(Outcome::Rejected {
                        status,
                        message: &message,
                    });
                    return response;
                }
            }
        }
        _ => None,
    };
    let span = op.span().clone();
    let mut op = Some(op);
    async move {
        let result = if super::stateless::is_stateless(&headers, &exchange) {
            Ok(super::stateless::serve(&state, &headers, exchange, principal, client, &mut op).await)
        } else {
            let caller = Caller {
                client,
                principal,
                owner,
            };
            serve(&state, &headers, caller, exchange, &mut op).await
        };
        match result {
            Ok(response) => {
                if let Some(op) = op {
                    op.finish(Outcome::Ok);
                }
                super::auth::hold_until_sent(response, slot)
            }
            Err(r) => {
                if let Some(op) = op {
                    let message = r.to_string();
                    let status = r.status().as_u16();
                    let response = reject(r);
                    op.finish(Outcome::Rejected {
                        status,
                        message: &message,
                    });
                    return response;
                }
                reject(r)
            }
        }
    }
    .instrument(span)
    .await
}

/// The checks every POST passes before its body is read as a JSON-RPC message, the
/// bearer token first among them; the message and its principal.
async fn admit(
    state: &AppState,
    query: Option<&str>,
    headers: &HeaderMap,
    client: Option<IpAddr>,
    body: Body,
) -> Result<(Incoming, Option<Arc<Principal>>), Rejection> {
    let inner = &state.inner;
    inner.guard.check(headers)?;
    let principal = state.authenticate(query, headers, client).await?;
    if !extract::is_json_content(headers) {
        return Err(Rejection::UnsupportedMediaType);
    }
    let accepts = extract::accepts(headers);
    if !(accepts.json && accepts.sse) {
        return Err(Rejection::NotAcceptable(
            "POST requires Accept listing both application/json and text/event-stream",
        ));
    }
    let server = &inner.config.server;
    let body = tokio::time::timeout(
        server.body_timeout.get(),
        read_body(headers, body, server.max_body_bytes),
    )
    .await
    .map_err(|_| Rejection::BodyTimeout)??;
    let message = protocol::parse(&body).map_err(Rejection::JsonRpc)?;
    check_progress_token(&message, server.max_progress_token_bytes)?;
    Ok((message, principal))
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
    let session = extract::required_session_id(headers)?;
    tracing::Span::current().record("mcp.session.id", tracing::field::display(session));
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
    let span = tracing::Span::current();

    let call = match exchange {
        Exchange::Call(call) => call,
        Exchange::Told(told) => {
            let session = extract::required_session_id(headers)?;
            span.record("mcp.session.id", tracing::field::display(session));
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
        Exchange::Answer { .. } => return respond(state, headers, exchange, caller.owner).await,
    };

    if call.opening() == Opening::Opens {
        return initialize(state, call, caller, op).await;
    }

    let session = extract::required_session_id(headers)?;
    span.record("mcp.session.id", tracing::field::display(session));

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
            answer = guarded(id.clone(), Box::pin(call.run(ctx))) => answer,
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

fn json_response(body: Bytes, session: Option<SessionId>) -> Response {
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(session) = session
        && let Ok(value) = HeaderValue::from_str(&session.to_string())
    {
        headers.insert(SESSION_ID, value);
    }
    response
}

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
