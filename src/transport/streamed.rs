//! A request answered on an SSE stream of its own: the common path of every MCP request
//! but `initialize`.
//!
//! The handler is polled once right here. Most answer at once (a lookup, a computation):
//! their response is stored and sent as the whole body — priming event and response —
//! with no connection to follow, no stream actor, no task. A handler that has to wait
//! gets the full machinery: a stream actor subscribes to the stream (replaying anything
//! stored so far), and the handler goes on in a task of its own, so it finishes — and its
//! response is stored — even if the client disconnects; the client resumes with GET and
//! `Last-Event-ID`. Either way every message is stored before it is sent.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use axum::response::Response;
use bytes::BytesMut;
use tracing::Instrument;
use tracing::field::Empty;

use super::outbox::{StreamOutbox, StreamReady};
use super::rejection::Rejection;
use super::session_request::{Caller, apply_session_effects};
use super::{AppState, InFlight, session_rejection, sse_response};
use crate::event_store::{StoreCallError, StoreError, StreamWriter};
use crate::handler::RequestContext;
use crate::ids::{SessionId, StreamKey};
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{Outgoing, RequestId};
use crate::rt::running::RunningRequest;
use crate::server::Call;
use crate::session::SessionHold;
use crate::stream::{Opening, sse};
use crate::telemetry::operation::Operation;

/// The handler's work: its answer, or `None` if it was cancelled (by the client, or because
/// its session ended).
pub(super) type Work = Pin<Box<dyn Future<Output = Option<Outgoing>> + Send>>;

/// Serves `request` on a new stream of `session`, for `caller` (`[auth]`).
pub(super) async fn serve(
    state: &AppState,
    session: SessionId,
    caller: Caller,
    call: Call,
    op: &mut Option<Operation>,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    let span = tracing::Span::current();
    let (touched, hold) = inner
        .sessions
        .hold(session, caller.owner, true, Some(call.id().clone()))
        .await
        .map_err(session_rejection)?;
    if let Some(op) = op {
        op.set_version(touched.protocol_version.as_str());
    }
    let Some(stream) = touched.stream else {
        return Err(Rejection::Unavailable("no stream was allocated".into()));
    };
    let key = StreamKey::new(session, stream);
    span.record("stream", stream.0);
    let request_id = call.id().clone();
    let mut ended = Ended::new(key, hold, inner.running.start());
    if let Err(e) = apply_session_effects(state, session, &call).await {
        ended.finish().await;
        return Err(e);
    }

    // Should this replica shut down before it answers, another one runs it again.
    let mut handover = inner
        .config
        .store
        .hand_over_calls
        .then(|| call.handover(caller.principal.as_ref()))
        .flatten();
    // An introspection answer may name no `exp`: it is trusted for
    // `auth.introspection_cache`, and a run again of its call no longer than that.
    if let Some(principal) = handover.as_mut().and_then(|h| h.principal.as_mut()) {
        let trusted = inner.config.auth.introspection_cache.get().as_secs();
        principal
            .expires_at
            .get_or_insert_with(|| crate::auth::unix_now().saturating_add(trusted));
    }
    let ready = StreamReady::default();
    let outbox = stream_outbox(state, key, touched.protocol_version, ready.clone());
    let sent = outbox.clone();
    let ctx = call
        .context(Some(outbox))
        .with_session(session)
        .with_principal(caller.principal)
        .with_log_level(touched.log_level.clone())
        .with_client_capabilities(touched.client_capabilities.clone());
    let mut work = cancellable(call, ctx, touched.cancel, op.take());
    let version = touched.protocol_version;
    // A request answered on its first poll needs no lease entry: its client learns of its
    // stream only from the body that carries the stored answer (with Redis that saves
    // two of a call's three round trips).
    if let Poll::Ready(outcome) = poll_once(&mut work).await {
        let response = answer_inline(state, key, version, outcome).await;
        ended.finish().await;
        return response;
    }
    // Before the client can learn of the stream: if this replica dies, another one answers.
    ended
        .begin(inner.inflight.clone(), &request_id, handover.as_ref())
        .await;

    let stream_span = tracing::info_span!(
        parent: &span,
        "transport_sse.handle_stream",
        mcp.session.id = %session,
        stream = stream.0,
        last_event_id = Empty,
        replay = "none",
        missed_events = Empty,
        replay_outcome = Empty,
        close_reason = Empty,
        unstored_events = Empty,
    );
    let response = match state
        .open_stream(key, version, Opening::new_post(), None, stream_span)
        .await
    {
        Ok(response) => response,
        Err(e) => {
            // The handler is dropped unfinished: nobody could receive its answer.
            ended.finish().await;
            return Err(e.into_rejection(true));
        }
    };
    let _ = ready.set(());
    tokio::spawn(see_through(state.clone(), work, sent, ended).instrument(span));
    Ok(response)
}

