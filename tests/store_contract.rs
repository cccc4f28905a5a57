//! The event-store contract (`otpmcp::event_store` module docs), run against every
//! backend: the in-memory store, and the Redis store on a redis-server of the test's own
//! and on a Redis Cluster of three nodes of its own; and over TLS (a TLS-only server that
//! asks for the client's certificate, with an ACL user), and as an ACL user in clear.
//! Each scenario is written once and instantiated per backend by `contract!`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::redis::{Certs, RedisCluster, RedisServer, Secured};
use common::within;
use otpmcp::config::{BackendKind, StoreConfig};
use otpmcp::event_store::memory::SharedBudget;
use otpmcp::event_store::redis::{RedisLink, connect};
use otpmcp::event_store::{
    EventStore, MemoryStore, NewEvent, Quota, RedisStore, Replay, ReplayOutcome, Retention,
    StoreError, StreamKey, StreamNo,
};
use otpmcp::session::SessionId;

fn retention(max_events: usize) -> Retention {
    Retention {
        enabled: true,
        event_ttl: Duration::from_secs(60),
        replay_window: Duration::from_secs(600),
        max_session_events: max_events,
        max_session_bytes: usize::MAX,
        max_tasks: 3,
        max_total_events: usize::MAX,
        max_total_bytes: usize::MAX,
        principal_events: usize::MAX,
        principal_bytes: usize::MAX,
    }
}

/// Makes stores of one backend kind. A trait, not an enum of stores: each scenario is
/// instantiated per store type, as the server's shard actors are (static dispatch).
trait Maker {
    type Store: EventStore;

    /// The store can lose events a client already got (a Redis failover).
    fn lossy(&self) -> bool;

    async fn store(&self, retention: Retention) -> Self::Store;

    /// Two stores over the same data: two replicas' connections to the same Redis, or
    /// (memory) two shards sharing one budget.
    async fn pair(&self, retention: Retention) -> (Self::Store, Self::Store) {
        (self.store(retention).await, self.store(retention).await)
    }
}

/// The in-memory store.
struct Memory;

impl Maker for Memory {
    type Store = MemoryStore;

    fn lossy(&self) -> bool {
        false
    }

    async fn store(&self, retention: Retention) -> MemoryStore {
        let mut store = MemoryStore::default();
        store.set_retention(retention);
        store
    }

    async fn pair(&self, retention: Retention) -> (MemoryStore, MemoryStore) {
        let budget = Arc::new(SharedBudget::new(2));
        let shard = |n| MemoryStore::shard(retention, budget.clone(), n);
        (shard(0), shard(1))
    }
}

/// The Redis store, on a redis-server or a cluster of the test's own.
enum Redis {
    Server(RedisServer),
    Cluster(RedisCluster),
}

impl Redis {
    fn server() -> Self {
        Self::Server(RedisServer::start())
    }

    fn cluster() -> Self {
        Self::Cluster(RedisCluster::start())
    }

    /// `rediss://otpmcp:…@`: TLS only (no plain port), the test's CA in
    /// `store.redis_ca_file`, mutual TLS, and an ACL user (the default user off).
    fn tls() -> Self {
        Self::Server(RedisServer::start_secured(Secured {
            tls: Some(Certs::make()),
            client_auth: true,
            user: Some(("otpmcp".into(), "contract-pass".into())),
        }))
    }

    /// `redis://otpmcp:…@`: an ACL user (the default user off), without TLS.
    fn acl() -> Self {
        Self::Server(RedisServer::start_secured(Secured {
            user: Some(("otpmcp".into(), "contract-pass".into())),
            ..Secured::default()
        }))
    }
}

impl Maker for Redis {
    type Store = RedisStore;

    fn lossy(&self) -> bool {
        true
    }

    async fn store(&self, retention: Retention) -> RedisStore {
        let link = match self {
            Self::Server(server) => link(server).await,
            Self::Cluster(cluster) => cluster_link(cluster).await,
        };
        let mut store = RedisStore::new(link, Duration::from_secs(600));
        store.set_retention(retention);
        store
    }
}

