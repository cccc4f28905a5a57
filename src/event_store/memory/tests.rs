//! The retention arithmetic of the memory backend: TTL, caps, eviction, windows.

use super::*;

fn retention(max: usize) -> Retention {
    Retention {
        enabled: true,
        event_ttl: Duration::from_secs(60),
        replay_window: Duration::from_secs(600),
        max_session_events: max,
        max_session_bytes: usize::MAX,
        max_tasks: 10,
        max_total_events: usize::MAX,
        max_total_bytes: usize::MAX,
        principal_events: usize::MAX,
        principal_bytes: usize::MAX,
    }
}

fn payloads(r: &Replay) -> Vec<String> {
    r.events
        .iter()
        .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
        .collect()
}

fn fill(store: &mut MemoryStore, key: StreamKey, range: std::ops::RangeInclusive<u32>, t: Instant) {
    store.open_session_now(key.session);
    for i in range {
        let e = store.append_at(key, Bytes::from(format!("e{i}")), false, u64::from(i), t);
        assert!(e.is_ok_and(|a| !a.duplicate));
    }
}

#[test]
fn a_resent_append_is_stored_once() {
    let t = Instant::now();
    let mut store = MemoryStore::new(retention(100));
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    store.open_session_now(key.session);
    let first = store.append_at(key, Bytes::from("a"), false, 42, t);
    let again = store.append_at(key, Bytes::from("a"), false, 42, t);
    let (Ok(first), Ok(again)) = (first, again) else {
        panic!("appends failed");
    };
    assert!(!first.duplicate && again.duplicate);
    assert_eq!(first.event.id, again.event.id);
    assert_eq!(store.len(), 1);
}

#[test]
fn replays_exactly_the_events_after_the_position() {
    let t = Instant::now();
    let mut store = MemoryStore::new(retention(100));
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    fill(&mut store, key, 1..=10, t);
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
        let r = store
            .replay_after_at(key, *after, t)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(payloads(&r), *want, "after {after:?}");
        assert_eq!(r.outcome, ReplayOutcome::Complete);
        assert_eq!(r.position, 10);
    }
    assert_eq!(
        store.replay_after_at(key, Some(11), t).err(),
        Some(StoreError::FuturePosition(11))
    );
}

#[test]
fn streams_of_a_session_are_isolated_and_share_nothing_across_sessions() {
    let t = Instant::now();
    let mut store = MemoryStore::new(retention(100));
    let s = SessionId::random();
    let a = StreamKey::new(s, StreamNo(1));
    let b = StreamKey::new(s, StreamNo(2));
    let other = StreamKey::new(SessionId::random(), StreamNo(1));
    fill(&mut store, a, 1..=3, t);
    fill(&mut store, b, 4..=5, t);
    fill(&mut store, other, 6..=6, t);
    let r = store
        .replay_after_at(a, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads(&r), ["e1", "e2", "e3"]);
    let r = store
        .replay_after_at(b, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads(&r), ["e4", "e5"]);
    assert_eq!(r.events[0].id.seq, 1, "positions count per stream");
    let r = store
        .replay_after_at(other, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads(&r), ["e6"]);
}

