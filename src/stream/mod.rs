//! The stream actor: one per open SSE connection (a POST response stream or a GET stream).
//!
//! It subscribes to its stream in the event store (receiving the replay and then every new
//! event), writes the priming event with `retry:` (for 2025-11-25 clients), then each event
//! as `id:` + `event:` + `data:` frames, sends `: ping` comments every `keepalive_interval`,
//! and closes an idle connection after `stream_timeout` with a `retry:` hint (except a POST
//! stream of an older client, which would not poll back). Its buffer toward the socket is
//! bounded: a client that cannot keep up is disconnected, losing nothing, since every event
//! was stored before it reached this actor and the client resumes with `Last-Event-ID`.
//!
//! Stream actors are temporary children of the HTTP listener: never restarted, because the
//! client reconnects and resumes on its own.

pub mod body;
mod open;
pub mod pipe;
pub mod sse;
mod state;

use crate::telemetry::metrics::{
    CONNECTIONS_CUT, Cut, EVENTS_REPLAYED, REPLAYS, ReplayResult, STREAMS_OPEN, StreamKind,
};
use std::fmt;
use std::time::Duration;

use bytes::BytesMut;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef};
use tracing::Instrument;

use crate::event_store::{EventStoreHandle, Feed, FeedEnd, ReplayOutcome, StoreCallError};
use crate::ids::StreamKey;
use crate::session::SessionHold;

pub use body::SseBody;
pub use open::{Open, OpenError, Opening};
pub use pipe::{PipeTx, pipe};
pub use state::StreamState;

/// Why a stream actor stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The stream's last event (a POST stream's response) was written.
    Completed,
    /// The client closed the connection.
    ClientGone,
    /// No event for `stream_timeout`.
    IdleTimeout,
    /// The client read too slowly: the buffer filled, and the events waiting behind it
    /// went past the byte budget.
    SlowConsumer,
    /// Another connection resumed the same stream.
    Superseded,
    /// The session was deleted or expired.
    SessionEnded,
    /// The server is shutting down.
    Shutdown,
    /// The handler asked to end this connection early (SSE polling, 2025-11-25): it keeps
    /// working, and the client resumes with GET and `Last-Event-ID` after `retry`.
    Polling,
}

impl CloseReason {
    /// Short name for logs, spans and ractor's exit reason.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::ClientGone => "client_gone",
            Self::IdleTimeout => "idle_timeout",
            Self::SlowConsumer => "slow_consumer",
            Self::Superseded => "superseded",
            Self::SessionEnded => "session_ended",
            Self::Shutdown => "shutdown",
            Self::Polling => "polling",
        }
    }

    /// Whether the client should be told when to come back before we close.
    fn sends_retry(self) -> bool {
        matches!(
            self,
            Self::IdleTimeout
                | Self::Superseded
                | Self::SessionEnded
                | Self::Shutdown
                | Self::Polling
        )
    }
}

impl fmt::Display for CloseReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl From<FeedEnd> for CloseReason {
    fn from(end: FeedEnd) -> Self {
        match end {
            FeedEnd::Completed => Self::Completed,
            FeedEnd::Polling => Self::Polling,
            FeedEnd::SessionEnded => Self::SessionEnded,
        }
    }
}

/// Closes the stream actor `stream` for shutdown, with a `retry:` hint; fails harmlessly
/// once it has stopped. A cell, since that is how its parent sees it.
pub fn close_for_shutdown(stream: &ActorCell) {
    let _ = stream.send_message(StreamMsg::Close(CloseReason::Shutdown));
}

/// Messages of a stream actor.
#[derive(Debug)]
pub enum StreamMsg {
    /// What the store sends the stream's connection: events, or the end.
    Feed(Feed),
    /// Timer: write a keep-alive comment.
    Ping,
    /// Timer: close if idle for `stream_timeout`.
    IdleCheck,
    /// The HTTP body was dropped.
    ClientGone,
    /// The body took enough of what was queued: the rest of a replay can follow.
    Drained,
    /// Close on purpose, with a `retry:` hint where it applies.
    Close(CloseReason),
}

impl StreamMsg {
    fn name(&self) -> &'static str {
        match self {
            Self::Feed(Feed::Event(_)) => "deliver",
            Self::Feed(Feed::Unstored { .. }) => "deliver_unstored",
            Self::Feed(Feed::End(_)) => "feed_end",
            Self::Ping => "ping",
            Self::IdleCheck => "idle_check",
            Self::ClientGone => "client_gone",
            Self::Drained => "drained",
            Self::Close(_) => "close",
        }
    }
}

/// The store reaches a stream actor through [`Feed`] messages only (a
/// [`ractor::DerivedActorRef`]), so it never names this actor's type.
impl From<Feed> for StreamMsg {
    fn from(feed: Feed) -> Self {
        Self::Feed(feed)
    }
}