/// A replica's connection to `server` (its pub/sub messages go nowhere here).
async fn link(server: &RedisServer) -> RedisLink {
    let mut config = StoreConfig {
        backend: BackendKind::Redis,
        ..StoreConfig::default()
    };
    server.configure(&mut config);
    let connected = connect(&config, |_, _| |_| {}).await;
    connected.unwrap_or_else(|e| panic!("{e}"))
}

/// A replica's connection to `cluster`, seeded with all its nodes.
async fn cluster_link(cluster: &RedisCluster) -> RedisLink {
    let config = StoreConfig {
        backend: BackendKind::Redis,
        redis_url: cluster.url().into(),
        redis_cluster: true,
        redis_nodes: cluster.other_urls().into_iter().map(Into::into).collect(),
        ..StoreConfig::default()
    };
    let connected = connect(&config, |_, _| |_| {}).await;
    connected.unwrap_or_else(|e| panic!("{e}"))
}

/// Re-checks state that changes with time (expiry) until `check` holds, within the test
/// timeout.
async fn until(what: &str, mut check: impl AsyncFnMut() -> bool) {
    within(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

fn payloads(r: &Replay) -> Vec<String> {
    r.events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
        .collect()
}

async fn fill(store: &mut impl EventStore, key: StreamKey, range: std::ops::RangeInclusive<u32>) {
    for i in range {
        let appended = store
            .append(
                key,
                Bytes::from(format!("e{i}")),
                false,
                1000 + u64::from(i),
            )
            .await;
        assert!(appended.is_ok_and(|a| !a.duplicate), "append e{i}");
    }
}

async fn replay(store: &mut impl EventStore, key: StreamKey, after: Option<u64>) -> Replay {
    store
        .replay_after(key, after)
        .await
        .unwrap_or_else(|e| panic!("replay after {after:?}: {e}"))
}

async fn a_resent_append_is_stored_once(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    let first = store.append(key, Bytes::from("a"), false, 42).await;
    let again = store.append(key, Bytes::from("a"), false, 42).await;
    let (Ok(first), Ok(again)) = (first, again) else {
        panic!("appends failed");
    };
    assert!(!first.duplicate && again.duplicate);
    assert_eq!(first.event.id, again.event.id);
    assert_eq!(payloads(&replay(&mut store, key, Some(0)).await), ["a"]);
}

/// Appends `events` (payload, last, nonce) as one run where the backend commits runs
/// (Redis), one by one elsewhere: the contract is that both give the same results.
async fn append_run(
    store: &mut impl EventStore,
    key: StreamKey,
    events: &[(&str, bool, u64)],
) -> Vec<Result<(u64, bool), StoreError>> {
    let events: Vec<NewEvent> = events
        .iter()
        .map(|&(payload, last, nonce)| NewEvent {
            after: 0,
            payload: Bytes::from(payload.to_owned()),
            last,
            nonce,
        })
        .collect();
    let results = match store.append_detached(key, &events) {
        Some(run) => run.await,
        None => {
            let mut results = Vec::new();
            for e in events {
                results.push(store.append(key, e.payload, e.last, e.nonce).await);
            }
            results
        }
    };
    results
        .into_iter()
        .map(|r| r.map(|a| (a.event.id.seq, a.duplicate)))
        .collect()
}

/// A client resuming past a stream's end: with Redis (whose failover can lose what a
/// client already got) the stream goes on after that position, so no id is issued
/// twice; in memory such an id was never issued, and stays refused. Never on a completed
/// stream.
async fn a_position_past_the_end_is_adopted_only_where_events_can_be_lost(maker: impl Maker) {
    let lossy = maker.lossy();
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=3).await;
    let adopted = store.adopt_position(key, 7).await;
    if !lossy {
        assert_eq!(adopted, Err(StoreError::FuturePosition(7)));
        return;
    }
    assert_eq!(adopted, Ok(()));
    let r = replay(&mut store, key, Some(7)).await;
    assert_eq!((r.position, r.outcome), (7, ReplayOutcome::Complete));
    let next = store.append(key, Bytes::from("e8"), true, 8).await;
    assert_eq!(
        next.map(|a| a.event.id.seq),
        Ok(8),
        "after the adopted position"
    );
    let r = replay(&mut store, key, Some(2)).await;
    assert_eq!(payloads(&r), ["e3", "e8"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 4 });
    assert_eq!(
        store.adopt_position(key, 20).await,
        Err(StoreError::FuturePosition(20)),
        "a completed stream goes on no more"
    );
}

async fn a_run_of_appends_is_stored_as_if_one_by_one(maker: impl Maker) {
    let mut store = maker.store(retention(3)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=1).await;
    let results = append_run(
        &mut store,
        key,
        &[
            ("e1", false, 1001),
            ("a", false, 1),
            ("b", false, 2),
            ("a", false, 1),
            ("c", false, 3),
            ("end", true, 4),
            ("late", false, 5),
        ],
    )
    .await;
    assert_eq!(
        results,
        [
            Ok((1, true)),
            Ok((2, false)),
            Ok((3, false)),
            Ok((2, true)),
            Ok((4, false)),
            Ok((5, false)),
            Err(StoreError::StreamCompleted),
        ]
    );
    // The cap of 3 events applies to the run as to single appends: the oldest go.
    let r = replay(&mut store, key, Some(0)).await;
    assert_eq!(payloads(&r), ["b", "c", "end"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    let unknown = StreamKey::new(SessionId::random(), StreamNo(1));
    let refused = append_run(&mut store, unknown, &[("x", false, 6), ("y", false, 7)]).await;
    assert_eq!(
        refused,
        [
            Err(StoreError::UnknownStream),
            Err(StoreError::UnknownStream)
        ]
    );
}

async fn replays_exactly_the_events_after_the_position(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=10).await;
    let cases: &[(Option<u64>, &[&str])] = &[
        (
            Some(0),
            &["e1", "e2", "e3", "e4", "e5", "e6", "e7", "e8", "e9", "e10"],
        ),
        (Some(5), &["e6", "e7", "e8", "e9", "e10"]),
        (Some(9), &["e10"]),
        (Some(10), &[]),
        (None, &[]),
    ];
    for (after, want) in cases {
        let r = replay(&mut store, key, *after).await;
        assert_eq!(payloads(&r), *want, "after {after:?}");
        assert_eq!(r.outcome, ReplayOutcome::Complete);
        assert_eq!(r.position, 10);
        assert!(!r.completed);
    }
    assert_eq!(
        store.replay_after(key, Some(11)).await.err(),
        Some(StoreError::FuturePosition(11))
    );
    assert_eq!(store.positions(key.session).await, [(StreamNo(1), 10)]);
}

async fn a_replay_is_read_a_page_at_a_time(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=10).await;
    let mut read = Vec::new();
    let mut after = 0;
    loop {
        let page = store
            .replay_page(key, Some(after), 4)
            .await
            .unwrap_or_else(|e| panic!("page after {after}: {e}"));
        assert!(page.events.len() <= 4, "at most a page");
        assert_eq!(page.position, 10, "the stream's end, whatever the page");
        read.extend(payloads(&page));
        match page.events.last() {
            Some(last) if last.id.seq < page.position => after = last.id.seq,
            _ => break,
        }
    }
    let all: Vec<String> = (1..=10).map(|i| format!("e{i}")).collect();
    assert_eq!(read, all);
    let opened = StreamKey::new(key.session, StreamNo(2));
    let empty = store.open_and_replay(opened, Some(0), 4).await;
    assert!(empty.is_ok_and(|r| r.events.is_empty() && r.position == 0));
}

async fn streams_and_sessions_are_isolated(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let s = SessionId::random();
    let a = StreamKey::new(s, StreamNo(1));
    let b = StreamKey::new(s, StreamNo(2));
    let other = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(s).await;
    store.open_session(other.session).await;
    fill(&mut store, a, 1..=3).await;
    fill(&mut store, b, 4..=5).await;
    fill(&mut store, other, 6..=6).await;
    assert_eq!(
        payloads(&replay(&mut store, a, Some(0)).await),
        ["e1", "e2", "e3"]
    );
    let r = replay(&mut store, b, Some(0)).await;
    assert_eq!(payloads(&r), ["e4", "e5"]);
    assert_eq!(r.events[0].id.seq, 1, "positions count per stream");
    assert_eq!(payloads(&replay(&mut store, other, Some(0)).await), ["e6"]);
}

async fn the_session_cap_evicts_oldest_first_and_reports_the_gap(maker: impl Maker) {
    let mut store = maker.store(retention(4)).await;
    let s = SessionId::random();
    let a = StreamKey::new(s, StreamNo(1));
    let b = StreamKey::new(s, StreamNo(2));
    store.open_session(s).await;
    fill(&mut store, a, 1..=3).await;
    fill(&mut store, b, 4..=6).await;
    let r = replay(&mut store, a, Some(0)).await;
    assert_eq!(payloads(&r), ["e3"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    let r = replay(&mut store, a, Some(2)).await;
    assert_eq!(
        r.outcome,
        ReplayOutcome::Complete,
        "nothing after 2 is missing"
    );
    assert_eq!(
        payloads(&replay(&mut store, b, Some(0)).await),
        ["e4", "e5", "e6"]
    );
}

async fn the_byte_budget_evicts_oldest_first_but_keeps_the_newest(maker: impl Maker) {
    let mut store = maker
        .store(Retention {
            max_session_bytes: 10,
            ..retention(100)
        })
        .await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=5).await; // "e1".."e5": 2 bytes each
    assert_eq!(replay(&mut store, key, Some(0)).await.events.len(), 5);
    let big = store
        .append(key, Bytes::from("0123456789ab"), false, 99)
        .await;
    assert!(big.is_ok());
    let r = replay(&mut store, key, Some(0)).await;
    assert_eq!(
        payloads(&r),
        ["0123456789ab"],
        "a 12-byte event alone exceeds 10 bytes and is kept"
    );
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 5 });
    fill(&mut store, key, 7..=8).await;
    assert_eq!(
        payloads(&replay(&mut store, key, Some(6)).await),
        ["e7", "e8"],
        "e7 and e8 fit; the big one went"
    );
    assert_eq!(
        replay(&mut store, key, Some(6)).await.outcome,
        ReplayOutcome::Complete
    );
}

