//! The store actor: owns the backend (lent by the supervisor, so events survive a crash of
//! this actor), enforces retention with a periodic sweep, and forwards every stored event to
//! the stream actor subscribed to its stream.
//!
//! Subscribing and replaying are one message, so no event can fall between the replay and
//! the live feed: everything stored before the subscription is in the replay, everything
//! after is forwarded. Each stream has at most one subscriber, so a message is never sent
//! on two connections.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use super::{
    Appended, Control, Event, EventId, EventStore, Replay, ReplayOutcome, Retention, StoreError,
    StreamKey, StreamNo,
};
use crate::cluster::Leases;
use crate::cluster::bus::{PushQueue, StreamNews};
use crate::session::SessionId;
use crate::stream::{CloseReason, StreamMsg};

use crate::supervisor::heir::Lent;
use crate::supervisor::registry::{Slot, SlotError};

/// Longest a caller waits for the store to answer.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// What the store actor keeps across its own restarts: the backend and who is listening.
#[derive(Debug, Default)]
pub struct StoreTables<B> {
    /// The events.
    pub backend: B,
    subscribers: HashMap<StreamKey, Subscriber>,
}

/// The local connection following a stream.
#[derive(Debug)]
struct Subscriber {
    actor: ActorRef<StreamMsg>,
    /// Position of the last event it was given (by replay or forwarding): events at or
    /// before it are duplicates, events after the next one mean some went missing.
    forwarded: u64,
    /// `forwarded` is real. False for a live-only stream opened while the backend was
    /// down: its position is taken from the first event heard, with no gap filled (the
    /// client asked for live events, not the stream's history).
    position_known: bool,
    /// Nothing more to do to hear of other processes' events on this stream. False after
    /// a failed `follow`; the catch-up retries it.
    followed: bool,
    /// Subscribed to the backend's feed for this stream (so leaving it unsubscribes).
    on_feed: bool,
    /// Our announcement that we follow the stream has not come back yet: a "superseded"
    /// from another replica heard before it was published before ours, so it is stale.
    awaiting_announce: bool,
    /// Hashes of payloads delivered live without being stored since the last stored
    /// event: one whose append failed with an unknown outcome may turn up stored in a
    /// later gap fill, and is not delivered twice.
    unstored: VecDeque<u64>,
}

impl Subscriber {
    fn new(actor: ActorRef<StreamMsg>, forwarded: u64) -> Self {
        Self {
            actor,
            forwarded,
            position_known: true,
            followed: true,
            on_feed: true,
            awaiting_announce: false,
            unstored: VecDeque::new(),
        }
    }
}

/// Most unstored payloads remembered per connection (see [`Subscriber::unstored`]).
const UNSTORED_MEMORY: usize = 256;

fn payload_hash(payload: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}

impl<B: EventStore> StoreTables<B> {
    /// Tables around a configured backend.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            subscribers: HashMap::new(),
        }
    }
}

/// Messages of the store actor. Built only by [`EventStoreHandle`].
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
        /// Gets the stored event's id; `None` if the backend is down and the event was
        /// only delivered live.
        reply: RpcReplyPort<Result<Option<EventId>, StoreError>>,
    },
    /// A detached append finished (see [`EventStore::append_detached`]): forward it, then
    /// answer the caller.
    Stored {
        /// Target stream.
        key: StreamKey,
        /// What was appended.
        payload: Bytes,
        /// Final event of the stream.
        last: bool,
        /// What the backend said.
        result: Result<Appended, StoreError>,
        /// The caller of the original [`StoreMsg::Append`].
        reply: RpcReplyPort<Result<Option<EventId>, StoreError>>,
    },
    /// Open a stream (if new), replay after a position and become its live subscriber.
    Subscribe {
        /// Stream to follow.
        key: StreamKey,
        /// Replay after this position; `None`: live only.
        after: Option<u64>,
        /// Create the stream if unknown (a new POST or standalone stream).
        create: bool,
        /// The stream actor that will receive live events.
        subscriber: ActorRef<StreamMsg>,
        /// The replay.
        reply: RpcReplyPort<Result<Replay, StoreError>>,
    },
    /// Stop forwarding to `subscriber` (if it is still the stream's subscriber).
    Unsubscribe {
        /// The stream.
        key: StreamKey,
        /// The actor leaving.
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
    OpenSession(SessionId, RpcReplyPort<()>),
    /// Forget everything of a session and close its connections.
    ForgetSession(SessionId, RpcReplyPort<()>),
    /// Last positions of a session's streams.
    Positions(SessionId, RpcReplyPort<Vec<(StreamNo, u64)>>),
    /// Timer: drop expired events.
    Sweep,
    /// Another replica stored an event on a stream, or took over its connection (from the
    /// pub/sub bus).
    Remote(StreamKey, StreamNews),
    /// The pub/sub feed lost messages (connection lost, or too many queued): once it is
    /// back, read what the followed streams missed from the store.
    FeedLost,
    /// Timer: try to catch up after [`StoreMsg::FeedLost`].
    Resync,
    /// These replicas' leases lapsed (from the lease keeper): answer their requests.
    Reap(Vec<u64>),
    /// Fault injection for supervision tests: panic inside the actor.
    InjectPanic,
}