#[test]
fn the_session_cap_evicts_oldest_first_and_reports_the_gap() {
    let t = Instant::now();
    let mut store = MemoryStore::new(retention(4));
    let s = SessionId::random();
    let a = StreamKey::new(s, StreamNo(1));
    let b = StreamKey::new(s, StreamNo(2));
    fill(&mut store, a, 1..=3, t);
    fill(&mut store, b, 4..=6, t);
    assert_eq!(store.len(), 4);
    let r = store
        .replay_after_at(a, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads(&r), ["e3"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    let r = store
        .replay_after_at(a, Some(2), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r.outcome,
        ReplayOutcome::Complete,
        "nothing after 2 is missing"
    );
}

#[tokio::test]
async fn the_store_wide_budget_evicts_the_oldest_of_any_session() {
    let t = Instant::now();
    let mut store = MemoryStore::new(Retention {
        max_total_events: 10,
        ..retention(100)
    });
    let old = StreamKey::new(SessionId::random(), StreamNo(1));
    let new = StreamKey::new(SessionId::random(), StreamNo(1));
    fill(&mut store, old, 1..=6, t);
    fill(&mut store, new, 1..=4, t + Duration::from_secs(1));
    assert_eq!(store.len(), 10, "at the budget, nothing goes");
    fill(&mut store, new, 5..=5, t + Duration::from_secs(2));
    assert_eq!(store.len(), 9, "past it, down to nine tenths");
    let r = store
        .replay_after_at(old, Some(0), t + Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    assert_eq!(payloads(&r), ["e3", "e4", "e5", "e6"], "the oldest went");
    let r = store
        .replay_after_at(new, Some(0), t + Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        r.outcome,
        ReplayOutcome::Complete,
        "the newer session is untouched"
    );
    // Forgetting a session gives its share back.
    store.forget_session(old.session).await;
    fill(&mut store, new, 6..=10, t + Duration::from_secs(3));
    assert_eq!(store.len(), 10);
}

#[test]
fn the_byte_budget_evicts_oldest_first_but_keeps_the_newest() {
    let t = Instant::now();
    let mut store = MemoryStore::new(Retention {
        max_session_bytes: 10,
        ..retention(100)
    });
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    fill(&mut store, key, 1..=5, t); // "e1".."e5": 2 bytes each
    assert_eq!(store.len(), 5);
    store
        .append_at(key, Bytes::from("0123456789ab"), false, 99, t)
        .ok();
    assert_eq!(
        store.len(),
        1,
        "a 12-byte event alone exceeds 10 bytes and is kept"
    );
    let r = store
        .replay_after_at(key, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 5 });
    fill(&mut store, key, 7..=8, t);
    assert_eq!(store.len(), 2, "e7 and e8 fit; the big one went");
}

#[test]
fn events_expire_after_the_ttl_and_the_window_bounds_old_positions() {
    let t = Instant::now();
    let mut store = MemoryStore::new(Retention {
        event_ttl: Duration::from_secs(10),
        replay_window: Duration::from_secs(20),
        ..retention(100)
    });
    let key = StreamKey::new(SessionId::random(), StreamNo(0));
    fill(&mut store, key, 1..=2, t);
    fill(&mut store, key, 3..=3, t + Duration::from_secs(8));
    let later = t + Duration::from_secs(11);
    assert_eq!(store.sweep_at(later).expired_events, 2);
    let r = store
        .replay_after_at(key, Some(0), later)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(payloads(&r), ["e3"]);
    assert_eq!(r.outcome, ReplayOutcome::Truncated { missing: 2 });
    let r = store
        .replay_after_at(key, Some(0), t + Duration::from_secs(21))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, ReplayOutcome::OutsideWindow);
    assert!(r.events.is_empty());
}

#[test]
fn a_completed_stream_refuses_appends_and_vanishes_once_expired() {
    let t = Instant::now();
    let mut store = MemoryStore::new(Retention {
        event_ttl: Duration::from_secs(1),
        ..retention(100)
    });
    let key = StreamKey::new(SessionId::random(), StreamNo(3));
    store.open_session_now(key.session);
    assert!(
        store
            .append_at(key, Bytes::from("done"), true, 1, t)
            .is_ok()
    );
    assert_eq!(
        store.append_at(key, Bytes::from("late"), false, 2, t).err(),
        Some(StoreError::StreamCompleted)
    );
    let r = store
        .replay_after_at(key, Some(0), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(r.completed && r.events[0].last);
    let stats = store.sweep_at(t + Duration::from_secs(2));
    assert_eq!(stats.dropped_streams, 1);
    assert_eq!(
        store.replay_after_at(key, Some(0), t).err(),
        Some(StoreError::UnknownStream)
    );
}

#[test]
fn streams_of_unknown_or_forgotten_sessions_are_refused() {
    let t = Instant::now();
    let mut store = MemoryStore::new(retention(100));
    let key = StreamKey::new(SessionId::random(), StreamNo(1));
    assert_eq!(
        store.append_at(key, Bytes::from("x"), false, 1, t).err(),
        Some(StoreError::UnknownStream)
    );
    assert_eq!(
        store.open_stream_at(key, t).err(),
        Some(StoreError::UnknownStream)
    );
    fill(&mut store, key, 1..=2, t);
    store.sessions.remove(&key.session);
    assert_eq!(
        store.append_at(key, Bytes::from("late"), false, 9, t).err(),
        Some(StoreError::UnknownStream),
        "work still running after the session ended does not resurrect it"
    );
    assert!(store.is_empty());
}

#[test]
fn with_replay_disabled_nothing_is_kept() {
    let t = Instant::now();
    let mut store = MemoryStore::new(Retention {
        enabled: false,
        ..retention(100)
    });
    let key = StreamKey::new(SessionId::random(), StreamNo(0));
    fill(&mut store, key, 1..=3, t);
    assert!(store.is_empty());
    let r = store
        .replay_after_at(key, Some(1), t)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, ReplayOutcome::Disabled);
    assert!(r.events.is_empty());
}

/// Follows the hand-offs the store actors would send, from shard `from`.
fn settle(shards: &mut [MemoryStore], mut from: usize) {
    for _ in 0..2 * shards.len() {
        let Some(next) = shards[from].take_trim_elsewhere() else {
            return;
        };
        shards[next].trim();
        from = next;
    }
    panic!("the hand-offs did not end");
}

#[tokio::test]
async fn shards_share_one_budget_and_evict_the_oldest_of_any_shard() {
    let budget = Arc::new(SharedBudget::new(3));
    let limits = Retention {
        max_total_events: 10,
        ..retention(100)
    };
    let mut shards: Vec<MemoryStore> = (0..3)
        .map(|n| MemoryStore::shard(limits, budget.clone(), n))
        .collect();
    let t = Instant::now();
    let at = |s: u64| t + Duration::from_secs(s);
    let keys: Vec<StreamKey> = (0..3)
        .map(|_| StreamKey::new(SessionId::random(), StreamNo(1)))
        .collect();
    // Shard 0 holds the oldest events, shard 2 the newest: 10 in all, the budget.
    for (shard, key) in keys.iter().enumerate() {
        shards[shard].open_session_now(key.session);
    }
    let mut second = 0;
    let mut append = |shards: &mut Vec<MemoryStore>, shard: usize, n: u64| {
        for _ in 0..n {
            let e = shards[shard].append_at(
                keys[shard],
                Bytes::from_static(b"e"),
                false,
                second,
                at(second),
            );
            assert!(e.is_ok());
            second += 1;
            settle(shards, shard);
        }
    };
    append(&mut shards, 0, 4);
    append(&mut shards, 1, 3);
    append(&mut shards, 2, 3);
    assert_eq!(budget.held().0, 10, "at the budget, nothing goes");
    let missing = |shards: &mut Vec<MemoryStore>, shard: usize| {
        let r = shards[shard].replay_after_at(keys[shard], Some(0), at(20));
        match r.map(|r| r.outcome) {
            Ok(ReplayOutcome::Truncated { missing }) => missing,
            Ok(_) => 0,
            Err(e) => panic!("{e}"),
        }
    };
    // Shard 2 goes over; the oldest events are shard 0's, which evicts them.
    append(&mut shards, 2, 1);
    assert_eq!(budget.held().0, 9, "down to nine tenths");
    assert_eq!(
        [0, 1, 2].map(|s| missing(&mut shards, s)),
        [2, 0, 0],
        "the two oldest of the store went, from the shard that held them"
    );
    // Again, twice: shard 0 runs dry, and then shard 1 holds the oldest.
    append(&mut shards, 2, 2);
    append(&mut shards, 2, 2);
    assert_eq!(budget.held().0, 9);
    assert_eq!([0, 1, 2].map(|s| missing(&mut shards, s)), [4, 2, 0]);
    // The shared counts are exactly what the shards hold.
    let held: u64 = shards
        .iter()
        .filter_map(|s| s.occupancy())
        .map(|o| o.events)
        .sum();
    assert_eq!(held, budget.held().0 as u64);
    // Task records count against one budget too.
    let ttl = Duration::from_secs(60);
    for (shard, id) in [
        (0, "a"),
        (1, "b"),
        (2, "c"),
        (0, "d"),
        (1, "e"),
        (2, "f"),
        (0, "g"),
        (1, "h"),
        (2, "i"),
        (0, "j"),
    ] {
        assert!(
            shards[shard]
                .put_record(id, Bytes::new(), ttl)
                .await
                .is_ok()
        );
    }
    assert_eq!(budget.tasks(), 10);
    let refused = shards[1].put_record("k", Bytes::new(), ttl).await;
    assert_eq!(
        refused,
        Err(StoreError::TooManyTasks),
        "max_tasks across shards"
    );
    let replaced = shards[0]
        .put_record("a", Bytes::from_static(b"2"), ttl)
        .await;
    assert!(replaced.is_ok(), "replacing a record needs no room");
}

/// `tasks.principal_event_percent`: a principal's task logs hold at most its share of the
/// store-wide budget, counted across shards. Past it its own oldest task events go (the
/// newest of each log stays), and another principal's older log keeps every event,
/// though the store-wide trim would have taken those first.
#[tokio::test]
async fn a_principals_task_logs_evict_their_own_events_past_its_share() {
    let limits = Retention {
        max_total_events: 10,
        ..retention(100)
    }
    .with_principal_share(40);
    let shared = Arc::new(SharedBudget::new(2));
    let mut first = MemoryStore::shard(limits, shared.clone(), 0);
    let mut second = MemoryStore::shard(limits, shared.clone(), 1);
    let t = Instant::now();
    let quiet = StreamKey::new(SessionId::random(), StreamNo(1));
    let busy = StreamKey::new(SessionId::random(), StreamNo(1));
    let busy_too = StreamKey::new(SessionId::random(), StreamNo(1));
    first.open_task_log_now(quiet.session, "owner:quiet");
    first.open_task_log_now(busy.session, "owner:busy");
    second.open_task_log_now(busy_too.session, "owner:busy");
    fill(&mut first, quiet, 1..=3, t);
    fill(&mut second, busy_too, 1..=3, t + Duration::from_millis(1));
    fill(&mut first, busy, 1..=20, t + Duration::from_millis(2));
    let later = t + Duration::from_millis(3);
    let kept = first.replay_after_at(quiet, Some(0), later);
    assert!(
        kept.as_ref()
            .is_ok_and(|r| r.outcome == ReplayOutcome::Complete && r.events.len() == 3),
        "{kept:?}"
    );
    // Four events (40 % of 10) across both shards: the other shard's three, and the
    // newest of this shard's log, which always stays.
    assert_eq!(shared.principal_held("owner:busy"), (4, 3 * 2 + 3));
    let own = first.replay_after_at(busy, Some(0), later);
    assert!(
        own.as_ref()
            .is_ok_and(|r| r.events.last().is_some_and(|e| e.payload == "e20")),
        "{own:?}"
    );
    // Forgetting a log gives its share back.
    EventStore::forget_session(&mut second, busy_too.session).await;
    assert_eq!(shared.principal_held("owner:busy"), (1, 3));
}