async fn events_expire_after_the_ttl_and_the_window_bounds_old_positions(maker: impl Maker) {
    let mut store = maker
        .store(Retention {
            // Wide enough that a loaded machine still replays e3 before it expires and
            // before position 0 leaves the window.
            event_ttl: Duration::from_secs(1),
            replay_window: Duration::from_millis(2500),
            ..retention(100)
        })
        .await;
    let key = StreamKey::new(SessionId::random(), StreamNo(0));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=2).await;
    until("e1 and e2 to expire", async || {
        let _ = store.sweep().await;
        let r = replay(&mut store, key, Some(0)).await;
        r.events.is_empty() && r.outcome == ReplayOutcome::Truncated { missing: 2 }
    })
    .await;
    fill(&mut store, key, 3..=3).await;
    let r = replay(&mut store, key, Some(0)).await;
    assert_eq!(payloads(&r), ["e3"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    until("position 0 to leave the replay window", async || {
        let r = replay(&mut store, key, Some(0)).await;
        r.outcome == ReplayOutcome::OutsideWindow && r.events.is_empty()
    })
    .await;
}

async fn a_completed_stream_refuses_appends_and_vanishes_once_expired(maker: impl Maker) {
    let mut store = maker
        .store(Retention {
            event_ttl: Duration::from_secs(1),
            ..retention(100)
        })
        .await;
    let key = StreamKey::new(SessionId::random(), StreamNo(3));
    store.open_session(key.session).await;
    assert!(
        store
            .append(key, Bytes::from("done"), true, 1)
            .await
            .is_ok()
    );
    assert_eq!(
        store.append(key, Bytes::from("late"), false, 2).await.err(),
        Some(StoreError::StreamCompleted)
    );
    let r = replay(&mut store, key, Some(0)).await;
    assert!(r.completed && r.events[0].last);
    until("the finished stream to vanish", async || {
        let _ = store.sweep().await;
        store.replay_after(key, Some(0)).await.err() == Some(StoreError::UnknownStream)
    })
    .await;
}

async fn a_cancelled_stream_is_complete_without_a_final_event(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(2));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=2).await;
    store.complete_stream(key).await;
    let r = replay(&mut store, key, Some(1)).await;
    assert!(r.completed);
    assert_eq!(payloads(&r), ["e2"]);
    assert_eq!(
        store.append(key, Bytes::from("late"), false, 7).await.err(),
        Some(StoreError::StreamCompleted)
    );
}

