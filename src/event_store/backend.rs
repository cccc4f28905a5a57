//! The backend chosen in `[store] backend`: one type for the store actor, dispatching to
//! the in-memory or the Redis store.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{
    Appended, EventStore, MemoryStore, Occupancy, Quota, RedisStore, Replay, Retention,
    StoreError, StreamKey, StreamNo, SweepStats,
};
use super::memory::SharedBudget;
use crate::ids::SessionId;

/// The event store's backend.
#[derive(Debug)]
// One per shard, moved only when the shard (re)starts: its size costs nothing, a box
// would cost a pointer chase on every append.
#[allow(clippy::large_enum_variant)]
pub enum Backend {
    /// In this process.
    Memory(MemoryStore),
    /// In Redis, shared by replicas.
    Redis(Box<RedisStore>),
}

impl Backend {
    /// In Redis through `redis`, sessions kept there for `session_ttl`; without, in
    /// memory as shard `shard` of a store whose shards share `budget`.
    pub fn new(
        redis: Option<super::redis::RedisLink>,
        session_ttl: Duration,
        budget: &Arc<SharedBudget>,
        shard: usize,
    ) -> Self {
        match redis {
            Some(link) => Self::Redis(Box::new(RedisStore::new(link, session_ttl))),
            None => Self::Memory(MemoryStore::shard(
                Retention::default(),
                budget.clone(),
                shard,
            )),
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Self::Memory(MemoryStore::default())
    }
}

/// Calls the same method on whichever store this is.
macro_rules! each {
    ($self:ident, $store:ident => $call:expr) => {
        match $self {
            Backend::Memory($store) => $call,
            Backend::Redis($store) => $call,
        }
    };
}

impl EventStore for Backend {
    async fn open_session(&mut self, session: SessionId) {
        each!(self, s => s.open_session(session).await)
    }

    async fn open_task_log(&mut self, session: SessionId, principal: &str) {
        each!(self, s => s.open_task_log(session, principal).await)
    }

    async fn open_stream(&mut self, key: StreamKey) -> Result<(), StoreError> {
        each!(self, s => s.open_stream(key).await)
    }

    async fn append(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Result<Appended, StoreError> {
        each!(self, s => s.append(key, payload, last, nonce).await)
    }

    async fn complete_stream(&mut self, key: StreamKey) {
        each!(self, s => s.complete_stream(key).await)
    }

    async fn open_and_replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> Result<Replay, StoreError> {
        each!(self, s => s.open_and_replay(key, after, max).await)
    }

    async fn replay_page(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> Result<Replay, StoreError> {
        each!(self, s => s.replay_page(key, after, max).await)
    }

    async fn forget_session(&mut self, session: SessionId) {
        each!(self, s => s.forget_session(session).await)
    }

    async fn put_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        each!(self, s => s.put_record(id, record, ttl).await)
    }

    async fn create_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        quota: &Quota,
    ) -> Result<(), StoreError> {
        each!(self, s => s.create_record(id, record, ttl, quota).await)
    }

    async fn delete_record(&mut self, id: &str, principal: Option<&str>) -> Result<(), StoreError> {
        each!(self, s => s.delete_record(id, principal).await)
    }

    async fn get_record(&mut self, id: &str) -> Result<Option<Bytes>, StoreError> {
        each!(self, s => s.get_record(id).await)
    }

    async fn sweep(&mut self) -> SweepStats {
        each!(self, s => s.sweep().await)
    }

    async fn adopt_position(&mut self, key: StreamKey, at: u64) -> Result<(), StoreError> {
        each!(self, s => s.adopt_position(key, at).await)
    }

    async fn positions(&self, session: SessionId) -> Vec<(StreamNo, u64)> {
        each!(self, s => s.positions(session).await)
    }

    fn open_streams(&self, session: SessionId, limit: usize) -> Vec<(StreamNo, u64)> {
        each!(self, s => s.open_streams(session, limit))
    }

    fn occupancy(&self) -> Option<Occupancy> {
        each!(self, s => s.occupancy())
    }

    fn set_retention(&mut self, retention: Retention) {
        each!(self, s => s.set_retention(retention))
    }

    async fn follow(&mut self, key: StreamKey) -> Result<(), StoreError> {
        each!(self, s => s.follow(key).await)
    }

    async fn announce(&mut self, key: StreamKey) -> bool {
        each!(self, s => s.announce(key).await)
    }

    async fn tell_followers(&mut self, key: StreamKey, control: super::Control) -> bool {
        each!(self, s => s.tell_followers(key, control).await)
    }

    async fn unfollow(&mut self, key: StreamKey) {
        each!(self, s => s.unfollow(key).await)
    }

    fn is_shared(&self) -> bool {
        each!(self, s => s.is_shared())
    }

    async fn feed_ready(&mut self) -> bool {
        each!(self, s => s.feed_ready().await)
    }

    fn trim(&mut self) {
        each!(self, s => s.trim())
    }

    fn take_trim_elsewhere(&mut self) -> Option<usize> {
        each!(self, s => s.take_trim_elsewhere())
    }

    fn note_unstored(&self) {
        each!(self, s => s.note_unstored())
    }

    fn detaches_appends(&self) -> bool {
        each!(self, s => s.detaches_appends())
    }

    fn append_detached(
        &self,
        key: StreamKey,
        events: &[super::NewEvent],
    ) -> Option<super::DetachedAppend> {
        each!(self, s => s.append_detached(key, events))
    }
}
