//! The store actor: owns the backend (lent by the supervisor, so events survive a crash of
//! this actor), enforces retention with a periodic sweep, and forwards every stored event to
//! the stream actor subscribed to its stream.
//!
//! Subscribing and replaying are one message, so no event can fall between the replay and
//! the live feed: everything stored before the subscription is in the replay, everything
//! after is forwarded. Each stream has at most one subscriber, so a message is never sent
//! on two connections.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort};
use tracing::Instrument;

use super::{Appended, EventId, EventStore, Replay, Retention, StoreError, StreamKey, StreamNo};
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
    subscribers: HashMap<StreamKey, ActorRef<StreamMsg>>,
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
        /// Gets the stored event's id.
        reply: RpcReplyPort<Result<EventId, StoreError>>,
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
    /// Fault injection for supervision tests: panic inside the actor.
    InjectPanic,
}

impl StoreMsg {
    fn name(&self) -> &'static str {
        match self {
            Self::Append { .. } => "append",
            Self::Subscribe { .. } => "subscribe",
            Self::Unsubscribe { .. } => "unsubscribe",
            Self::Disconnect(..) => "disconnect",
            Self::Complete(..) => "complete",
            Self::OpenSession(..) => "open_session",
            Self::ForgetSession(..) => "forget_session",
            Self::Positions(..) => "positions",
            Self::Sweep => "sweep",
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
}

/// Running state of the store actor.
#[derive(Debug)]
pub struct StoreState<B: EventStore> {
    tables: Lent<StoreTables<B>>,
    sweeper: tokio::task::JoinHandle<()>,
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
        let sweeper = myself.send_interval(args.cleanup_interval, || StoreMsg::Sweep);
        Ok(StoreState { tables, sweeper })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<StoreMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.sweeper.abort();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<StoreMsg>,
        msg: StoreMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("event_store.handle", msg = msg.name());
        handle(msg, &mut state.tables).instrument(span).await;
        Ok(())
    }
}

async fn handle<B: EventStore>(msg: StoreMsg, tables: &mut StoreTables<B>) {
    match msg {
        StoreMsg::Append {
            key,
            payload,
            last,
            nonce,
            reply,
        } => {
            let result = tables.backend.append(key, payload, last, nonce).await;
            // A duplicate is forwarded too: if the crash that caused the re-send fell
            // between storing and forwarding, this is its only delivery; otherwise the
            // stream actor skips it by position.
            if let Ok(Appended { event, .. }) = &result {
                if let Some(sub) = tables.subscribers.get(&key)
                    && sub.send_message(StreamMsg::Deliver(event.clone())).is_err()
                {
                    tables.subscribers.remove(&key);
                }
                if last {
                    // Nothing more will be forwarded on this stream.
                    tables.subscribers.remove(&key);
                }
            }
            let _ = reply.send(result.map(|a| a.event.id));
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
            if create && let Err(e) = tables.backend.open_stream(key).await {
                let _ = reply.send(Err(e));
                return;
            }
            let result = tables.backend.replay_after(key, after).await;
            if let Ok(replay) = &result
                && !replay.completed
            {
                let id = subscriber.get_id();
                let previous = tables.subscribers.insert(key, subscriber);
                // A re-sent Subscribe from the same actor must not close itself.
                if let Some(old) = previous.filter(|old| old.get_id() != id) {
                    // A stop, not a message: ractor handles it before the Delivers already
                    // queued for the old connection, which the new one gets by replay.
                    old.stop(Some(CloseReason::Superseded.as_str().to_owned()));
                }
            }
            let _ = reply.send(result);
        }
        StoreMsg::Complete(key, reply) => {
            tables.backend.complete_stream(key).await;
            if let Some(sub) = tables.subscribers.remove(&key) {
                let _ = sub.send_message(StreamMsg::Close(CloseReason::Completed));
            }
            let _ = reply.send(());
        }
        StoreMsg::Disconnect(key, reply) => {
            let open = match tables.subscribers.remove(&key) {
                Some(sub) => sub
                    .send_message(StreamMsg::Close(CloseReason::Polling))
                    .is_ok(),
                None => false,
            };
            let _ = reply.send(open);
        }
        StoreMsg::Unsubscribe { key, subscriber } => {
            if tables
                .subscribers
                .get(&key)
                .is_some_and(|s| s.get_id() == subscriber)
            {
                tables.subscribers.remove(&key);
            }
        }
        StoreMsg::OpenSession(session, reply) => {
            tables.backend.open_session(session).await;
            let _ = reply.send(());
        }
        StoreMsg::ForgetSession(session, reply) => {
            tables.backend.forget_session(session).await;
            let _ = reply.send(());
            tables.subscribers.retain(|key, sub| {
                if key.session == session {
                    let _ = sub.send_message(StreamMsg::Close(CloseReason::SessionEnded));
                    false
                } else {
                    true
                }
            });
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

    /// Stores `payload` on `key`; returns its id once stored.
    pub async fn append(
        &self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
    ) -> Result<EventId, StoreCallError> {
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