async fn streams_of_unknown_or_forgotten_sessions_are_refused(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    assert_eq!(
        store.append(key, Bytes::from("x"), false, 1).await.err(),
        Some(StoreError::UnknownStream)
    );
    assert_eq!(
        store.open_stream(key).await.err(),
        Some(StoreError::UnknownStream)
    );
    store.open_session(key.session).await;
    assert!(store.open_stream(key).await.is_ok());
    assert_eq!(
        replay(&mut store, key, None).await.position,
        0,
        "an opened stream can be resumed before its first event"
    );
    fill(&mut store, key, 1..=2).await;
    store.forget_session(key.session).await;
    assert_eq!(
        store.append(key, Bytes::from("late"), false, 9).await.err(),
        Some(StoreError::UnknownStream),
        "work still running after the session ended does not resurrect it"
    );
    assert_eq!(
        store.replay_after(key, Some(0)).await.err(),
        Some(StoreError::UnknownStream)
    );
    assert!(store.positions(key.session).await.is_empty());
}

async fn with_replay_disabled_nothing_is_kept(maker: impl Maker) {
    let mut store = maker
        .store(Retention {
            enabled: false,
            ..retention(100)
        })
        .await;
    let key = StreamKey::new(SessionId::random(), StreamNo(0));
    store.open_session(key.session).await;
    fill(&mut store, key, 1..=3).await;
    let r = replay(&mut store, key, Some(1)).await;
    assert_eq!(r.outcome, ReplayOutcome::Disabled);
    assert!(r.events.is_empty());
    assert_eq!(r.position, 3);
}

