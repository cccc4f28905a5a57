//! Event store benchmarks through the actor: append, and replay after a `Last-Event-ID`
//! with 100 and 10,000 missed events (the subscribe message a resuming stream sends), plus
//! the same replay encoded as SSE frames the way the stream actor writes it.
//!
//! `append_sharded/N` spreads 64 concurrent appends over 64 sessions on a store of N
//! shards: where one shard is a single actor's ceiling, N shards are N actors.
//!
//! Run: `cargo bench --bench event_store`

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use otpmcp::event_store::memory::SharedBudget;
use otpmcp::event_store::{EventStoreHandle, MemoryStore, Retention};
use otpmcp::ids::{SessionId, StreamKey, StreamNo};
use otpmcp::rt::slot::slot;
use otpmcp::stream::sse;
use ractor::Actor;
use support::{PAYLOAD, Sink};

mod support;

async fn start_store() -> EventStoreHandle {
    start_shards(1).await
}

/// A store of `shards` shards sharing one budget, each its own actor.
async fn start_shards(shards: usize) -> EventStoreHandle {
    let slots: Vec<_> = (0..shards).map(|_| slot("event store")).collect();
    let handle = EventStoreHandle::new(slots.iter().map(|(_, reader)| reader.clone()));
    let budget = Arc::new(SharedBudget::new(shards));
    for (shard, (writer, _)) in slots.into_iter().enumerate() {
        let store = MemoryStore::shard(Retention::default(), budget.clone(), shard);
        support::spawn_shard(store, writer, handle.clone()).await;
    }
    handle
}

fn benches(c: &mut Criterion) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let store = rt.block_on(start_store());
    let payload = Bytes::from_static(PAYLOAD);

    let append_key = StreamKey::new(SessionId::random(), StreamNo(1));
    let bench_session = SessionId::random();
    rt.block_on(async {
        for session in [append_key.session, bench_session] {
            let _ = store.open_session(session).await;
        }
    });
    c.bench_function("append", |b| {
        b.to_async(&rt).iter(|| async {
            let _ = store.append(append_key, payload.clone(), false).await;
        })
    });

    // Many handlers appending at once: the actor drains its mailbox without parking
    // between messages, so this is closer to the per-event cost under load.
    let busy = StreamKey::new(bench_session, StreamNo(2));
    let mut group = c.benchmark_group("append_concurrent");
    group.throughput(criterion::Throughput::Elements(64));
    group.bench_function("64_streams", |b| {
        b.to_async(&rt).iter(|| async {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..64u64 {
                let store = store.clone();
                let payload = payload.clone();
                let key = StreamKey::new(busy.session, StreamNo(100 + i));
                tasks.spawn(async move { store.append(key, payload, false).await.is_ok() });
            }
            while tasks.join_next().await.is_some() {}
        })
    });
    group.finish();

    // 64 appends at once over 64 sessions, on 1, 2 and 4 shards.
    let mut group = c.benchmark_group("append_sharded");
    group.throughput(criterion::Throughput::Elements(64));
    for shards in [1usize, 2, 4] {
        let (store, keys) = rt.block_on(async {
            let store = start_shards(shards).await;
            let mut keys = Vec::new();
            for _ in 0..64 {
                let key = StreamKey::new(SessionId::random(), StreamNo(1));
                let _ = store.open_session(key.session).await;
                keys.push(key);
            }
            (store, keys)
        });
        group.bench_with_input(BenchmarkId::from_parameter(shards), &shards, |b, _| {
            b.to_async(&rt).iter(|| async {
                let mut tasks = tokio::task::JoinSet::new();
                for key in &keys {
                    let store = store.clone();
                    let payload = payload.clone();
                    let key = *key;
                    tasks.spawn(async move { store.append(key, payload, false).await.is_ok() });
                }
                while tasks.join_next().await.is_some() {}
            })
        });
    }
    group.finish();

    // The same single append on a one-thread runtime: no cross-thread wake-ups, so this
    // approximates the CPU cost of one store round trip.
    let local = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => panic!("runtime: {e}"),
    };
    let local_store = local.block_on(async {
        let store = start_store().await;
        let _ = store.open_session(append_key.session).await;
        store
    });
    c.bench_function("append_current_thread", |b| {
        b.to_async(&local).iter(|| async {
            let _ = local_store.append(append_key, payload.clone(), false).await;
        })
    });

    let mut group = c.benchmark_group("replay_after");
    for missed in [100u64, 10_000] {
        let key = StreamKey::new(SessionId::random(), StreamNo(1));
        let sink = rt.block_on(async {
            let _ = store.open_session(key.session).await;
            for _ in 0..missed {
                let _ = store.append(key, payload.clone(), false).await;
            }
            match Actor::spawn(None, Sink, ()).await {
                Ok((sink, _)) => sink.get_derived(),
                Err(e) => panic!("sink: {e}"),
            }
        });
        group.bench_with_input(
            BenchmarkId::new("through_actor", missed),
            &missed,
            |b, _| {
                b.to_async(&rt).iter(|| async {
                    let read = support::replay_all(&store, key, sink.clone()).await;
                    assert_eq!(read, missed);
                })
            },
        );
        group.bench_with_input(
            BenchmarkId::new("as_sse_frames", missed),
            &missed,
            |b, _| {
                b.to_async(&rt).iter(|| async {
                    let Ok(replay) = store.subscribe(key, Some(0), false, sink.clone()).await
                    else {
                        panic!("replay failed");
                    };
                    let mut out = BytesMut::new();
                    for e in &replay.events {
                        out.extend_from_slice(&sse::message(Some(&e.id), &e.payload));
                    }
                    out.freeze()
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = event_store;
    config = Criterion::default().sample_size(50).measurement_time(Duration::from_secs(4));
    targets = benches
}
criterion_main!(event_store);