impl TryFrom<StreamMsg> for Feed {
    type Error = StreamMsg;

    fn try_from(msg: StreamMsg) -> Result<Self, StreamMsg> {
        match msg {
            StreamMsg::Feed(feed) => Ok(feed),
            other => Err(other),
        }
    }
}

/// Per-stream timing and framing settings (from `[sse]`).
#[derive(Debug, Clone, Copy)]
pub struct StreamSettings {
    /// `keepalive_interval`.
    pub keepalive: Duration,
    /// `stream_timeout`.
    pub idle_timeout: Duration,
    /// `retry_timeout`.
    pub retry: Duration,
    /// Write `id:` lines (`enable_replay`).
    pub with_ids: bool,
    /// Start with the priming event (id, empty data). Only 2025-11-25 clients expect it;
    /// older SDKs fail on an event with empty data.
    pub priming: bool,
    /// Close the stream after `idle` without events. Not for a POST stream of a client
    /// older than 2025-11-25: it does not poll back, so it would lose the response.
    pub close_idle: bool,
    /// The pipe's byte budget (`stream_buffer_bytes`): also the most live events may wait
    /// behind a replay.
    pub buffer_bytes: usize,
}

/// Start-up arguments of a stream actor.
#[derive(Debug)]
pub struct StreamArgs {
    /// The stream to follow.
    pub key: StreamKey,
    /// Replay after this position (`Last-Event-ID`); `None`: live only.
    pub after: Option<u64>,
    /// Create the stream if the store does not know it (new POST and GET streams).
    pub create: bool,
    /// The bounded buffer toward the HTTP body.
    pub tx: PipeTx,
    /// The event store.
    pub store: EventStoreHandle,
    /// Timings.
    pub settings: StreamSettings,
    /// The `transport_sse.handle_stream` span, closed when the stream ends.
    pub span: tracing::Span,
    /// Keeps the session from expiring while the connection is open.
    pub hold: Option<SessionHold>,
    /// What the stream serves, for `otpmcp_streams_open` and the resume counts.
    pub kind: StreamKind,
}

/// The stream actor.
#[derive(Debug, Default)]
pub struct StreamActor;

/// Why a stream could not start.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StreamStartError(#[from] pub StoreCallError);