async fn ten_thousand_events_replay_in_order(maker: impl Maker) {
    let mut store = maker.store(retention(20_000)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session(key.session).await;
    within("10,000 appends", fill(&mut store, key, 1..=10_000)).await;
    let r = replay(&mut store, key, Some(17)).await;
    assert_eq!(r.events.len(), 10_000 - 17);
    assert!(
        r.events
            .iter()
            .zip(18..)
            .all(|(e, seq)| e.id.seq == seq && e.payload == format!("e{seq}"))
    );
}

/// A task record is kept for its time, replaced whole by the next write, and gone after.
async fn task_records_are_replaced_and_expire(maker: impl Maker) {
    let mut store = maker.store(retention(100)).await;
    assert_eq!(store.get_record("t1").await, Ok(None));
    let put = store
        .put_record(
            "t1",
            Bytes::from_static(b"working"),
            Duration::from_secs(60),
        )
        .await;
    assert_eq!(put, Ok(()));
    let put = store
        .put_record(
            "t1",
            Bytes::from_static(b"completed"),
            Duration::from_millis(300),
        )
        .await;
    assert_eq!(put, Ok(()));
    assert_eq!(
        store.get_record("t1").await,
        Ok(Some(Bytes::from_static(b"completed")))
    );
    assert_eq!(store.get_record("t2").await, Ok(None));
    until("the record expires", async || {
        store.sweep().await;
        store.get_record("t1").await == Ok(None)
    })
    .await;
}

/// `tasks.max_per_principal`: a principal holds at most its quota of live records,
/// counted across shards (memory) and replicas (Redis); another principal is untouched by
/// it; a rewrite is not a new record; a deleted or expired record gives its place back.
async fn a_principal_holds_at_most_its_quota_of_records(maker: impl Maker) {
    let limits = Retention {
        max_tasks: 100,
        ..retention(100)
    };
    let (mut a, mut b) = maker.pair(limits).await;
    let long = Duration::from_secs(60);
    let quota = |principal: &str, max| Quota {
        principal: principal.into(),
        max,
    };
    let one = quota("owner:one", 2);
    let x = || Bytes::from_static(b"x");
    assert_eq!(a.create_record("t1", x(), long, &one).await, Ok(()));
    assert_eq!(b.create_record("t2", x(), long, &one).await, Ok(()));
    // Full, whichever shard or replica is asked.
    assert_eq!(
        a.create_record("t3", x(), long, &one).await,
        Err(StoreError::PrincipalFull)
    );
    assert_eq!(
        b.create_record("t3", x(), long, &one).await,
        Err(StoreError::PrincipalFull)
    );
    assert_eq!(a.get_record("t3").await, Ok(None));
    // Another principal still gets its tasks.
    let two = quota("owner:two", 2);
    assert_eq!(b.create_record("u1", x(), long, &two).await, Ok(()));
    // Rewriting a held record is not a new one.
    assert_eq!(a.create_record("t1", x(), long, &one).await, Ok(()));
    // A deleted record gives its place back (asked of the shard that holds it: the
    // store routes a record by its id).
    assert_eq!(a.delete_record("t1", Some("owner:one")).await, Ok(()));
    assert_eq!(a.get_record("t1").await, Ok(None));
    assert_eq!(b.create_record("t3", x(), long, &one).await, Ok(()));
    assert_eq!(
        a.create_record("t4", x(), long, &one).await,
        Err(StoreError::PrincipalFull)
    );
    // An expired record gives its place back without a sweep.
    let three = quota("owner:three", 1);
    let short = Duration::from_millis(300);
    assert_eq!(a.create_record("v1", x(), short, &three).await, Ok(()));
    assert_eq!(
        b.create_record("v2", x(), long, &three).await,
        Err(StoreError::PrincipalFull)
    );
    until("the expired record stops counting", async || {
        b.create_record("v2", x(), long, &three).await == Ok(())
    })
    .await;
}

/// The in-memory store keeps at most `max_tasks` records; Redis is bounded by its memory.
#[tokio::test]
async fn the_memory_store_bounds_its_task_records() {
    let mut store = Memory.store(retention(100)).await;
    let ttl = Duration::from_secs(60);
    for id in ["a", "b", "c"] {
        assert_eq!(
            store.put_record(id, Bytes::from_static(b"x"), ttl).await,
            Ok(())
        );
    }
    assert_eq!(
        store.put_record("d", Bytes::from_static(b"x"), ttl).await,
        Err(StoreError::TooManyTasks)
    );
    // Rewriting a kept record is not a new one.
    assert_eq!(
        store.put_record("a", Bytes::from_static(b"y"), ttl).await,
        Ok(())
    );
}

macro_rules! contract {
    ($($scenario:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Memory).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Redis::server()).await;
                }
            )*
        }
        mod redis_cluster {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Redis::cluster()).await;
                }
            )*
        }
        mod redis_tls {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Redis::tls()).await;
                }
            )*
        }
        mod redis_acl {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Redis::acl()).await;
                }
            )*
        }
    };
}

