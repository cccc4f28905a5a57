//! The event store: every message sent on an SSE stream is stored here first, and gets its
//! id here, so a client that reconnects with `Last-Event-ID` can be given exactly what it
//! missed.
//!
//! [`EventStore`] is the backend contract, met by [`MemoryStore`] (this process) and
//! [`RedisStore`] (shared by replicas), chosen once at start-up ([`Shards`]); [`actor`]
//! wraps a backend (a type parameter: static dispatch) in the supervised actor that
//! enforces retention, runs the periodic sweep and forwards each stored event (its own,
//! or another replica's) to the connection following its stream.
//!
//! # Contract
//! - An event gets its id only once it is stored ([`EventStore::append`] returns it); the
//!   id is then written to the wire, never before.
//! - Appends carry a nonce; appending again with a nonce the stream has just seen stores
//!   nothing and returns the first id, so a request re-sent after a crash of the store
//!   actor cannot create a duplicate.
//! - Ids follow [`event_id`]: unique across the streams of a session, naming their stream,
//!   ordered by position within it. Positions start at 1; position 0 is the priming
//!   position of a stream.
//! - [`EventStore::replay_after`] returns only events of the id's own stream, in order,
//!   strictly after the given position. It never returns another stream's or another
//!   session's events.
//! - The store knows which sessions are alive ([`EventStore::open_session`] /
//!   [`EventStore::forget_session`]); streams and events of any other session are refused,
//!   so work still running for an ended session cannot bring its history back.
//! - Unknown streams (never opened, forgotten, or expired) give
//!   [`StoreError::UnknownStream`]; a position beyond the stream's end gives
//!   [`StoreError::FuturePosition`]; evicted events are reported as
//!   [`ReplayOutcome::Truncated`] with the number missing, never silently skipped.

pub mod actor;
pub mod backend;
pub mod feed;
pub mod format;
pub mod memory;
pub mod redis;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

pub use crate::ids::{EventId, EventIdError, StreamKey, StreamNo};
pub use actor::{
    EventStoreActor, EventStoreHandle, ShardConfig, StoreCallError, StoreMsg, StreamWriter,
};
pub use backend::Shards;
pub use feed::{Feed, FeedEnd};
pub use memory::MemoryStore;
pub use redis::RedisStore;

use crate::ids::SessionId;

/// One stored event as handed to a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its id (stream and position).
    pub id: EventId,
    /// The serialized JSON-RPC message.
    pub payload: Bytes,
    /// True for the last event of a stream (the response that ends a POST stream).
    pub last: bool,
}

/// The result of an append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    /// The stored event.
    pub event: Event,
    /// The nonce was seen before: nothing new was stored. The store actor forwards it
    /// anyway (the crash behind the re-send may have come between storing and forwarding);
    /// a connection that already has it skips it by position.
    pub duplicate: bool,
}

/// What a replay could give.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplayOutcome {
    /// Every event after the position, none missing.
    Complete,
    /// `missing` events after the position were evicted (TTL, or the per-session event or
    /// byte budget); the retained ones follow.
    Truncated {
        /// How many events are gone.
        missing: u64,
    },
    /// The position was issued longer ago than the replay window: nothing is replayed.
    OutsideWindow,
    /// Replay is turned off (`enable_replay = false`): nothing is stored.
    Disabled,
}

impl ReplayOutcome {
    /// Short name for logs and span attributes.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Complete => "complete",
            Self::Truncated { .. } => "truncated",
            Self::OutsideWindow => "outside_window",
            Self::Disabled => "disabled",
        }
    }
}

/// Events a connection is given at a time when it resumes: the rest of its replay is read
/// as its client takes these, so a resume of a long stream holds a page, not the stream.
pub const REPLAY_PAGE: usize = 256;

/// The answer to [`EventStore::replay_after`].
#[derive(Debug, Clone)]
pub struct Replay {
    /// Events after the requested position, in order.
    pub events: Vec<Event>,
    /// Whether anything is missing.
    pub outcome: ReplayOutcome,
    /// The stream's current end: the position of its last event (0 if none). A live
    /// subscriber continues from here.
    pub position: u64,
    /// The stream's last event has been stored: nothing more will come.
    pub completed: bool,
}

