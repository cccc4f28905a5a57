//! The backend `[store] backend` names, chosen once, when the supervisor starts the
//! store's shards. Each shard's actor is generic over its store
//! ([`EventStoreActor<S>`](super::EventStoreActor)), so every call on the backend is a
//! direct call, with no enum forwarding it on each append; this is the one file that
//! names both stores.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorCell, ActorRef, SpawnErr};

use super::actor::{ShardConfig, StoreArgs, StoreTables};
use super::memory::SharedBudget;
use super::redis::RedisLink;
use super::{EventStore, EventStoreActor, MemoryStore, RedisStore, Retention, StoreMsg};
use crate::rt::heir::{Heir, lend};

/// The store's shards as the supervisor keeps them across their restarts: each one's
/// tables, of the chosen backend.
#[derive(Debug)]
pub struct Shards(Chosen);

#[derive(Debug)]
enum Chosen {
    /// In this process, the shards sharing one budget.
    Memory {
        budget: Arc<SharedBudget>,
        tables: Tables<MemoryStore>,
    },
    /// In Redis, shared by replicas; sessions kept there for `session_ttl`.
    Redis {
        link: RedisLink,
        session_ttl: Duration,
        tables: Tables<RedisStore>,
    },
}

impl Shards {
    /// `shards` shards in Redis through `redis`, sessions kept there for `session_ttl`;
    /// without, in memory. At most `max_per_stream` connections follow one stream
    /// (`sse.max_connections_per_stream`).
    pub fn new(
        redis: Option<RedisLink>,
        session_ttl: Duration,
        max_per_stream: usize,
        shards: usize,
    ) -> Self {
        Self(match redis {
            Some(link) => Chosen::Redis {
                link,
                session_ttl,
                tables: Tables::new(shards, max_per_stream),
            },
            None => Chosen::Memory {
                budget: Arc::new(SharedBudget::new(shards)),
                tables: Tables::new(shards, max_per_stream),
            },
        })
    }

    /// Starts shard `shard`'s actor, linked to `supervisor`, with the tables its last
    /// incarnation handed back ([`Shards::reclaim`]), or new ones.
    pub async fn start(
        &mut self,
        shard: usize,
        config: ShardConfig,
        supervisor: ActorCell,
    ) -> Result<ActorRef<StoreMsg>, SpawnErr> {
        match &mut self.0 {
            Chosen::Memory { budget, tables } => {
                let new = || MemoryStore::shard(Retention::default(), budget.clone(), shard);
                tables.start(shard, new, config, supervisor).await
            }
            Chosen::Redis {
                link,
                session_ttl,
                tables,
            } => {
                let new = || RedisStore::new(link.clone(), *session_ttl);
                tables.start(shard, new, config, supervisor).await
            }
        }
    }

    /// Waits up to `wait` for shard `shard`'s stopped actor to hand its tables back, for
    /// the next [`Shards::start`]. False if they were lent and did not come back: the
    /// shard then starts empty.
    pub async fn reclaim(&mut self, shard: usize, wait: Duration) -> bool {
        match &mut self.0 {
            Chosen::Memory { tables, .. } => tables.reclaim(shard, wait).await,
            Chosen::Redis { tables, .. } => tables.reclaim(shard, wait).await,
        }
    }
}

/// Each shard's tables of one backend: lent to the shard's actor, or handed back by it.
#[derive(Debug)]
struct Tables<S: EventStore> {
    lent: Vec<Option<Heir<StoreTables<S>>>>,
    back: Vec<Option<StoreTables<S>>>,
    max_per_stream: usize,
}

impl<S: EventStore> Tables<S> {
    fn new(shards: usize, max_per_stream: usize) -> Self {
        Self {
            lent: (0..shards).map(|_| None).collect(),
            back: (0..shards).map(|_| None).collect(),
            max_per_stream,
        }
    }

    async fn start(
        &mut self,
        shard: usize,
        new: impl FnOnce() -> S,
        config: ShardConfig,
        supervisor: ActorCell,
    ) -> Result<ActorRef<StoreMsg>, SpawnErr> {
        let tables = match self.back.get_mut(shard).and_then(Option::take) {
            Some(tables) => tables,
            None => StoreTables::new(new()).with_max_per_stream(self.max_per_stream),
        };
        let (tables, heir) = lend(tables);
        if let Some(slot) = self.lent.get_mut(shard) {
            *slot = Some(heir);
        }
        let args = StoreArgs { tables, config };
        let actor = EventStoreActor::<S>::default();
        let (actor, _) = Actor::spawn_linked(None, actor, args, supervisor).await?;
        Ok(actor)
    }

    async fn reclaim(&mut self, shard: usize, wait: Duration) -> bool {
        let Some(heir) = self.lent.get_mut(shard).and_then(Option::take) else {
            return true;
        };
        let back = heir.reclaim(wait).await;
        let came = back.is_some();
        if let Some(slot) = self.back.get_mut(shard) {
            *slot = back;
        }
        came
    }
}