/// The outbox of a request answered on stream `key`, opened once `ready` is set.
pub(super) fn stream_outbox(
    state: &AppState,
    key: StreamKey,
    version: ProtocolVersion,
    ready: StreamReady,
) -> Arc<StreamOutbox> {
    let inner = &state.inner;
    Arc::new(StreamOutbox {
        store: inner.store.clone(),
        writer: tokio::sync::Mutex::new(StreamWriter::new(inner.store.clone(), key)),
        sessions: inner.sessions.clone(),
        key,
        timeout: inner.config.server.client_request_timeout.get(),
        polls: version >= ProtocolVersion::V2025_11_25,
        ready,
        announce: state.announcer(),
    })
}

/// The handler's run of `call` (a panic is contained there), ended early by `cancel`;
/// `op` is told its answer.
pub(super) fn cancellable(
    call: Call,
    ctx: RequestContext,
    cancel: tokio_util::sync::CancellationToken,
    op: Option<Operation>,
) -> Work {
    Box::pin(async move {
        let answer = tokio::select! {
            answer = call.run(ctx) => Some(answer),
            // The client cancelled the request (no response is sent, as the spec asks), or
            // the session ended (DELETE, expiry, shutdown) and nobody could receive one.
            () = cancel.cancelled() => None,
        };
        if let (Some(op), Some(answer)) = (op, &answer) {
            op.answered(answer);
        }
        answer
    })
}

/// Runs `work` to its end in the task that calls it, then stores its response after
/// everything it sent, or ends its stream if it was cancelled, and gives back what
/// `ended` holds. Stopped by shutdown, it keeps its lease entry for another replica.
pub(super) async fn see_through(
    state: AppState,
    work: Work,
    sent: Arc<StreamOutbox>,
    ended: Ended,
) {
    let key = ended.key;
    let answer = work.await;
    // What the handler sent goes before its response, or before the stream ends.
    let after = sent.flush().await;
    match answer {
        Some(answer) => {
            if !keep_response(&state, key, answer.to_bytes(), after).await {
                // Stopped by shutdown before the response could be stored: the lease
                // entry stays, for another replica to answer.
                ended.abandon();
                return;
            }
        }
        None if state.is_closing() => {
            // Stopped by shutdown after the drain: another replica answers it or runs it
            // again (with Redis), or the client retries after restart.
            tracing::debug!("request stopped by shutdown");
            ended.abandon();
            return;
        }
        None => {
            tracing::debug!("request cancelled");
            // No response will come: end the stream, so neither this connection nor a
            // resume waits for one (best effort; the session may be gone).
            let _ = state.inner.store.complete(key).await;
        }
    }
    ended.finish().await;
}

/// Stores a request's response. While the store cannot keep it (Redis away, its actor
/// restarting) it goes live to this replica's connection at most, and a client following
/// the stream on another replica, or resuming later, would wait for it for ever. So it is
/// tried again with the
/// same nonce every `store.retry_interval`, for up to `server.session_timeout`; the
/// request keeps its lease entry and its hold on the session meanwhile (if this replica
/// dies, another one answers). False if shutdown stopped the retries. `after`: the last
/// position the request's notifications were stored at.
async fn keep_response(
    state: &AppState,
    key: StreamKey,
    payload: bytes::Bytes,
    after: u64,
) -> bool {
    let inner = &state.inner;
    let nonce = crate::event_store::EventStoreHandle::nonce();
    let retry = inner.config.store.retry_interval;
    let deadline = tokio::time::Instant::now() + inner.config.server.session_timeout.get();
    let mut warned = false;
    loop {
        match inner
            .store
            .append_with_nonce(key, payload.clone(), true, nonce, after)
            .await
        {
            Ok(Some(_)) => {
                if warned {
                    tracing::info!("the response is stored now, after the store was back");
                }
                return true;
            }
            // Not stored, or the store could not be asked (its actor restarting, Redis
            // failing): both pass. Giving up here would leave a resuming client waiting.
            Ok(None)
            | Err(StoreCallError::Unreachable(_) | StoreCallError::Store(StoreError::Backend(_)))
                if tokio::time::Instant::now() < deadline =>
            {
                if !warned {
                    tracing::warn!(
                        "the response could not be stored; trying again until the store is back"
                    );
                    warned = true;
                }
            }
            Ok(None) => {
                tracing::error!(
                    "the response could not be stored in time; only a connection on this replica received it"
                );
                return true;
            }
            Err(e) => {
                tracing::error!(error = %e, "could not store the response; the client will not receive it");
                return true;
            }
        }
        if state.is_closing() {
            return false;
        }
        tokio::time::sleep(retry.get()).await;
    }
}

