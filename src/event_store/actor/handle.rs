//! [`EventStoreHandle`]: typed access to the store's shards, each its current actor. The
//! only code that builds [`StoreMsg`]s, and the only code that knows which shard owns
//! what.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ractor::ActorId;

use super::StoreMsg;
use crate::event_store::feed::Subscriber;
use crate::event_store::redis::StreamNews;
use crate::event_store::redis::channel::{Admission, PushQueue};
use crate::event_store::{NewEvent, Occupancy, Replay, StoreError};
use crate::ids::{EventId, SessionId, StreamKey, StreamNo};
use crate::rt::slot::{Slot, SlotError};

/// Where an append's answer comes (see [`EventStoreHandle::send_append`]).
pub(super) type AppendAnswer = tokio::sync::oneshot::Receiver<Result<Option<EventId>, StoreError>>;

/// Longest a caller waits for the store to answer.
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(10);

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

/// Typed access to the store's shards, each the current incarnation of its actor. A
/// session's streams and a record live in one shard, chosen from the id.
#[derive(Debug, Clone)]
pub struct EventStoreHandle {
    shards: Arc<[Shard]>,
}

/// One shard as its callers reach it.
#[derive(Debug)]
struct Shard {
    slot: Slot<StoreMsg>,
    /// Pushes from other replicas waiting in the shard's mailbox (see
    /// [`EventStoreHandle::remote`]).
    pushes: Arc<PushQueue>,
}

/// Which of `shards` shards keeps record `id` (FNV-1a of the id: stable across processes
/// and restarts, and cheap).
fn record_shard(id: &str, shards: usize) -> usize {
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (hash % shards.max(1) as u64) as usize
}

/// A nonce unique within this process (a counter) and, through a random base, very likely
/// across processes sharing a store.
pub(super) fn next_nonce() -> u64 {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static BASE: OnceLock<u64> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let base = *BASE.get_or_init(|| uuid::Uuid::new_v4().as_u64_pair().0);
    base.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
}

impl EventStoreHandle {
    /// A handle reading the supervisor's slot of each shard, in shard order. Without any
    /// slot, every call finds the store unavailable.
    pub fn new(slots: impl IntoIterator<Item = Slot<StoreMsg>>) -> Self {
        let mut shards: Vec<Shard> = slots
            .into_iter()
            .map(|slot| Shard {
                slot,
                pushes: Arc::default(),
            })
            .collect();
        if shards.is_empty() {
            shards.push(Shard {
                slot: crate::rt::slot::slot("event store").1,
                pushes: Arc::default(),
            });
        }
        Self {
            shards: shards.into(),
        }
    }

    /// How many shards the store has.
    pub fn shards(&self) -> usize {
        self.shards.len()
    }

    /// The shard that owns `session` and its streams.
    pub fn shard_of(&self, session: SessionId) -> usize {
        session.shard(self.shards.len())
    }

    fn at(&self, shard: usize) -> &Shard {
        &self.shards[shard % self.shards.len()]
    }

    fn of_session(&self, session: SessionId) -> &Slot<StoreMsg> {
        &self.at(self.shard_of(session)).slot
    }

    fn of_key(&self, key: StreamKey) -> &Slot<StoreMsg> {
        self.of_session(key.session)
    }

    fn of_record(&self, id: &str) -> &Slot<StoreMsg> {
        &self.at(record_shard(id, self.shards.len())).slot
    }

    /// Stores `payload` on `key`; returns its id once stored, or `None` if the backend is
    /// down and the event was only delivered live.
    pub async fn append(
        &self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
    ) -> Result<Option<EventId>, StoreCallError> {
        self.append_with_nonce(key, payload, last, next_nonce(), 0)
            .await
    }

    /// A nonce for [`Self::append_with_nonce`], new to this process.
    pub fn nonce() -> u64 {
        next_nonce()
    }