impl Actor for StreamActor {
    type Msg = StreamMsg;
    type State = StreamState;
    type Arguments = StreamArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<StreamMsg>,
        args: StreamArgs,
    ) -> Result<StreamState, ActorProcessingErr> {
        // Boxed, as the reads below: start-up would otherwise size the actor's task.
        let subscribe =
            args.store
                .subscribe(args.key, args.after, args.create, myself.get_derived());
        let replay = Box::pin(subscribe).await.map_err(StreamStartError)?;
        let span = args.span;
        let missed = replay.events.len();
        span.record("missed_events", missed);
        span.record("replay_outcome", replay.outcome.as_str());
        if let ReplayOutcome::Truncated { missing } = replay.outcome {
            tracing::warn!(parent: &span, missing, "replay is missing evicted events");
        }
        if replay.outcome == ReplayOutcome::OutsideWindow {
            tracing::warn!(parent: &span, "Last-Event-ID is older than the replay window; live only");
        }
        let kind = args.kind;
        let mut state = StreamState::new(state::Parts {
            key: args.key,
            tx: args.tx,
            budget: args.settings.buffer_bytes,
            store: args.store,
            settings: args.settings,
            span,
            hold: args.hold,
            open: STREAMS_OPEN.track(kind),
        });
        state.subscribed = !replay.completed;
        if kind == StreamKind::Resume {
            EVENTS_REPLAYED.add(missed as u64);
            state.replayed = Some(missed as u64);
            let result = match replay.outcome {
                ReplayOutcome::Complete => Some(ReplayResult::Complete),
                ReplayOutcome::Truncated { .. } => Some(ReplayResult::Truncated),
                ReplayOutcome::OutsideWindow => Some(ReplayResult::OutsideWindow),
                ReplayOutcome::Disabled => None,
            };
            if let Some(result) = result {
                REPLAYS.inc(result);
            }
        }

        // Priming: the position the client may resume from if it loses us right away.
        let resume_from = match (args.after, replay.outcome) {
            (Some(after), ReplayOutcome::Complete | ReplayOutcome::Truncated { .. }) => after,
            _ => replay.position,
        };
        let priming_id = args.key.event_id(resume_from);
        let mut opening = BytesMut::new();
        if state.settings.priming {
            opening.extend_from_slice(&sse::priming(
                state.settings.with_ids.then_some(&priming_id),
                state.settings.retry,
            ));
        }
        if let ReplayOutcome::Truncated { missing } = replay.outcome {
            opening.extend_from_slice(&sse::comment(&format!(
                "otpmcp: {missing} events were evicted before this replay"
            )));
        }
        state.position = resume_from;
        let finish = replay.completed.then_some(CloseReason::Completed);
        let started = state.start(opening.freeze(), replay, finish);
        state.exit = Box::pin(read_pages(&mut state, started)).await.err();
        if state.exit.is_none() {
            let keepalive = state.settings.keepalive;
            let ping = myself.send_interval(keepalive, || StreamMsg::Ping);
            state.ping_timer = Some(ping.abort_handle());
            if state.settings.close_idle {
                let idle = state.settings.idle_timeout;
                let check = myself.send_after(idle, || StreamMsg::IdleCheck);
                state.idle_timer = Some(check.abort_handle());
            }
        }
        Ok(state)
    }

    async fn post_start(
        &self,
        myself: ActorRef<StreamMsg>,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(reason) = state.exit {
            close(&myself, state, reason);
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StreamMsg>,
        msg: StreamMsg,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        if state.exit.is_some() {
            return Ok(());
        }
        let span = tracing::debug_span!(parent: &state.span, "stream.handle", msg = msg.name());
        let result = match msg {
            StreamMsg::Drained => {
                let pumped = span.in_scope(|| state.pump());
                // Boxed: a store read is a large future, and inline it would size this
                // actor's task for every idle stream (about 1 KB each; issue 41).
                Box::pin(read_pages(state, pumped)).instrument(span).await
            }
            other => span.in_scope(|| handle_now(&myself, state, other)),
        };
        if let Err(reason) = result {
            close(&myself, state, reason);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        myself: ActorRef<StreamMsg>,
        state: &mut StreamState,
    ) -> Result<(), ActorProcessingErr> {
        for timer in [state.ping_timer.take(), state.idle_timer.take()]
            .into_iter()
            .flatten()
        {
            timer.abort();
        }
        if state.subscribed {
            state.store.unsubscribe(state.key, myself.get_id());
        }
        if state.exit.is_none() {
            // Stopped from outside without a Close: the store superseded this connection
            // with a newer one on the same stream.
            let reason = CloseReason::Superseded;
            CONNECTIONS_CUT.inc(Cut::Superseded);
            let _ = state.write(sse::retry(state.settings.retry));
            state.span.record("close_reason", reason.as_str());
            state.exit = Some(reason);
        }
        state.release();
        Ok(())
    }
}

/// What a message other than [`StreamMsg::Drained`] does, at once.
fn handle_now(
    myself: &ActorRef<StreamMsg>,
    state: &mut StreamState,
    msg: StreamMsg,
) -> Result<(), CloseReason> {
    match msg {
        StreamMsg::Feed(Feed::Event(event)) => state.deliver(event),
        StreamMsg::Feed(Feed::Unstored { payload, last }) => state.deliver_unstored(payload, last),
        StreamMsg::Feed(Feed::End(end)) => state.end(end.into()),
        StreamMsg::Ping => state.ping(),
        StreamMsg::Drained => state.pump(),
        StreamMsg::IdleCheck => {
            let idle = state.last_activity.elapsed();
            let limit = state.settings.idle_timeout;
            if idle >= limit {
                Err(CloseReason::IdleTimeout)
            } else {
                let timer = myself.send_after(limit - idle, || StreamMsg::IdleCheck);
                state.idle_timer = Some(timer.abort_handle());
                Ok(())
            }
        }
        StreamMsg::ClientGone => Err(CloseReason::ClientGone),
        StreamMsg::Close(reason) => Err(reason),
    }
}

/// Reads the replay's next pages from the store while the connection has room for them.
/// The actor waits meanwhile: the feed's messages queue behind, in order.
async fn read_pages(
    state: &mut StreamState,
    mut pumped: Result<(), CloseReason>,
) -> Result<(), CloseReason> {
    while pumped.is_ok()
        && let Some(after) = state.page_wanted()
    {
        let page = state.store.read_page(state.key, after).await;
        pumped = state.add_page(page);
    }
    pumped
}

fn close(myself: &ActorRef<StreamMsg>, state: &mut StreamState, reason: CloseReason) {
    state.exit = Some(reason);
    match reason {
        CloseReason::SlowConsumer => CONNECTIONS_CUT.inc(Cut::SlowConsumer),
        CloseReason::Superseded => CONNECTIONS_CUT.inc(Cut::Superseded),
        _ => {}
    }
    if reason.sends_retry() {
        // Best effort: a full buffer means the client will not read it anyway.
        let _ = state.write(sse::retry(state.settings.retry));
    }
    state.span.record("close_reason", reason.as_str());
    tracing::debug!(parent: &state.span, reason = reason.as_str(), position = state.position, "stream closed");
    state.release();
    myself.stop(Some(reason.as_str().to_owned()));
}