/// Retention limits, from `[sse]` in sys.toml.
#[derive(Debug, Clone, Copy)]
pub struct Retention {
    /// Store events at all (`enable_replay`).
    pub enabled: bool,
    /// Age after which an event is dropped (`event_ttl`).
    pub event_ttl: Duration,
    /// Age after which a `Last-Event-ID` is no longer honoured (`replay_window`).
    pub replay_window: Duration,
    /// Events kept per session across its streams (`max_session_events`).
    pub max_session_events: usize,
    /// Payload bytes kept per session across its streams (`max_session_bytes`); the
    /// newest event is kept even if it alone is larger.
    pub max_session_bytes: usize,
    /// Task records kept at once by the in-memory store (`tasks.max_tasks`).
    pub max_tasks: usize,
    /// Events kept across all sessions by the in-memory store (`max_total_events`).
    pub max_total_events: usize,
    /// Payload bytes kept across all sessions by the in-memory store (`max_total_bytes`).
    pub max_total_bytes: usize,
    /// Events one principal's task logs keep across shards, in the in-memory store: its
    /// share of `max_total_events` (`tasks.principal_event_percent`).
    pub principal_events: usize,
    /// Payload bytes of them: the same share of `max_total_bytes`.
    pub principal_bytes: usize,
}

impl Retention {
    /// Sets the principal's share to `percent` of the store-wide budget.
    pub fn with_principal_share(mut self, percent: usize) -> Self {
        let share = |total: usize| {
            let share = u128::from(total as u64) * percent.min(100) as u128 / 100;
            usize::try_from(share).unwrap_or(usize::MAX).max(1)
        };
        self.principal_events = share(self.max_total_events);
        self.principal_bytes = share(self.max_total_bytes);
        self
    }
}

impl Default for Retention {
    /// The `[sse]` defaults.
    fn default() -> Self {
        let sse = crate::config::SseConfig::default();
        Self {
            enabled: sse.enable_replay,
            event_ttl: sse.event_ttl.get(),
            replay_window: sse.replay_window.get(),
            max_session_events: sse.max_session_events.get(),
            max_session_bytes: sse.max_session_bytes,
            max_tasks: crate::config::TasksConfig::default().max_tasks.get(),
            max_total_events: sse.max_total_events.get(),
            max_total_bytes: sse.max_total_bytes.get(),
            principal_events: usize::MAX,
            principal_bytes: usize::MAX,
        }
        .with_principal_share(
            crate::config::TasksConfig::default()
                .principal_event_percent
                .get(),
        )
    }
}

/// What the store holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Occupancy {
    /// Sessions it keeps events for.
    pub sessions: u64,
    /// Events retained.
    pub events: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// What a sweep removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Events dropped for age.
    pub expired_events: usize,
    /// Finished streams whose last event expired.
    pub dropped_streams: usize,
}

/// Why the store refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The stream was never opened, or was forgotten or expired.
    #[error("unknown or expired stream")]
    UnknownStream,
    /// The position is past the end of the stream: the id was not issued by us.
    #[error("position {0} is beyond the end of the stream")]
    FuturePosition(u64),
    /// The stream already ended; nothing more may be appended.
    #[error("stream already completed")]
    StreamCompleted,
    /// The backend failed (I/O, connection); the message says how.
    #[error("event store backend failed: {0}")]
    Backend(&'static str),
    /// `tasks.max_tasks` records are stored already.
    #[error("too many tasks are stored")]
    TooManyTasks,
    /// The principal creating a record holds its quota's `max` live ones already
    /// (`tasks.max_per_principal`).
    #[error("the principal holds tasks.max_per_principal tasks")]
    PrincipalFull,
}

/// What a new record counts against: `max` live records per `principal`
/// (`tasks.max_per_principal`), across every shard and replica sharing the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quota {
    /// Who creates it: the `[auth]` owner, or the client's address without `[auth]`.
    pub principal: String,
    /// Most live records it may hold.
    pub max: usize,
}