    /// [`Self::append`] with the caller's nonce: appending again with the same nonce
    /// stores nothing new (several replicas answering one lost request store one answer).
    /// `after`: the last position the caller saw stored on the stream, 0 if none (see
    /// [`crate::event_store::NewEvent::after`]).
    pub async fn append_with_nonce(
        &self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
        after: u64,
    ) -> Result<Option<EventId>, StoreCallError> {
        let result = self
            .of_key(key)
            .call(
                |reply| StoreMsg::Append {
                    key,
                    payload: payload.clone(),
                    last,
                    nonce,
                    after,
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await?;
        Ok(result?)
    }

    /// Sends `event`'s append to `key`'s shard; the answer comes on the receiver.
    pub(super) async fn send_append(
        &self,
        key: StreamKey,
        event: &NewEvent,
    ) -> Result<AppendAnswer, SlotError> {
        self.of_key(key)
            .request(|reply| StoreMsg::Append {
                key,
                payload: event.payload.clone(),
                last: event.last,
                nonce: event.nonce,
                after: event.after,
                reply,
            })
            .await
    }

    /// Subscribes `subscriber` to `key` and returns what it missed after `after`.
    pub async fn subscribe(
        &self,
        key: StreamKey,
        after: Option<u64>,
        create: bool,
        subscriber: Subscriber,
    ) -> Result<Replay, StoreCallError> {
        let result = self
            .of_key(key)
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

    /// The next page of a replay: up to [`crate::event_store::REPLAY_PAGE`] events of
    /// `key` after `after`.
    pub async fn read_page(&self, key: StreamKey, after: u64) -> Result<Replay, StoreCallError> {
        self.read_page_of(key, after, crate::event_store::REPLAY_PAGE)
            .await
    }

    /// Like [`Self::read_page`], up to `most` events (1 to a full page): a reader of
    /// large events reads no more than its byte budget takes, since on Redis a page is
    /// copied whole into memory before anyone takes from it.
    pub async fn read_page_of(
        &self,
        key: StreamKey,
        after: u64,
        most: usize,
    ) -> Result<Replay, StoreCallError> {
        let result = self
            .of_key(key)
            .call(
                |reply| StoreMsg::ReadPage(key, after, most, reply),
                CALL_TIMEOUT,
            )
            .await?;
        Ok(result?)
    }

    /// Stops forwarding `key` to `subscriber`; best effort (a restarted store has no
    /// stale subscriber to remove only if it lost its tables).
    pub fn unsubscribe(&self, key: StreamKey, subscriber: ActorId) {
        let _ = self
            .of_key(key)
            .cast(StoreMsg::Unsubscribe { key, subscriber });
    }

    /// Ends stream `key` without a final event and closes its connection (a cancelled
    /// request: no response will come, and a resume must not wait for one).
    pub async fn complete(&self, key: StreamKey) -> Result<(), SlotError> {
        self.of_key(key)
            .call(|reply| StoreMsg::Complete(key, reply), CALL_TIMEOUT)
            .await
    }

    /// Closes the connection following `key` with a `retry:` hint (SSE polling); the
    /// stream goes on and the client resumes it. False if no connection was open.
    pub async fn disconnect(&self, key: StreamKey) -> Result<bool, SlotError> {
        self.of_key(key)
            .call(|reply| StoreMsg::Disconnect(key, reply), CALL_TIMEOUT)
            .await
    }

    /// Registers a new session. Returns once the registration is in the store's mailbox,
    /// not once it is done: awaited before the session id is given to the client, it is
    /// ahead of anything the client causes, since the mailbox keeps the order in which
    /// messages arrive. (Waiting for the store as well kept the session manager idle for a
    /// round trip on every `initialize`.)
    pub async fn open_session(&self, session: SessionId) -> Result<(), SlotError> {
        self.of_session(session)
            .send(StoreMsg::OpenSession(session))
            .await
    }

    /// Opens a task's log (a session of its own) counting against `principal`'s share of
    /// the store-wide budget (see [`crate::event_store::EventStore::open_task_log`]).
    pub async fn open_task_log(
        &self,
        session: SessionId,
        principal: &str,
    ) -> Result<(), SlotError> {
        self.of_session(session)
            .send(StoreMsg::OpenTaskLog(session, principal.to_owned()))
            .await
    }

    /// Forgets a session's events and closes its connections. Returns once the store has
    /// the message (so it is handled before anything sent after), not once it is done.
    pub async fn forget_session(&self, session: SessionId) -> Result<(), SlotError> {
        self.of_session(session)
            .send(StoreMsg::ForgetSession(session))
            .await
    }

    /// Stores record `id` (a task's or an execution's) for `ttl`; resolves once any
    /// process can read it.
    pub async fn put_record(
        &self,
        id: &str,
        record: Bytes,
        ttl: std::time::Duration,
    ) -> Result<(), StoreCallError> {
        self.write_record(id, record, ttl, None).await
    }

    /// [`EventStoreHandle::put_record`] of a new record counted against `quota` (see
    /// [`crate::event_store::EventStore::create_record`]).
    pub async fn create_record(
        &self,
        id: &str,
        record: Bytes,
        ttl: std::time::Duration,
        quota: crate::event_store::Quota,
    ) -> Result<(), StoreCallError> {
        self.write_record(id, record, ttl, Some(quota)).await
    }

    async fn write_record(
        &self,
        id: &str,
        record: Bytes,
        ttl: std::time::Duration,
        quota: Option<crate::event_store::Quota>,
    ) -> Result<(), StoreCallError> {
        let id = id.to_owned();
        Ok(self
            .of_record(&id)
            .call(
                |reply| StoreMsg::PutRecord {
                    id: id.clone(),
                    record: record.clone(),
                    ttl,
                    quota: quota.clone(),
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await??)
    }

    /// Drops record `id`, giving its place in `principal`'s quota back.
    pub async fn delete_record(
        &self,
        id: &str,
        principal: Option<&str>,
    ) -> Result<(), StoreCallError> {
        let id = id.to_owned();
        let principal = principal.map(str::to_owned);
        Ok(self
            .of_record(&id)
            .call(
                |reply| StoreMsg::DeleteRecord {
                    id: id.clone(),
                    principal: principal.clone(),
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await??)
    }

    /// Record `id`, if it exists and has not expired.
    pub async fn get_record(&self, id: &str) -> Result<Option<Bytes>, StoreCallError> {
        let id = id.to_owned();
        Ok(self
            .of_record(&id)
            .call(|reply| StoreMsg::GetRecord(id.clone(), reply), CALL_TIMEOUT)
            .await??)
    }

    /// Last positions of a session's streams.
    pub async fn positions(&self, session: SessionId) -> Result<Vec<(StreamNo, u64)>, SlotError> {
        self.of_session(session)
            .call(|reply| StoreMsg::Positions(session, reply), CALL_TIMEOUT)
            .await
    }

    /// What the store holds, all shards together (in memory only; `None` on Redis).
    pub async fn occupancy(&self) -> Result<Option<Occupancy>, SlotError> {
        let mut total: Option<Occupancy> = None;
        for shard in 0..self.shards.len() {
            let Some(held) = self.occupancy_of(shard).await? else {
                return Ok(None);
            };
            let sum = total.get_or_insert_with(Occupancy::default);
            sum.sessions += held.sessions;
            sum.events += held.events;
            sum.bytes += held.bytes;
        }
        Ok(total)
    }

    /// Whether every shard answers (readiness).
    pub async fn ping(&self) -> Result<(), SlotError> {
        for shard in 0..self.shards.len() {
            self.occupancy_of(shard).await?;
        }
        Ok(())
    }

    /// What shard `shard` holds (in memory only; `None` on Redis).
    pub async fn occupancy_of(&self, shard: usize) -> Result<Option<Occupancy>, SlotError> {
        self.at(shard)
            .slot
            .call(StoreMsg::Occupancy, CALL_TIMEOUT)
            .await
    }

    /// Up to `limit` of a session's open streams, newest first, with their last positions
    /// (in memory only; empty on Redis).
    pub async fn open_streams(
        &self,
        session: SessionId,
        limit: usize,
    ) -> Result<Vec<(StreamNo, u64)>, SlotError> {
        self.of_session(session)
            .call(
                |reply| StoreMsg::OpenStreams(session, limit, reply),
                CALL_TIMEOUT,
            )
            .await
    }

    /// News from another replica about stream `key` (from the pub/sub feed). Never waits:
    /// it runs on the Redis connection's task. Bounded: past
    /// [`crate::event_store::redis::channel::MAX_QUEUED_PUSHES`] waiting pushes it is
    /// dropped, and the store catches up from Redis instead.
    pub fn remote(&self, key: StreamKey, news: StreamNews) {
        let shard = self.at(self.shard_of(key.session));
        match shard.pushes.admit() {
            Admission::Queue(queued) => {
                let _ = shard.slot.cast(StoreMsg::Remote(key, news, queued));
            }
            Admission::Lost(loss) => {
                let _ = shard.slot.cast(StoreMsg::FeedLost(Some(loss)));
            }
            Admission::Drop => {}
        }
    }

    /// The pub/sub feed lost messages (its connection dropped): once it is back, every
    /// shard reads what its followed streams missed. Never waits.
    pub fn feed_lost(&self) {
        for shard in self.shards.iter() {
            if let Some(loss) = shard.pushes.lost() {
                let _ = shard.slot.cast(StoreMsg::FeedLost(Some(loss)));
            }
        }
    }

    /// Asks shard `shard` to trim the store back under its store-wide budget; `hops`
    /// counts the shards that handed the work on so far. Never waits.
    pub(super) fn trim(&self, shard: usize, hops: usize) {
        let _ = self.at(shard).slot.cast(StoreMsg::Trim(hops));
    }

    /// The current incarnation's id of shard `shard` (observability and tests).
    pub fn current_id(&self, shard: usize) -> Option<ActorId> {
        self.at(shard).slot.current().map(|a| a.get_id())
    }

    /// Fault injection: makes shard `shard`'s actor panic.
    #[doc(hidden)]
    pub fn inject_panic(&self, shard: usize) -> Result<(), SlotError> {
        self.at(shard).slot.cast(StoreMsg::InjectPanic)
    }
}
