//! The store actor, one per shard: owns its shard's backend (lent by the supervisor, so
//! events survive a crash of this actor), enforces retention with a periodic sweep, and
//! forwards every stored event to the connection subscribed to its stream. A session's
//! streams all live in one shard, so each stream's order is one actor's order.
//!
//! - [`tables`]: the tables it keeps across restarts, and forwarding in order;
//! - `subscribers`: the connections following one stream, active and parked;
//! - [`subscribe`]: a connection following a stream (replay, then live);
//! - [`catch_up`]: reading back what a lost pub/sub feed missed (Redis);
//! - [`group_commit`]: one run of appends in flight per stream (Redis);
//! - [`handle`]: [`EventStoreHandle`], the only code that builds [`StoreMsg`];
//! - [`writer`]: a stream's events with a few appends in flight.
//!
//! Subscribing and replaying are one message, so no event can fall between the replay and
//! the live feed: everything stored before the subscription is in the replay, everything
//! after is forwarded. Each stream has at most one subscriber, so a message is never sent
//! on two connections.

mod catch_up;
pub mod group_commit;
pub mod handle;
mod subscribe;
mod subscribers;
pub mod tables;
pub mod writer;

use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

pub use handle::{EventStoreHandle, StoreCallError};
pub use tables::StoreTables;
pub use writer::StreamWriter;

use super::feed::{self, FeedEnd};
use super::redis::StreamNews;
use super::redis::channel::{PendingLoss, QueuedPush};
use super::{
    Appended, Control, EventStore, NewEvent, Occupancy, Replay, Retention, StoreError, UNCONFIRMED,
};
use crate::ids::{EventId, SessionId, StreamKey, StreamNo};
use crate::rt::heir::Lent;
use crate::telemetry::metrics::{ActorName, MAILBOX_DEPTH};
use catch_up::CatchUp;
use group_commit::{QueuedAppend, Runs};