impl StoreMsg {
    fn name(&self) -> &'static str {
        match self {
            Self::Append { .. } => "append",
            Self::Stored { .. } => "stored",
            Self::Subscribe { .. } => "subscribe",
            Self::Unsubscribe { .. } => "unsubscribe",
            Self::Disconnect(..) => "disconnect",
            Self::Complete(..) => "complete",
            Self::OpenSession(..) => "open_session",
            Self::ForgetSession(..) => "forget_session",
            Self::Positions(..) => "positions",
            Self::Sweep => "sweep",
            Self::Remote(..) => "remote",
            Self::FeedLost => "feed_lost",
            Self::Resync => "resync",
            Self::Reap(..) => "reap",
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
    /// Retention limits.
    pub retention: Retention,
    /// Sweep period (`cleanup_interval`).
    pub cleanup_interval: Duration,
    /// Wait between attempts to catch up with a lost pub/sub feed (`store.retry_interval`).
    pub retry_interval: Duration,
    /// Leases on running requests (Redis only).
    pub leases: Option<Leases>,
    /// Pushes queued for this actor by the pub/sub bus (counted down as they are handled).
    pub queued: Arc<PushQueue>,
}

/// Running state of the store actor.
#[derive(Debug)]
pub struct StoreState<B: EventStore> {
    tables: Lent<StoreTables<B>>,
    timers: Vec<tokio::task::JoinHandle<()>>,
    retry_interval: Duration,
    leases: Option<Leases>,
    queued: Arc<PushQueue>,
    /// A catch-up is scheduled.
    resyncing: bool,
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
        tables.backend.set_retention(args.retention);
        // The sweep is a message, so it is serialized with appends and shows in traces.
        let mut timers = vec![myself.send_interval(args.cleanup_interval, || StoreMsg::Sweep)];
        if let Some(leases) = &args.leases {
            // Hold the lease before this replica takes any request (the listener starts
            // after the store); the keeper renews it from here on.
            if let Err(e) = leases.renew().await {
                tracing::warn!(error = %e, "could not take this replica's lease yet");
            }
            timers.push(tokio::spawn(keep_lease(leases.clone(), myself.clone())));
            // Pushes queued for a previous incarnation died with its mailbox: count afresh,
            // and read back what the followed streams missed meanwhile.
            args.queued.reset();
            let _ = myself.send_message(StoreMsg::FeedLost);
        }
        Ok(StoreState {
            tables,
            timers,
            retry_interval: args.retry_interval,
            leases: args.leases,
            queued: args.queued,
            resyncing: false,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<StoreMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for timer in &state.timers {
            timer.abort();
        }
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<StoreMsg>,
        msg: StoreMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("event_store.handle", msg = msg.name());
        handle(msg, state, &myself).instrument(span).await;
        Ok(())
    }
}

/// Gives `event` to the local connection following its stream, in order: a duplicate is
/// skipped, and a gap (an event of another replica not heard of yet) is filled from the
/// store first.
async fn forward<B: EventStore>(tables: &mut StoreTables<B>, key: StreamKey, event: Event) {
    let Some(sub) = tables.subscribers.get_mut(&key) else {
        return;
    };
    let seq = event.id.seq;
    if !sub.position_known {
        sub.position_known = true;
        sub.forwarded = seq.saturating_sub(1);
    }
    let forwarded = sub.forwarded;
    if seq <= forwarded {
        return;
    }
    let mut batch = Vec::new();
    let mut skipped = 0;
    if seq > forwarded + 1 {
        match tables.backend.replay_after(key, Some(forwarded)).await {
            Ok(replay) if replay.outcome == ReplayOutcome::Complete => {
                let (events, removed) = already_delivered_removed(tables, key, replay.events);
                batch.extend(events);
                skipped = removed;
            }
            _ => {
                // The missing events cannot be read now: close with a retry hint, and the
                // client's resume reads them from the store.
                tracing::warn!(stream = ?key, forwarded, seq, "events missing from the live feed; the connection resumes from the store");
                close_subscriber(tables, key, CloseReason::Polling).await;
                return;
            }
        }
    }
    if batch.last().is_none_or(|e| e.id.seq < seq) {
        batch.push(event);
    }
    send_batch(tables, key, batch).await;
    // Caught up with what is stored: nothing delivered unstored can turn up any more.
    past_skipped(tables, key, skipped);
}

/// `events` (read back from the store) without those this connection already got live
/// when their append's outcome was unknown (see [`Subscriber::unstored`]).
/// Also returns the highest position removed, which the connection must move past once
/// the rest is sent.
fn already_delivered_removed<B: EventStore>(
    tables: &mut StoreTables<B>,
    key: StreamKey,
    mut events: Vec<Event>,
) -> (Vec<Event>, u64) {
    let mut skipped = 0;
    let Some(sub) = tables.subscribers.get_mut(&key) else {
        return (events, skipped);
    };
    if sub.unstored.is_empty() {
        return (events, skipped);
    }
    events.retain(|event| {
        let hash = payload_hash(&event.payload);
        match sub.unstored.iter().position(|h| *h == hash) {
            Some(i) => {
                sub.unstored.remove(i);
                skipped = skipped.max(event.id.seq);
                false
            }
            None => true,
        }
    });
    (events, skipped)
}

/// After a batch: past the events skipped as already delivered, and nothing unstored can
/// turn up any more.
fn past_skipped<B: EventStore>(tables: &mut StoreTables<B>, key: StreamKey, skipped: u64) {
    if let Some(sub) = tables.subscribers.get_mut(&key) {
        sub.forwarded = sub.forwarded.max(skipped);
        sub.unstored.clear();
    }
}

/// Sends events after the subscriber's position, in order.
async fn send_batch<B: EventStore>(tables: &mut StoreTables<B>, key: StreamKey, batch: Vec<Event>) {
    let Some(sub) = tables.subscribers.get_mut(&key) else {
        return;
    };
    let mut ended = false;
    for event in batch {
        if event.id.seq <= sub.forwarded {
            continue;
        }
        sub.forwarded = event.id.seq;
        let last = event.last;
        if sub.actor.send_message(StreamMsg::Deliver(event)).is_err() || last {
            ended = true;
            break;
        }
    }
    if ended {
        // Gone, or nothing more will be forwarded on this stream.
        drop_subscriber(tables, key).await;
    }
}

async fn drop_subscriber<B: EventStore>(tables: &mut StoreTables<B>, key: StreamKey) {
    if tables
        .subscribers
        .remove(&key)
        .is_some_and(|sub| sub.on_feed)
    {
        tables.backend.unfollow(key).await;
    }
}

async fn close_subscriber<B: EventStore>(
    tables: &mut StoreTables<B>,
    key: StreamKey,
    reason: CloseReason,
) -> bool {
    let open = tables
        .subscribers
        .get(&key)
        .is_some_and(|sub| sub.actor.send_message(StreamMsg::Close(reason)).is_ok());
    drop_subscriber(tables, key).await;
    open
}

/// Stores an event and forwards it; if the backend is down, delivers it live only.
async fn append<B: EventStore>(
    tables: &mut StoreTables<B>,
    key: StreamKey,
    payload: Bytes,
    last: bool,
    nonce: u64,
) -> Result<Option<EventId>, StoreError> {
    let result = tables
        .backend
        .append(key, payload.clone(), last, nonce)
        .await;
    settle(tables, key, payload, last, result).await
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
        Ok(Appended { event, .. }) => {
            let id = event.id;
            forward(tables, key, event).await;
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
            if let Some(sub) = tables.subscribers.get_mut(&key) {
                // Only an append that reached Redis unconfirmed can turn up stored later.
                if e == super::UNCONFIRMED {
                    if sub.unstored.len() == UNSTORED_MEMORY {
                        sub.unstored.pop_front();
                    }
                    sub.unstored.push_back(payload_hash(&payload));
                }
                if sub
                    .actor
                    .send_message(StreamMsg::DeliverUnstored(payload, last))
                    .is_err()
                    || last
                {
                    drop_subscriber(tables, key).await;
                }
            }
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

async fn handle<B: EventStore>(
    msg: StoreMsg,
    state: &mut StoreState<B>,
    myself: &ActorRef<StoreMsg>,
) {
    let StoreState {
        tables,
        retry_interval,
        leases,
        queued,
        resyncing,
        ..
    } = state;
    let tables = &mut **tables;
    match msg {
        StoreMsg::Append {
            key,
            payload,
            last,
            nonce,
            reply,
        } => {
            if let Some(detached) =
                tables
                    .backend
                    .append_detached(key, payload.clone(), last, nonce)
            {
                // Several appends in flight: the backend orders them and `forward` puts
                // the results back in order per stream.
                let me = myself.clone();
                tokio::spawn(
                    async move {
                        let result = detached.await;
                        // If the actor is gone (restarting), the caller's call fails and
                        // is re-sent; the nonce makes that a duplicate, which the next
                        // actor forwards.
                        let _ = me.send_message(StoreMsg::Stored {
                            key,
                            payload,
                            last,
                            result,
                            reply,
                        });
                    }
                    .instrument(tracing::Span::current()),
                );
                return;
            }
            let result = append(tables, key, payload, last, nonce).await;
            let _ = reply.send(result);
        }
        StoreMsg::Stored {
            key,
            payload,
            last,
            result,
            reply,
        } => {
            let result = settle(tables, key, payload, last, result).await;
            let _ = reply.send(result);
        }
        StoreMsg::Subscribe {
            key,
            after,
            create,
            subscriber,
            reply,
        } => {
            // The stream actor gave up waiting (its HTTP request went away): registering it
            // would only close the stream's healthy subscriber.
            if reply.is_closed() {
                return;
            }
            // Follow before reading, so an event stored meanwhile by another replica is
            // either in the replay or heard of live (and then skipped as a duplicate).
            // Already following it here (a resume on this replica): nothing to subscribe.
            // A POST stream being created is written by this process only, and nobody
            // else can follow it yet: nothing to subscribe to or announce. (The
            // standalone stream is "created" by every GET, resumes included.)
            let new_post_stream = create && !key.stream.is_standalone();
            let on_feed = !new_post_stream
                && (tables.subscribers.get(&key).is_some_and(|s| s.on_feed)
                    || tables.backend.follow(key).await.is_ok());
            let following = new_post_stream || on_feed;
            let mut result = if create {
                tables.backend.open_and_replay(key, after).await
            } else {
                tables.backend.replay_after(key, after).await
            };
            let mut position_known = true;
            if create && matches!(result, Err(StoreError::Backend(_))) {
                // A new stream while the backend is down: live delivery still works.
                // A new POST stream starts at 0; the standalone stream may have history,
                // so its position is learnt from the first event heard.
                position_known = new_post_stream;
                result = Ok(Replay {
                    events: Vec::new(),
                    outcome: ReplayOutcome::Complete,
                    position: 0,
                    completed: false,
                });
            }
            match &result {
                Ok(replay) if !replay.completed => {
                    let id = subscriber.get_id();
                    let mut sub = Subscriber::new(subscriber, replay.position);
                    sub.position_known = position_known;
                    sub.followed = following;
                    sub.on_feed = on_feed;
                    // Newest connection wins across replicas too: tell the others.
                    sub.awaiting_announce = !new_post_stream && tables.backend.announce(key).await;
                    let previous = tables.subscribers.insert(key, sub);
                    // A re-sent Subscribe from the same actor must not close itself.
                    if let Some(old) = previous.filter(|old| old.actor.get_id() != id) {
                        // A stop, not a message: ractor handles it before the Delivers
                        // already queued for the old connection, which the new one gets by
                        // replay.
                        old.actor
                            .stop(Some(CloseReason::Superseded.as_str().to_owned()));
                    }
                    if !following {
                        schedule_resync(resyncing, *retry_interval, myself);
                    }
                }
                _ => {
                    if on_feed && !tables.subscribers.contains_key(&key) {
                        tables.backend.unfollow(key).await;
                    }
                }
            }
            let _ = reply.send(result);
        }
        StoreMsg::Complete(key, reply) => {
            tables.backend.complete_stream(key).await;
            close_subscriber(tables, key, CloseReason::Completed).await;
            // A connection another replica holds on the stream must not wait either.
            tables.backend.tell_followers(key, Control::Completed).await;
            let _ = reply.send(());
        }
        StoreMsg::Disconnect(key, reply) => {
            let open = close_subscriber(tables, key, CloseReason::Polling).await;
            let told = tables
                .backend
                .tell_followers(key, Control::Disconnect)
                .await;
            let _ = reply.send(open || told);
        }
        StoreMsg::Unsubscribe { key, subscriber } => {
            if tables
                .subscribers
                .get(&key)
                .is_some_and(|s| s.actor.get_id() == subscriber)
            {
                drop_subscriber(tables, key).await;
            }
        }
        StoreMsg::OpenSession(session, reply) => {
            tables.backend.open_session(session).await;
            let _ = reply.send(());
        }
        StoreMsg::ForgetSession(session, reply) => {
            tables.backend.forget_session(session).await;
            let _ = reply.send(());
            let keys: Vec<StreamKey> = tables
                .subscribers
                .keys()
                .filter(|key| key.session == session)
                .copied()
                .collect();
            for key in keys {
                close_subscriber(tables, key, CloseReason::SessionEnded).await;
            }
        }
        StoreMsg::Remote(key, news) => {
            queued.handled();
            match news {
                StreamNews::Stored(event) => forward(tables, key, event).await,
                StreamNews::Announced => {
                    if let Some(sub) = tables.subscribers.get_mut(&key) {
                        sub.awaiting_announce = false;
                    }
                }
                StreamNews::Superseded => {
                    // Published before our own announcement came back: it is about an
                    // older connection than ours.
                    if let Some(sub) = tables.subscribers.get(&key)
                        && !sub.awaiting_announce
                    {
                        sub.actor
                            .stop(Some(CloseReason::Superseded.as_str().to_owned()));
                        drop_subscriber(tables, key).await;
                    }
                }
                StreamNews::Completed => {
                    close_subscriber(tables, key, CloseReason::Completed).await;
                }
                StreamNews::Disconnect => {
                    close_subscriber(tables, key, CloseReason::Polling).await;
                }
            }
        }
        StoreMsg::FeedLost => {
            queued.feed_lost_seen();
            schedule_resync(resyncing, *retry_interval, myself);
        }
        StoreMsg::Resync => {
            *resyncing = false;
            if !tables.backend.feed_ready().await {
                schedule_resync(resyncing, *retry_interval, myself);
                return;
            }
            let followed: Vec<(StreamKey, u64, bool, bool)> = tables
                .subscribers
                .iter()
                .map(|(key, sub)| (*key, sub.forwarded, sub.followed, sub.position_known))
                .collect();
            let mut caught_up = 0;
            for (key, forwarded, is_followed, position_known) in followed {
                if !is_followed {
                    if tables.backend.follow(key).await.is_err() {
                        schedule_resync(resyncing, *retry_interval, myself);
                        return;
                    }
                    if let Some(sub) = tables.subscribers.get_mut(&key) {
                        sub.followed = true;
                        sub.on_feed = true;
                    }
                }
                if let Some(sub) = tables.subscribers.get_mut(&key) {
                    // Announcements lost with the feed will not come back.
                    sub.awaiting_announce = false;
                }
                // Heard of nothing yet (live-only): nothing to catch up with.
                if !position_known {
                    continue;
                }
                match tables.backend.replay_after(key, Some(forwarded)).await {
                    Ok(replay) if replay.outcome == ReplayOutcome::Complete => {
                        caught_up += replay.events.len();
                        let completed = replay.completed;
                        let (events, skipped) =
                            already_delivered_removed(tables, key, replay.events);
                        send_batch(tables, key, events).await;
                        past_skipped(tables, key, skipped);
                        if completed {
                            close_subscriber(tables, key, CloseReason::Completed).await;
                        }
                    }
                    Err(StoreError::Backend(_)) => {
                        schedule_resync(resyncing, *retry_interval, myself);
                        return;
                    }
                    // Opened while the backend was away: nothing of it is stored yet.
                    Err(StoreError::UnknownStream) => {}
                    _ => {
                        close_subscriber(tables, key, CloseReason::Polling).await;
                    }
                }
            }
            tracing::info!(
                caught_up,
                "live feed back; followed streams caught up from the store"
            );
        }
        StoreMsg::Reap(lapsed) => {
            let Some(leases) = leases.clone() else {
                return;
            };
            for replica in lapsed {
                let Ok(orphans) = leases.pending(replica).await else {
                    return;
                };
                let mut settled_all = true;
                for orphan in orphans {
                    // Answer first, then clear the entry: a failure in between leaves it
                    // for the next round, and the entry's own nonce makes a second answer
                    // (ours or another replica's) a duplicate.
                    let answered = match tables
                        .backend
                        .append(orphan.key, orphan.payload, true, orphan.nonce)
                        .await
                    {
                        Ok(appended) => {
                            if !appended.duplicate {
                                tracing::warn!(stream = ?orphan.key, lost_replica = replica, "answered a request whose replica was lost");
                            }
                            forward(tables, orphan.key, appended.event).await;
                            true
                        }
                        // Ended after all, or its session did: nothing to answer.
                        Err(StoreError::StreamCompleted | StoreError::UnknownStream) => true,
                        Err(_) => false,
                    };
                    settled_all &= answered && leases.settle(replica, &orphan.field).await;
                }
                if settled_all {
                    leases.retire(replica).await;
                }
            }
        }
        StoreMsg::Positions(session, reply) => {
            let _ = reply.send(tables.backend.positions(session).await);
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
        StoreMsg::InjectPanic => panic!("fault injection: event store"),
    }
}

/// Renews this replica's lease on its own clock (a busy mailbox must not let it lapse) and
/// hands lapsed replicas to the store actor to answer their requests.
async fn keep_lease(leases: Leases, store: ActorRef<StoreMsg>) {
    let mut tick = tokio::time::interval(leases.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut healthy_since: Option<std::time::Instant> = None;
    loop {
        tick.tick().await;
        match leases.renew().await {
            Ok(lapsed) => {
                let since = *healthy_since.get_or_insert_with(std::time::Instant::now);
                // After an outage every lease looks lapsed: reap only once we have been
                // renewing for a whole lease, so a replica that is alive has had its turn
                // to renew too.
                if since.elapsed() >= leases.ttl()
                    && !lapsed.is_empty()
                    && store.send_message(StoreMsg::Reap(lapsed)).is_err()
                {
                    return;
                }
            }
            Err(e) => {
                healthy_since = None;
                // The breaker warned when the outage began.
                tracing::debug!(error = %e, "could not renew this replica's lease");
            }
        }
    }
}

/// Schedules one catch-up attempt after `retry`, unless one is pending.
fn schedule_resync(resyncing: &mut bool, retry: Duration, myself: &ActorRef<StoreMsg>) {
    if !*resyncing {
        *resyncing = true;
        myself.send_after(retry, || StoreMsg::Resync);
    }
}

/// A nonce unique within this process (a counter) and, through a random base, very likely
/// across processes sharing a store.
fn next_nonce() -> u64 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static BASE: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    base.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
}

/// Why a store request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StoreCallError {
    /// The store refused.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The store actor could not be reached.
    #[error(transparent)]
    Unreachable(#[from] SlotError),
}

/// Typed access to the current store actor.
#[derive(Debug, Clone)]
pub struct EventStoreHandle {
    slot: Slot<StoreMsg>,
}

impl EventStoreHandle {
    /// A handle reading the supervisor's slot for the store.
    pub fn new(slot: Slot<StoreMsg>) -> Self {
        Self { slot }
    }

    /// Stores `payload` on `key`; returns its id once stored, or `None` if the backend is
    /// down and the event was only delivered live.
    pub async fn append(
        &self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
    ) -> Result<Option<EventId>, StoreCallError> {
        let nonce = next_nonce();
        let result = self
            .slot
            .call(
                |reply| StoreMsg::Append {
                    key,
                    payload: payload.clone(),
                    last,
                    nonce,
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await?;
        Ok(result?)
    }

    /// Subscribes `subscriber` to `key` and returns what it missed after `after`.
    pub async fn subscribe(
        &self,
        key: StreamKey,
        after: Option<u64>,
        create: bool,
        subscriber: ActorRef<StreamMsg>,
    ) -> Result<Replay, StoreCallError> {
        let result = self
            .slot
            .call(
                |reply| StoreMsg::Subscribe {
                    key,
                    after,
                    create,
                    subscriber: subscriber.clone(),
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await?;
        Ok(result?)
    }

    /// Stops forwarding `key` to `subscriber`; best effort (a restarted store has no
    /// stale subscriber to remove only if it lost its tables).
    pub fn unsubscribe(&self, key: StreamKey, subscriber: ActorId) {
        let _ = self.slot.cast(StoreMsg::Unsubscribe { key, subscriber });
    }

    /// Ends stream `key` without a final event and closes its connection (a cancelled
    /// request: no response will come, and a resume must not wait for one).
    pub async fn complete(&self, key: StreamKey) -> Result<(), SlotError> {
        self.slot
            .call(|reply| StoreMsg::Complete(key, reply), CALL_TIMEOUT)
            .await
    }

    /// Closes the connection following `key` with a `retry:` hint (SSE polling); the
    /// stream goes on and the client resumes it. False if no connection was open.
    pub async fn disconnect(&self, key: StreamKey) -> Result<bool, SlotError> {
        self.slot
            .call(|reply| StoreMsg::Disconnect(key, reply), CALL_TIMEOUT)
            .await
    }

    /// Registers a new session. Awaited before the session id is given to the client, so
    /// the registration is in the store's mailbox ahead of anything the client causes.
    pub async fn open_session(&self, session: SessionId) -> Result<(), SlotError> {
        self.slot
            .call(|reply| StoreMsg::OpenSession(session, reply), CALL_TIMEOUT)
            .await
    }

    /// Forgets a session's events and closes its connections.
    pub async fn forget_session(&self, session: SessionId) -> Result<(), SlotError> {
        self.slot
            .call(
                |reply| StoreMsg::ForgetSession(session, reply),
                CALL_TIMEOUT,
            )
            .await
    }

    /// Last positions of a session's streams.
    pub async fn positions(&self, session: SessionId) -> Result<Vec<(StreamNo, u64)>, SlotError> {
        self.slot
            .call(|reply| StoreMsg::Positions(session, reply), CALL_TIMEOUT)
            .await
    }

    /// The current incarnation's id (observability and tests).
    pub fn current_id(&self) -> Option<ActorId> {
        self.slot.current().map(|a| a.get_id())
    }

    /// Fault injection: makes the store actor panic.
    #[doc(hidden)]
    pub fn inject_panic(&self) -> Result<(), SlotError> {
        self.slot.cast(StoreMsg::InjectPanic)
    }
}
