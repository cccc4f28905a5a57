//! What the benches share: a follower that drops what it is fed, a typical payload, and
//! a store shard's actor with the benches' retention.

// Each bench uses a part of this.
#![allow(dead_code)]

use std::time::Duration;

use otpmcp::event_store::actor::{StoreArgs, StoreTables};
use otpmcp::event_store::feed::Subscriber;
use otpmcp::event_store::{
    EventStore, EventStoreActor, EventStoreHandle, Feed, Retention, ShardConfig, StoreMsg,
};
use otpmcp::ids::StreamKey;
use otpmcp::rt::heir::lend;
use otpmcp::rt::slot::SlotWriter;
use ractor::{Actor, ActorProcessingErr, ActorRef};

/// A progress notification, the typical streamed event.
pub(crate) const PAYLOAD: &[u8] = br#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":17,"progressToken":"bench","total":10000}}"#;

/// Follows a stream in place of a connection: receives and drops what the store feeds it.
pub(crate) struct Sink;

impl Actor for Sink {
    type Msg = Feed;
    type State = ();
    type Arguments = ();
    async fn pre_start(&self, _: ActorRef<Feed>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

/// Starts a store shard's actor around `backend` (on the current runtime) and publishes
/// it through `writer`; `shards` reaches every shard of its store. Nothing restarts it.
pub(crate) async fn spawn_shard<B: EventStore>(
    backend: B,
    writer: SlotWriter<StoreMsg>,
    shards: EventStoreHandle,
) {
    let (tables, heir) = lend(StoreTables::new(backend));
    std::mem::forget(heir);
    let config = ShardConfig {
        retention: Retention {
            enabled: true,
            event_ttl: Duration::from_secs(3600),
            replay_window: Duration::from_secs(86_400),
            max_session_events: 1_000_000,
            max_session_bytes: usize::MAX,
            ..Retention::default()
        },
        cleanup_interval: Duration::from_secs(3600),
        retry_interval: Duration::from_secs(1),
        shards,
    };
    let args = StoreArgs { tables, config };
    let Ok((actor, _)) = Actor::spawn(None, EventStoreActor::<B>::default(), args).await else {
        panic!("the store did not start");
    };
    writer.publish(Some(actor));
    std::mem::forget(writer);
}

/// Replays `key` from its start as a connection does: the subscription's first page,
/// then the rest a page at a time. How many events that was.
pub(crate) async fn replay_all(
    store: &EventStoreHandle,
    key: StreamKey,
    subscriber: Subscriber,
) -> u64 {
    let replay = store.subscribe(key, Some(0), false, subscriber).await;
    let mut page = replay.unwrap_or_else(|e| panic!("{e}")).events;
    let mut read = 0;
    while let Some(last) = page.last() {
        read += page.len() as u64;
        let next = store.read_page(key, last.id.seq).await;
        page = next.unwrap_or_else(|e| panic!("{e}")).events;
    }
    read
}