/// Messages of the store actor. Built only by [`EventStoreHandle`] (and the actor's own
/// timers and detached appends).
#[derive(Debug)]
pub enum StoreMsg {
    /// Store an event and forward it to the stream's subscriber.
    Append {
        /// Target stream.
        key: StreamKey,
        /// Serialized JSON-RPC message.
        payload: Bytes,
        /// Final event of the stream.
        last: bool,
        /// Identifies this append across a re-send (see [`EventStore::append`]).
        nonce: u64,
        /// The last position the writer saw stored (see [`NewEvent::after`]).
        after: u64,
        /// Gets the stored event's id; `None` if the backend is down and the event was
        /// only delivered live.
        reply: RpcReplyPort<Result<Option<EventId>, StoreError>>,
    },
    /// A run of detached appends finished (see [`group_commit`]): forward each event,
    /// answer each caller, start the next run.
    Stored {
        /// Target stream.
        key: StreamKey,
        /// The appends of the run, in order.
        run: Vec<QueuedAppend>,
        /// What the backend said, one per append.
        results: Vec<Result<Appended, StoreError>>,
    },
    /// Open a stream (if new), replay after a position and become its live subscriber.
    /// The replay is the first [`crate::event_store::REPLAY_PAGE`] events; the connection
    /// reads the rest with [`StoreMsg::ReadPage`] as its client takes them.
    Subscribe {
        /// Stream to follow.
        key: StreamKey,
        /// Replay after this position; `None`: live only.
        after: Option<u64>,
        /// Create the stream if unknown (a new POST or standalone stream).
        create: bool,
        /// The connection that will receive live events.
        subscriber: feed::Subscriber,
        /// The replay.
        reply: RpcReplyPort<Result<Replay, StoreError>>,
    },
    /// The next page of a replay: up to the given number of events (at most
    /// [`crate::event_store::REPLAY_PAGE`]) of a stream after a position.
    ReadPage(
        StreamKey,
        u64,
        usize,
        RpcReplyPort<Result<Replay, StoreError>>,
    ),
    /// Stop forwarding to `subscriber` (if it is still the stream's subscriber).
    Unsubscribe {
        /// The stream.
        key: StreamKey,
        /// The connection leaving.
        subscriber: ActorId,
    },
    /// End a stream without a final event (its request was cancelled) and close its
    /// connection.
    Complete(StreamKey, RpcReplyPort<()>),
    /// Close the connection subscribed to a stream (the stream itself goes on); replies
    /// whether one was open. Sent after the caller's appends, so the connection writes
    /// them first.
    Disconnect(StreamKey, RpcReplyPort<bool>),
    /// A session was created: its streams may be opened.
    OpenSession(SessionId),
    /// A task's log was created, counting against its principal's share.
    OpenTaskLog(SessionId, String),
    /// Forget everything of a session and close its connections.
    ForgetSession(SessionId),
    /// Last positions of a session's streams.
    Positions(SessionId, RpcReplyPort<Vec<(StreamNo, u64)>>),
    /// What the store holds (in memory only).
    Occupancy(RpcReplyPort<Option<Occupancy>>),
    /// A session's open streams, newest first, at most this many (in memory only).
    OpenStreams(SessionId, usize, RpcReplyPort<Vec<(StreamNo, u64)>>),
    /// Store a record (a task's or an execution's) for a time (see
    /// [`EventStore::put_record`]).
    PutRecord {
        /// The task's id.
        id: String,
        /// Its record.
        record: Bytes,
        /// How long to keep it.
        ttl: std::time::Duration,
        /// A new task's: what it counts against (see [`EventStore::create_record`]).
        quota: Option<super::Quota>,
        /// Answered once it is durable.
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Read a record.
    GetRecord(String, RpcReplyPort<Result<Option<Bytes>, StoreError>>),
    /// Drop a record, giving its place in its principal's quota back (see
    /// [`EventStore::delete_record`]).
    DeleteRecord {
        /// The record's id.
        id: String,
        /// Whose quota it counts against.
        principal: Option<String>,
        /// Answered once it is gone.
        reply: RpcReplyPort<Result<(), StoreError>>,
    },
    /// Timer: drop expired events.
    Sweep,
    /// Another replica stored an event on a stream, or took over its connection (from the
    /// pub/sub feed). Holds its place in the bounded push queue until handled.
    Remote(StreamKey, StreamNews, QueuedPush),
    /// The pub/sub feed lost messages (connection lost, or too many queued): once it is
    /// back, read what the followed streams missed from the store.
    FeedLost(Option<PendingLoss>),
    /// Timer: try to catch up after [`StoreMsg::FeedLost`].
    Resync,
    /// Another shard found the store over its store-wide budget with older events here:
    /// evict them (the number counts the shards that handed the work on so far).
    Trim(usize),
    /// Fault injection for supervision tests: panic inside the actor.
    InjectPanic,
}

impl StoreMsg {
    fn name(&self) -> &'static str {
        match self {
            Self::Append { .. } => "append",
            Self::Stored { .. } => "stored",
            Self::Subscribe { .. } => "subscribe",
            Self::ReadPage(..) => "read_page",
            Self::Unsubscribe { .. } => "unsubscribe",
            Self::Disconnect(..) => "disconnect",
            Self::Complete(..) => "complete",
            Self::OpenSession(..) => "open_session",
            Self::OpenTaskLog(..) => "open_task_log",
            Self::ForgetSession(..) => "forget_session",
            Self::Positions(..) => "positions",
            Self::Occupancy(..) => "occupancy",
            Self::OpenStreams(..) => "open_streams",
            Self::PutRecord { .. } => "put_record",
            Self::GetRecord(..) => "get_record",
            Self::DeleteRecord { .. } => "delete_record",
            Self::Sweep => "sweep",
            Self::Remote(..) => "remote",
            Self::FeedLost(..) => "feed_lost",
            Self::Resync => "resync",
            Self::Trim(..) => "trim",
            Self::InjectPanic => "inject_panic",
        }
    }
}

/// The store actor, generic over its backend.
#[derive(Debug)]
pub struct EventStoreActor<B> {
    _backend: std::marker::PhantomData<fn() -> B>,
}

impl<B> Default for EventStoreActor<B> {
    fn default() -> Self {
        Self {
            _backend: std::marker::PhantomData,
        }
    }
}

