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
pub mod sse;

use crate::telemetry::metrics::{
    CONNECTIONS_CUT, Cut, EVENTS_REPLAYED, REPLAYS, ReplayResult, STREAMS_OPEN, StreamKind, Tracked,
};
use std::fmt;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

use crate::event_store::{Event, EventStoreHandle, Feed, FeedEnd, ReplayOutcome, StoreCallError};
use crate::ids::StreamKey;
use crate::session::SessionHold;

pub use body::SseBody;

/// Replayed frames are coalesced into writes of about this size, so a long replay neither
/// fills the bounded buffer frame by frame nor becomes one huge allocation.
const REPLAY_CHUNK: usize = 64 * 1024;

/// Why a stream actor stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// The stream's last event (a POST stream's response) was written.
    Completed,
    /// The client closed the connection.
    ClientGone,
    /// No event for `stream_timeout`.
    IdleTimeout,
    /// The client read too slowly and the buffer filled.
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
    pub tx: mpsc::Sender<Bytes>,
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

/// Running state of a stream actor.
#[derive(Debug)]
pub struct StreamState {
    key: StreamKey,
    /// `None` once closed. Released explicitly, not left to drop: ractor hands a stopped
    /// actor's state to its supervisor inside the exit event, so anything left here would
    /// live on (keeping the HTTP body open) until the listener reads that event.
    tx: Option<mpsc::Sender<Bytes>>,
    store: EventStoreHandle,
    settings: StreamSettings,
    span: tracing::Span,
    /// Position of the last event written; live events at or before it are duplicates of
    /// the replay and skipped.
    position: u64,
    last_activity: Instant,
    exit: Option<CloseReason>,
    subscribed: bool,
    ping_timer: Option<AbortHandle>,
    idle_timer: Option<AbortHandle>,
    hold: Option<SessionHold>,
    /// Events written without being stored (the store's backend was down).
    unstored: u64,
    /// Counts in `otpmcp_streams_open` until released.
    open: Option<Tracked>,
}

/// The stream actor.
#[derive(Debug, Default)]
pub struct StreamActor;

impl StreamState {
    fn write(&mut self, frame: Bytes) -> Result<(), CloseReason> {
        let Some(tx) = &self.tx else {
            return Err(CloseReason::ClientGone);
        };
        tx.try_send(frame).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => CloseReason::SlowConsumer,
            mpsc::error::TrySendError::Closed(_) => CloseReason::ClientGone,
        })
    }

    fn frame(&self, event: &Event) -> Bytes {
        sse::message(self.settings.with_ids.then_some(&event.id), &event.payload)
    }

    fn deliver(&mut self, event: &Event) -> Result<(), CloseReason> {
        if event.id.seq <= self.position {
            return Ok(());
        }
        self.write(self.frame(event))?;
        self.position = event.id.seq;
        self.last_activity = Instant::now();
        if event.last {
            return Err(CloseReason::Completed);
        }
        Ok(())
    }
}

impl StreamState {
    fn deliver_unstored(&mut self, payload: &[u8], last: bool) -> Result<(), CloseReason> {
        self.write(sse::message(None, payload))?;
        self.last_activity = Instant::now();
        self.unstored += 1;
        self.span.record("unstored_events", self.unstored);
        tracing::debug!(parent: &self.span, "event delivered live but not stored; it cannot be replayed");
        if last {
            return Err(CloseReason::Completed);
        }
        Ok(())
    }
}

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
        let replay = args
            .store
            .subscribe(args.key, args.after, args.create, myself.get_derived())
            .await
            .map_err(StreamStartError)?;
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
        let mut state = StreamState {
            key: args.key,
            tx: Some(args.tx),
            store: args.store,
            settings: args.settings,
            span,
            position: 0,
            last_activity: Instant::now(),
            exit: None,
            subscribed: !replay.completed,
            ping_timer: None,
            idle_timer: None,
            hold: args.hold,
            unstored: 0,
            open: Some(STREAMS_OPEN.track(args.kind)),
        };
        if args.kind == StreamKind::Resume {
            EVENTS_REPLAYED.add(missed as u64);
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
        let mut chunk = BytesMut::new();
        if state.settings.priming {
            chunk.extend_from_slice(&sse::priming(
                state.settings.with_ids.then_some(&priming_id),
                state.settings.retry,
            ));
        }
        if let ReplayOutcome::Truncated { missing } = replay.outcome {
            chunk.extend_from_slice(&sse::comment(&format!(
                "otpmcp: {missing} events were evicted before this replay"
            )));
        }
        state.position = resume_from;
        let mut outcome = Ok(());
        for event in &replay.events {
            chunk.extend_from_slice(&state.frame(event));
            state.position = event.id.seq;
            if chunk.len() >= REPLAY_CHUNK {
                outcome = state.write(chunk.split().freeze());
                if outcome.is_err() {
                    break;
                }
            }
        }
        if outcome.is_ok() && !chunk.is_empty() {
            outcome = state.write(chunk.freeze());
        }
        state.exit = match outcome {
            Err(reason) => Some(reason),
            Ok(()) if replay.completed => Some(CloseReason::Completed),
            Ok(()) => None,
        };
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
        let _span =
            tracing::debug_span!(parent: &state.span, "stream.handle", msg = msg.name()).entered();
        let result = match msg {
            StreamMsg::Feed(Feed::Event(event)) => state.deliver(&event),
            StreamMsg::Feed(Feed::Unstored { payload, last }) => {
                state.deliver_unstored(&payload, last)
            }
            StreamMsg::Feed(Feed::End(end)) => Err(end.into()),
            StreamMsg::Ping => state.write(sse::comment("ping")),
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
        release(state);
        Ok(())
    }
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
    release(state);
    myself.stop(Some(reason.as_str().to_owned()));
}

/// Ends the HTTP body, lets the session expire again and ends the stream's span.
fn release(state: &mut StreamState) {
    state.tx = None;
    state.hold = None;
    state.open = None;
    state.span = tracing::Span::none();
}