contract!(
    a_resent_append_is_stored_once,
    a_position_past_the_end_is_adopted_only_where_events_can_be_lost,
    a_run_of_appends_is_stored_as_if_one_by_one,
    replays_exactly_the_events_after_the_position,
    a_replay_is_read_a_page_at_a_time,
    streams_and_sessions_are_isolated,
    the_session_cap_evicts_oldest_first_and_reports_the_gap,
    the_byte_budget_evicts_oldest_first_but_keeps_the_newest,
    events_expire_after_the_ttl_and_the_window_bounds_old_positions,
    a_completed_stream_refuses_appends_and_vanishes_once_expired,
    a_cancelled_stream_is_complete_without_a_final_event,
    streams_of_unknown_or_forgotten_sessions_are_refused,
    with_replay_disabled_nothing_is_kept,
    ten_thousand_events_replay_in_order,
    task_records_are_replaced_and_expire,
    a_principal_holds_at_most_its_quota_of_records,
);

/// Two replicas on one Redis append to and replay the same stream: positions continue,
/// and a re-sent append is recognised whichever replica sees it.
#[tokio::test]
async fn replicas_share_one_ordered_stream() {
    let maker = Redis::server();
    let mut a = maker.store(retention(100)).await;
    let mut b = maker.store(retention(100)).await;
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    a.open_session(key.session).await;
    fill(&mut a, key, 1..=2).await;
    fill(&mut b, key, 3..=4).await;
    let again = b.append(key, Bytes::from("e1"), false, 1001).await;
    assert!(again.is_ok_and(|x| x.duplicate && x.event.id.seq == 1));
    let r = replay(&mut a, key, Some(1)).await;
    assert_eq!(payloads(&r), ["e2", "e3", "e4"]);
    assert_eq!(
        r.events.iter().map(|e| e.id.seq).collect::<Vec<_>>(),
        [2, 3, 4]
    );
}
