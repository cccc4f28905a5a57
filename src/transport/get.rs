//! GET: opens the standalone stream, or resumes any stream of the session (including one
//! that began as a POST response) from `Last-Event-ID`.
//!
//! What a `Last-Event-ID` gets (docs/resumability.md says the same):
//! - absent: the standalone stream, live from now;
//! - malformed, from another session, or past the end of its stream: logged, recorded on
//!   the span (`replay = "invalid"`), and treated as absent — never resolved against
//!   another stream;
//! - a valid id: that stream, replayed after the id, then live; a stream that has already
//!   ended is replayed to its end and closed;
//! - a POST stream whose history expired: 410 Gone, because a standalone stream would
//!   never carry the response the client is waiting for (a session that ended gets 404
//!   from the session check; only if it ends between that check and the store lookup does
//!   the resume get 410).

use crate::telemetry::metrics::{REPLAYS, ReplayResult};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::response::Response;

use super::endpoint::{Session, Version, answer_in};
use super::extract::{self, LastEventId};
use super::rejection::Rejection;
use super::session_request::Caller;
use super::{AppState, StreamOpenError, session_rejection};
use crate::event_store::{StoreError, StreamKey, StreamNo};
use crate::stream::{OpenError, Opening};

/// Handles GET on the MCP endpoint.
pub(crate) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let span = super::trace::http_span("GET", &parts.headers);
    answer_in(span.clone(), open(&state, &mut parts, span)).await
}

async fn open(
    state: &AppState,
    parts: &mut Parts,
    span: tracing::Span,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    // The events of a session are its owner's: another principal's resume is refused by
    // the session check below, as if the session did not exist.
    let caller = Caller::from_request_parts(parts, state).await?.owner;
    if !inner.config.sse.enabled {
        return Err(Rejection::StreamsDisabled);
    }
    if !extract::accepts(&parts.headers).sse {
        return Err(Rejection::NotAcceptable(
            "GET requires Accept: text/event-stream",
        ));
    }
    let Session(session) = Session::from_request_parts(parts, state).await?;
    Version::from_request_parts(parts, state).await?;
    let headers = &parts.headers;
    let standalone = StreamKey::new(session, StreamNo::STANDALONE);
    let requested = if inner.config.sse.enable_replay {
        extract::last_event_id(headers)
    } else {
        LastEventId::Absent
    };
    let (key, after) = match requested {
        LastEventId::Absent => {
            span.record("replay", "none");
            (standalone, None)
        }
        LastEventId::Malformed(text, why) => {
            span.record("last_event_id", text.as_str());
            span.record("replay", "invalid");
            REPLAYS.inc(ReplayResult::UnknownId);
            // Debug, not warn: any client can send one per request (counted in
            // otpmcp_replays_total{outcome="unknown_id"}).
            tracing::debug!(last_event_id = %text, error = %why, "malformed Last-Event-ID; opening a live stream without replay");
            (standalone, None)
        }
        LastEventId::Valid(id) => {
            span.record("last_event_id", tracing::field::display(id));
            match id.key_in(session) {
                Some(key) => {
                    span.record("replay", "active");
                    (key, Some(id.seq))
                }
                None => {
                    span.record("replay", "invalid");
                    REPLAYS.inc(ReplayResult::ForeignId);
                    tracing::debug!(last_event_id = %id, "Last-Event-ID belongs to another session; opening a live stream without replay");
                    (standalone, None)
                }
            }
        }
    };
    span.record("stream", key.stream.0);

    // Every open stream counts against the session's open requests and streams, a resume
    // too: otherwise one client could open any number of replays of one large stream.
    let create = key.stream.is_standalone();
    let (touched, hold) = inner
        .sessions
        .hold(session, caller, false, None)
        .await
        .map_err(session_rejection)?;
    let hold = Some(hold);
    let version = touched.protocol_version;
    span.record("mcp.protocol.version", version.as_str());
    match state
        .open_stream(
            key,
            version,
            Opening::get(after, create),
            hold,
            span.clone(),
        )
        .await
    {
        Ok(response) => Ok(response),
        Err(StreamOpenError::Stream(OpenError::Store(StoreError::FuturePosition(seq)))) => {
            span.record("replay", "invalid");
            REPLAYS.inc(ReplayResult::FuturePosition);
            tracing::debug!(
                seq,
                "Last-Event-ID is past the end of its stream; opening a live stream without replay"
            );
            let (_, hold) = inner
                .sessions
                .hold(session, caller, false, None)
                .await
                .map_err(session_rejection)?;
            state
                .open_stream(
                    standalone,
                    version,
                    Opening::get(None, true),
                    Some(hold),
                    span,
                )
                .await
                .map_err(|e| e.into_rejection(true))
        }
        Err(e) => {
            if matches!(
                e,
                StreamOpenError::Stream(OpenError::Store(StoreError::UnknownStream))
            ) {
                REPLAYS.inc(ReplayResult::UnknownId);
            }
            Err(e.into_rejection(create))
        }
    }
}