/// Start-up arguments of the store actor.
#[derive(Debug)]
pub struct StoreArgs<B: EventStore> {
    /// The tables, lent by the supervisor.
    pub tables: Lent<StoreTables<B>>,
    /// The rest, the same whatever the backend.
    pub config: ShardConfig,
}

/// What a shard's actor starts with besides its tables.
#[derive(Debug, Clone)]
pub struct ShardConfig {
    /// Retention limits.
    pub retention: Retention,
    /// Sweep period (`cleanup_interval`).
    pub cleanup_interval: Duration,
    /// Wait between attempts to catch up with a lost pub/sub feed (`store.retry_interval`).
    pub retry_interval: Duration,
    /// Every shard of the store, this one included: where trimming is handed on.
    pub shards: EventStoreHandle,
}

/// Running state of the store actor.
#[derive(Debug)]
pub struct StoreState<B: EventStore> {
    tables: Lent<StoreTables<B>>,
    sweep: tokio::task::JoinHandle<()>,
    catch_up: CatchUp,
    shards: EventStoreHandle,
    runs: Runs,
}

impl<B: EventStore> Actor for EventStoreActor<B> {
    type Msg = StoreMsg;
    type State = StoreState<B>;
    type Arguments = StoreArgs<B>;

    async fn pre_start(
        &self,
        myself: ActorRef<StoreMsg>,
        args: StoreArgs<B>,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut tables = args.tables;
        tables.backend.set_retention(args.config.retention);
        // The sweep is a message, so it is serialized with appends and shows in traces.
        let sweep = myself.send_interval(args.config.cleanup_interval, || StoreMsg::Sweep);
        if tables.backend.is_shared() {
            // Pushes queued for a previous incarnation died with its mailbox: read back
            // what the followed streams missed meanwhile.
            let _ = myself.send_message(StoreMsg::FeedLost(None));
        }
        Ok(StoreState {
            tables,
            sweep,
            catch_up: CatchUp::new(args.config.retry_interval),
            shards: args.config.shards,
            runs: Runs::default(),
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<StoreMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.sweep.abort();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StoreMsg>,
        msg: StoreMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Counted in by the handle (its slot); the actor's own timers and the results of
        // its detached appends never were.
        if !matches!(
            msg,
            StoreMsg::Stored { .. } | StoreMsg::Sweep | StoreMsg::Resync | StoreMsg::FeedLost(_)
        ) {
            MAILBOX_DEPTH.get(ActorName::EventStore).dec_to_zero();
        }
        let span = tracing::debug_span!("event_store.handle", msg = msg.name());
        let hops = match msg {
            StoreMsg::Trim(hops) => hops,
            _ => 0,
        };
        // An append, the message of every event, runs in this future; the others, rarer
        // and larger (subscribe, catch-up, gap fills), in a box of their own, so the
        // future ractor moves for each message stays small (it was a sixth of a shard's
        // time per append, in memcpy). The fields are taken apart here: passing the
        // variant's fields as one struct cost 500 more instructions per append
        // (callgrind, `benches/ceilings.rs`).
        match msg {
            StoreMsg::Append {
                key,
                payload,
                last,
                nonce,
                after,
                reply,
            } => {
                let append_msg = QueuedAppend::new(payload, last, nonce, after, reply);
                append(state, &myself, key, append_msg)
                    .instrument(span)
                    .await
            }
            msg => Box::pin(handle(msg, state, &myself).instrument(span)).await,
        }
        // An append, a sweep or a trim may have left the store over budget with older
        // events in another shard: that shard evicts them. A hand-off always evicts or
        // corrects a stale published age, so a few hops per shard end it.
        if let Some(next) = state.tables.backend.take_trim_elsewhere()
            && hops < 2 * state.shards.shards()
        {
            state.shards.trim(next, hops + 1);
        }
        Ok(())
    }
}

/// Every message but an append (the actor's `handle` runs those in its own future).
async fn handle<B: EventStore>(
    msg: StoreMsg,
    state: &mut StoreState<B>,
    myself: &ActorRef<StoreMsg>,
) {
    match msg {
        StoreMsg::Stored { key, run, results } => {
            stored(state, myself, key, run, results).await;
        }
        msg => other(msg, state, myself).await,
    }
}

/// Every message but the appends' (which need the whole state: the runs in flight).
async fn other<B: EventStore>(
    msg: StoreMsg,
    state: &mut StoreState<B>,
    myself: &ActorRef<StoreMsg>,
) {
    let tables = &mut *state.tables;
    match msg {
        // Handled by the actor's `handle` (an append) and by `handle` (its result).
        StoreMsg::Append { .. } | StoreMsg::Stored { .. } => {}
        StoreMsg::Subscribe {
            key,
            after,
            create,
            subscriber,
            reply,
        } => {
            let request = subscribe::Request {
                key,
                after,
                create,
                subscriber,
            };
            subscribe::subscribe(tables, &mut state.catch_up, myself, request, reply).await;
        }
        StoreMsg::ReadPage(key, after, most, reply) => {
            let most = most.clamp(1, crate::event_store::REPLAY_PAGE);
            let page = tables.backend.replay_page(key, Some(after), most).await;
            let _ = reply.send(page);
        }
        StoreMsg::Unsubscribe { key, subscriber } => tables.unsubscribe(key, subscriber).await,
        StoreMsg::Complete(key, reply) => {
            tables.backend.complete_stream(key).await;
            tables.close_subscriber(key, FeedEnd::Completed).await;
            // A connection another replica holds on the stream must not wait either.
            tables.backend.tell_followers(key, Control::Completed).await;
            let _ = reply.send(());
        }
        StoreMsg::Disconnect(key, reply) => {
            let open = tables.close_subscriber(key, FeedEnd::Polling).await;
            let told = tables
                .backend
                .tell_followers(key, Control::Disconnect)
                .await;
            let _ = reply.send(open || told);
        }
        StoreMsg::OpenSession(session) => tables.backend.open_session(session).await,
        StoreMsg::OpenTaskLog(session, principal) => {
            tables.backend.open_task_log(session, &principal).await;
        }
        StoreMsg::ForgetSession(session) => {
            tables.backend.forget_session(session).await;
            tables.close_session(session).await;
        }
        StoreMsg::Remote(key, news, _queued) => remote(tables, key, news).await,
        StoreMsg::FeedLost(_pending) => state.catch_up.schedule(myself),
        StoreMsg::Resync => state.catch_up.run(tables, myself).await,
        StoreMsg::Positions(session, reply) => {
            let _ = reply.send(tables.backend.positions(session).await);
        }
        StoreMsg::Occupancy(reply) => {
            let _ = reply.send(tables.backend.occupancy());
        }
        StoreMsg::OpenStreams(session, limit, reply) => {
            let _ = reply.send(tables.backend.open_streams(session, limit));
        }
        // Inline, in mailbox order: a task's writes land in the order its runner made
        // them. Tasks are written a few times in their life, so the round trip to Redis
        // here is rare next to appends.
        StoreMsg::PutRecord {
            id,
            record,
            ttl,
            quota,
            reply,
        } => {
            let stored = match quota {
                Some(quota) => tables.backend.create_record(&id, record, ttl, &quota).await,
                None => tables.backend.put_record(&id, record, ttl).await,
            };
            let _ = reply.send(stored);
        }
        StoreMsg::GetRecord(id, reply) => {
            let _ = reply.send(tables.backend.get_record(&id).await);
        }
        StoreMsg::DeleteRecord {
            id,
            principal,
            reply,
        } => {
            let _ = reply.send(
                tables
                    .backend
                    .delete_record(&id, principal.as_deref())
                    .await,
            );
        }
        StoreMsg::Sweep => {
            let stats = tables.backend.sweep().await;
            if stats.expired_events > 0 || stats.dropped_streams > 0 {
                tracing::debug!(
                    expired_events = stats.expired_events,
                    dropped_streams = stats.dropped_streams,
                    "event store sweep"
                );
            }
        }
        StoreMsg::Trim(_) => tables.backend.trim(),
        StoreMsg::InjectPanic => panic!("fault injection: event store"),
    }
}

/// Stores an event and forwards it; if the backend is down, delivers it live only. A
/// backend that orders concurrent appends itself gets the append detached, gathered with
/// the stream's other appends into runs ([`group_commit`]).
async fn append<B: EventStore>(
    state: &mut StoreState<B>,
    myself: &ActorRef<StoreMsg>,
    key: StreamKey,
    append: QueuedAppend,
) {
    if !state.tables.backend.detaches_appends() {
        append_inline(&mut state.tables, key, [append]).await;
        return;
    }
    let Some(append) = state.runs.gather(key, append) else {
        return;
    };
    if let Err(run) = state
        .runs
        .start(&state.tables.backend, myself, key, vec![append])
    {
        append_inline(&mut state.tables, key, run).await;
    }
}

/// Appends `run` one event after the other, waiting for each.
async fn append_inline<B: EventStore>(
    tables: &mut StoreTables<B>,
    key: StreamKey,
    run: impl IntoIterator<Item = QueuedAppend>,
) {
    for QueuedAppend { event, reply } in run {
        let NewEvent {
            payload,
            last,
            nonce,
            ..
        } = event;
        let result = tables
            .backend
            .append(key, payload.clone(), last, nonce)
            .await;
        let result = settle(tables, key, payload, last, result).await;
        let _ = reply.send(result);
    }
}

/// A run of `key` returned: forwards its events and answers their callers in order, then
/// starts the run gathered meanwhile.
async fn stored<B: EventStore>(
    state: &mut StoreState<B>,
    myself: &ActorRef<StoreMsg>,
    key: StreamKey,
    run: Vec<QueuedAppend>,
    results: Vec<Result<Appended, StoreError>>,
) {
    for (QueuedAppend { event, reply }, result) in group_commit::settled(run, results) {
        let result = settle(&mut state.tables, key, event.payload, event.last, result).await;
        let _ = reply.send(result);
    }
    while let Some(run) = state.runs.next(key) {
        match state.runs.start(&state.tables.backend, myself, key, run) {
            Ok(()) => return,
            Err(run) => append_inline(&mut state.tables, key, run).await,
        }
    }
}

/// Forwards what an append stored, or delivers it live if it could not be stored.
async fn settle<B: EventStore>(
    tables: &mut StoreTables<B>,
    key: StreamKey,
    payload: Bytes,
    last: bool,
    result: Result<Appended, StoreError>,
) -> Result<Option<EventId>, StoreError> {
    match result {
        // A duplicate is forwarded too: if the crash that caused the re-send fell between
        // storing and forwarding, this is its only delivery; otherwise it is skipped by
        // position.
        Ok(Appended { event, duplicate }) => {
            if !duplicate {
                crate::telemetry::metrics::EVENTS_APPENDED.inc();
            }
            let id = event.id;
            tables.forward(key, event).await;
            Ok(Some(id))
        }
        // Unknown to a shared backend while a connection here still follows the stream:
        // the backend lost its data (a Redis restarted without persistence). An ended
        // session has no follower left (ForgetSession closed them), so this is not one.
        Err(e @ (StoreError::Backend(_) | StoreError::UnknownStream))
            if e != StoreError::UnknownStream || tables.subscribers.contains_key(&key) =>
        {
            tables.backend.note_unstored();
            tracing::debug!(stream = ?key, why = %e, stored = false, "event not stored; delivered live only");
            // Only an append that reached Redis unconfirmed can turn up stored later.
            tables
                .deliver_unstored(key, payload, last, e == UNCONFIRMED)
                .await;
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// News from another replica about a stream this replica may follow.
async fn remote<B: EventStore>(tables: &mut StoreTables<B>, key: StreamKey, news: StreamNews) {
    match news {
        StreamNews::Stored(event) => tables.forward(key, event).await,
        StreamNews::Announced => {
            if let Some(sub) = tables.subscribers.get_mut(&key) {
                sub.awaiting_announce = false;
            }
        }
        StreamNews::Superseded => {
            // Published before our own announcement came back: it is about an older
            // connection than ours.
            if tables
                .subscribers
                .get(&key)
                .is_some_and(|sub| !sub.awaiting_announce)
            {
                tables.supersede(key).await;
            }
        }
        StreamNews::Completed => {
            tables.close_subscriber(key, FeedEnd::Completed).await;
        }
        StreamNews::Disconnect => {
            tables.close_subscriber(key, FeedEnd::Polling).await;
        }
    }
}