/// A storage backend for events. All methods take `&mut self`: the store actor owns the
/// backend and serializes access, so a backend needs no locking of its own.
pub trait EventStore: Send + Default + 'static {
    /// Registers a live session (idempotent); its streams may then be opened.
    fn open_session(&mut self, session: SessionId) -> impl Future<Output = ()> + Send;

    /// [`EventStore::open_session`] of a task's log, whose events count against
    /// `principal`'s share of the store-wide budget (in memory; a store without one
    /// just opens the session).
    fn open_task_log(
        &mut self,
        session: SessionId,
        principal: &str,
    ) -> impl Future<Output = ()> + Send {
        let _ = principal;
        self.open_session(session)
    }

    /// Creates stream `key` (idempotent) so that it can be resumed before its first event.
    /// Fails with [`StoreError::UnknownStream`] if the session is not open.
    fn open_stream(
        &mut self,
        key: StreamKey,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Stores `payload` as the next event of `key` (opening the stream if needed; the
    /// session must be open) and
    /// returns it with its id. `last` marks the final event; later appends fail. A
    /// `nonce` among the stream's recent appends is a re-send: nothing is stored and the
    /// first append's event comes back with `duplicate` set.
    fn append(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> impl Future<Output = Result<Appended, StoreError>> + Send;

    /// Ends stream `key` without a final event (its request was cancelled): nothing more
    /// may be appended and a resume replays what there is, then closes.
    fn complete_stream(&mut self, key: StreamKey) -> impl Future<Output = ()> + Send;

    /// A client resumes stream `key` from position `at`, past its end: the store lost the
    /// events up to it (a Redis failover to a replica that had not copied them). Raises
    /// the end to `at`, so those positions are never issued again and the client follows
    /// on from where it was. [`StoreError::FuturePosition`] where nothing can have been
    /// lost (the memory store: the id was never issued), or the stream is complete or
    /// unknown.
    fn adopt_position(
        &mut self,
        key: StreamKey,
        at: u64,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = key;
        async move { Err(StoreError::FuturePosition(at)) }
    }

    /// [`EventStore::open_stream`] then [`EventStore::replay_page`]; a backend that can
    /// do both in one step (one round trip to Redis) overrides it.
    fn open_and_replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> impl Future<Output = Result<Replay, StoreError>> + Send {
        async move {
            self.open_stream(key).await?;
            self.replay_page(key, after, max).await
        }
    }

    /// Events of `key` strictly after position `after`, oldest first, at most `max` of
    /// them: when fewer than the stream holds, the last one returned is before
    /// [`Replay::position`] and the rest is read by asking again after it. With
    /// `after = None` nothing is replayed; only the stream's current end is reported.
    fn replay_page(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> impl Future<Output = Result<Replay, StoreError>> + Send;

    /// Every event of `key` strictly after `after` ([`EventStore::replay_page`] without a
    /// bound).
    fn replay_after(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
    ) -> impl Future<Output = Result<Replay, StoreError>> + Send {
        self.replay_page(key, after, usize::MAX)
    }

    /// Drops everything of `session`.
    fn forget_session(&mut self, session: SessionId) -> impl Future<Output = ()> + Send;

    /// Stores record `id` (a task's, an execution's, a cancel mark: bytes opaque to the
    /// store), replacing any earlier one, for `ttl` from now. Resolves once it is durable: any process then reads it.
    fn put_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// [`EventStore::put_record`] of a record counted against `quota` for as long as it
    /// lives: refused with [`StoreError::PrincipalFull`] when the principal holds
    /// `quota.max` live records already (an `id` it holds already is a rewrite, not a new
    /// one). Released when the record expires or is deleted.
    fn create_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        quota: &Quota,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Drops record `id` (counted against `principal`'s quota, if it was created with
    /// one), giving its place back.
    fn delete_record(
        &mut self,
        id: &str,
        principal: Option<&str>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Record `id`, unless it never existed or its time ran out.
    fn get_record(
        &mut self,
        id: &str,
    ) -> impl Future<Output = Result<Option<Bytes>, StoreError>> + Send;

    /// Drops expired events and finished streams that have nothing left.
    fn sweep(&mut self) -> impl Future<Output = SweepStats> + Send;

    /// The last position of each stream of `session`.
    fn positions(&self, session: SessionId) -> impl Future<Output = Vec<(StreamNo, u64)>> + Send;

    /// Configures retention; called once before use.
    fn set_retention(&mut self, retention: Retention);

    /// What the store holds, when it can tell without a round trip (in memory); `None`
    /// for a shared backend.
    fn occupancy(&self) -> Option<Occupancy> {
        None
    }

    /// Up to `limit` of `session`'s streams still open (not completed), newest first, with
    /// their last positions, when the store can tell without a round trip (in memory);
    /// empty for a shared backend.
    fn open_streams(&self, session: SessionId, limit: usize) -> Vec<(StreamNo, u64)> {
        let _ = (session, limit);
        Vec::new()
    }

    /// Starts hearing of events other processes store on `key` (a shared backend); the
    /// store actor calls it before replaying, so nothing falls between. A backend no other
    /// process writes to has nothing to do.
    fn follow(&mut self, key: StreamKey) -> impl Future<Output = Result<(), StoreError>> + Send {
        let _ = key;
        async { Ok(()) }
    }

    /// Tells other processes that a connection here now follows `key`, so theirs closes
    /// (newest connection wins). True if the announcement will come back through this
    /// process's own feed (which marks later "superseded" news as current).
    fn announce(&mut self, key: StreamKey) -> impl Future<Output = bool> + Send {
        let _ = key;
        async { false }
    }

    /// Tells connections other processes hold on `key` to close (the stream ended, or the
    /// handler asked for SSE polling). True if told.
    fn tell_followers(
        &mut self,
        key: StreamKey,
        control: Control,
    ) -> impl Future<Output = bool> + Send {
        let _ = (key, control);
        async { false }
    }

    /// Stops hearing of `key`'s events.
    fn unfollow(&mut self, key: StreamKey) -> impl Future<Output = ()> + Send {
        let _ = key;
        async {}
    }

    /// Other processes write to this backend too (a shared store): the actor then catches
    /// up from it whenever its feed of their events may have missed some.
    fn is_shared(&self) -> bool {
        false
    }

    /// Whether the feed of other processes' events is connected (after it was lost).
    fn feed_ready(&mut self) -> impl Future<Output = bool> + Send {
        async { true }
    }

    /// Evicts what this shard should of a store over its store-wide budget (see
    /// [`MemoryStore::trim`]); asked by another shard that found this one holding older
    /// events. A backend with no store-wide budget of its own (Redis) has nothing to do.
    fn trim(&mut self) {}

    /// The shard that should trim next, when the last append, sweep or trim left the
    /// store over budget with older events in that shard; taken once.
    fn take_trim_elsewhere(&mut self) -> Option<usize> {
        None
    }

    /// Counts an event delivered live because [`EventStore::append`] failed with
    /// [`StoreError::Backend`].
    fn note_unstored(&self) {}

    /// [`EventStore::append`] of a run of consecutive events of `key`, in order, as a
    /// future that does not borrow the store, for a backend that orders concurrent
    /// appends itself (Redis assigns positions atomically): the store actor then keeps
    /// one run per stream in flight, while the next run gathers (group commit), instead
    /// of one round trip per event. The future yields one result per event. `None` (the
    /// default): the actor appends inline, in mailbox order.
    fn append_detached(&self, key: StreamKey, events: &[NewEvent]) -> Option<DetachedAppend> {
        let _ = (key, events);
        None
    }

    /// Whether [`EventStore::append_detached`] gives a future (checked first, so that an
    /// inline backend's appends build no run).
    fn detaches_appends(&self) -> bool {
        false
    }
}

/// An append that was sent but not confirmed (a timeout or a lost connection): it may or
/// may not be stored. The store actor delivers it live and remembers it, so that if it
/// turns up stored in a later catch-up it is not delivered twice.
pub const UNCONFIRMED: StoreError = StoreError::Backend("the append was sent but not confirmed");

/// What [`EventStore::tell_followers`] tells other processes' connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// The stream ended without a final event (its request was cancelled).
    Completed,
    /// Close with a `retry:` hint; the client resumes (SSE polling).
    Disconnect,
}

/// A run of appends running apart from the store (see [`EventStore::append_detached`]):
/// one result per event, in order.
pub type DetachedAppend =
    std::pin::Pin<Box<dyn Future<Output = Vec<Result<Appended, StoreError>>> + Send + 'static>>;

/// One event of a run given to [`EventStore::append_detached`].
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// Serialized JSON-RPC message.
    pub payload: Bytes,
    /// Final event of the stream.
    pub last: bool,
    /// Identifies this append across a re-send (see [`EventStore::append`]).
    pub nonce: u64,
    /// The stream's last position its writer saw stored (0: none). Those positions were
    /// issued once: if the store no longer has them (a Redis failover to a replica that
    /// had not copied them), it issues the next after them, so no id is reused and a
    /// replay across them reports them missing.
    pub after: u64,
}