/// What a request gives back when it ends: its lease, its hold on the session, and its
/// place among the requests a drain waits for.
pub(super) struct Ended {
    key: StreamKey,
    inflight: Option<Arc<dyn InFlight>>,
    hold: SessionHold,
    _running: RunningRequest,
}

impl Ended {
    /// A request on `key`, holding its session with `hold`, counted by `running`.
    pub(super) fn new(key: StreamKey, hold: SessionHold, running: RunningRequest) -> Self {
        Self {
            key,
            inflight: None,
            hold,
            _running: running,
        }
    }

    /// Registers the request with `inflight` (Redis: the lease entry another replica
    /// answers from if this one dies, or runs it again from with `handover`).
    pub(super) async fn begin(
        &mut self,
        inflight: Option<Arc<dyn InFlight>>,
        request: &RequestId,
        handover: Option<&crate::server::Handover>,
    ) {
        let Some(inflight) = inflight else {
            return;
        };
        if let Err(e) = inflight.begin(self.key, request, handover).await {
            tracing::warn!(error = %e, "if this replica dies, the request goes unanswered");
        }
        self.inflight = Some(inflight);
    }

    pub(super) async fn finish(self) {
        if let Some(inflight) = &self.inflight {
            inflight.end(self.key).await;
        }
        drop(self.hold);
    }

    /// Ends a request that shutdown stopped unanswered: its lease entry stays, so once
    /// this replica's lease is released another replica answers it.
    pub(super) fn abandon(self) {
        drop(self.hold);
    }
}

/// Polls `work` once, in the caller's task.
async fn poll_once(work: &mut Work) -> Poll<Option<Outgoing>> {
    std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
}

/// The whole stream of a request that answered (or was cancelled) on its first poll: the
/// priming event and the stored response, as one body.
async fn answer_inline(
    state: &AppState,
    key: StreamKey,
    version: ProtocolVersion,
    outcome: Option<Outgoing>,
) -> Result<Response, Rejection> {
    let inner = &state.inner;
    let settings = inner.settings;
    let mut body = BytesMut::new();
    if version >= ProtocolVersion::V2025_11_25 {
        let priming = key.event_id(0);
        let id = settings.with_ids.then_some(&priming);
        body.extend_from_slice(&sse::priming(id, settings.retry));
    }
    match outcome {
        Some(answer) => {
            let payload = answer.to_bytes();
            match inner.store.append(key, payload.clone(), true).await {
                // The stream's only event: nothing else to send.
                Ok(Some(id)) if id.seq == 1 => {
                    let id = settings.with_ids.then_some(&id);
                    body.extend_from_slice(&sse::message(id, &payload));
                }
                // Something else was stored on the stream first: the stream, replayed.
                Ok(Some(_)) => {
                    let span = tracing::Span::current();
                    return state
                        .open_stream(key, version, Opening::stored_post(), None, span)
                        .await
                        .map_err(|e| e.into_rejection(false));
                }
                // Not stored (the backend is down): delivered live, without an id.
                Ok(None) => body.extend_from_slice(&sse::message(None, &payload)),
                Err(e) => {
                    tracing::error!(error = %e, "could not store the response; sent without an id");
                    body.extend_from_slice(&sse::message(None, &payload));
                }
            }
        }
        None => {
            tracing::debug!("request cancelled");
            let _ = inner.store.complete(key).await;
        }
    }
    Ok(sse_response(axum::body::Body::from(body.freeze())))
}
