//! Model-based test of the in-memory event store: random sequences of appends, replays,
//! completions, forgotten sessions, sweeps and clock steps, under random retention
//! limits, checked after every step against a model of what was appended. Whatever the
//! store evicted, a replay must return the events it still has, exactly as appended, in
//! order, up to the stream's end; say `complete` only when none is missing, and count the
//! missing ones when it says `truncated`; and the store-wide accounting must match what
//! the store holds and stay within its budgets. proptest shrinks any failure to a minimal
//! sequence.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs the default below).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use otpmcp::event_store::{
    EventStore, MemoryStore, ReplayOutcome, Retention, StoreError, StreamKey, StreamNo,
};
use otpmcp::session::SessionId;
use proptest::prelude::*;

const SESSIONS: usize = 3;
const STREAMS: u64 = 3;

#[derive(Debug, Clone)]
enum Op {
    Append {
        session: usize,
        stream: u64,
        size: usize,
    },
    Replay {
        session: usize,
        stream: u64,
        back: u64,
    },
    Complete {
        session: usize,
        stream: u64,
    },
    Forget {
        session: usize,
    },
    Sweep,
    Advance {
        ms: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let session = 0..SESSIONS;
    let stream = 1..=STREAMS;
    prop_oneof![
        6 => (session.clone(), stream.clone(), 1usize..60)
            .prop_map(|(session, stream, size)| Op::Append { session, stream, size }),
        3 => (session.clone(), stream.clone(), 0u64..12)
            .prop_map(|(session, stream, back)| Op::Replay { session, stream, back }),
        1 => (session.clone(), stream).prop_map(|(session, stream)| Op::Complete { session, stream }),
        1 => session.prop_map(|session| Op::Forget { session }),
        1 => Just(Op::Sweep),
        2 => (0u64..2_000).prop_map(|ms| Op::Advance { ms }),
    ]
}

fn retention() -> impl Strategy<Value = Retention> {
    (2usize..16, 40usize..600, 4usize..40, 60usize..1_500).prop_map(
        |(session_events, session_bytes, total_events, total_bytes)| Retention {
            enabled: true,
            event_ttl: Duration::from_secs(3),
            replay_window: Duration::from_secs(4),
            max_session_events: session_events,
            max_session_bytes: session_bytes,
            max_tasks: 10,
            max_total_events: total_events,
            max_total_bytes: total_bytes,
        },
    )
}

/// What was appended: per stream, every payload by position (1-based), and whether the
/// stream ended.
#[derive(Default)]
struct Model {
    sessions: Vec<SessionId>,
    streams: HashMap<StreamKey, (Vec<Bytes>, bool)>,
}

fn run(retention: Retention, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let mut store = MemoryStore::new(retention);
    let mut model = Model::default();
    for _ in 0..SESSIONS {
        let id = SessionId::random();
        store.open_session_now(id);
        model.sessions.push(id);
    }
    let mut now = Instant::now();
    let mut nonce = 0u64;
    for op in ops {
        match op {
            Op::Append {
                session,
                stream,
                size,
            } => {
                let key = StreamKey::new(model.sessions[session], StreamNo(stream));
                nonce += 1;
                let payload = Bytes::from(format!("{nonce:0>width$}", width = size));
                let (log, completed) = model.streams.entry(key).or_default();
                // Nothing appends to a stream after its end (its handler is done). The
                // store refuses it while it keeps the stream, but once eviction has
                // dropped a completed stream an append would start it again: a known
                // gap (docs/reliability.md), so the model does not try.
                if *completed {
                    continue;
                }
                let appended = store
                    .append_at(key, payload.clone(), false, nonce, now)
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
                log.push(payload);
                prop_assert_eq!(appended.event.id.seq, log.len() as u64);
                prop_assert!(!appended.duplicate);
            }
            Op::Replay {
                session,
                stream,
                back,
            } => {
                let key = StreamKey::new(model.sessions[session], StreamNo(stream));
                let Some((log, completed)) = model.streams.get(&key) else {
                    prop_assert_eq!(
                        store.replay_after_at(key, Some(0), now).err(),
                        Some(StoreError::UnknownStream)
                    );
                    continue;
                };
                let end = log.len() as u64;
                let after = end.saturating_sub(back);
                let replay = match store.replay_after_at(key, Some(after), now) {
                    Ok(replay) => replay,
                    // A stream whose every event expired after it ended is dropped.
                    Err(StoreError::UnknownStream) if *completed || log.is_empty() => continue,
                    Err(e) => {
                        return Err(TestCaseError::fail(format!("{key:?} after {after}: {e}")));
                    }
                };
                prop_assert_eq!(replay.position, end);
                prop_assert_eq!(replay.completed, *completed);
                let seqs: Vec<u64> = replay.events.iter().map(|e| e.id.seq).collect();
                for (i, event) in replay.events.iter().enumerate() {
                    prop_assert_eq!(&event.payload, &log[(event.id.seq - 1) as usize]);
                    if i > 0 {
                        prop_assert_eq!(event.id.seq, seqs[i - 1] + 1, "consecutive");
                    }
                }
                if let Some(&last) = seqs.last() {
                    prop_assert_eq!(last, end, "up to the end");
                }
                let first = seqs.first().copied().unwrap_or(end + 1);
                match replay.outcome {
                    ReplayOutcome::Complete => prop_assert_eq!(first, after + 1, "none missing"),
                    ReplayOutcome::Truncated { missing } => {
                        prop_assert!(missing > 0);
                        prop_assert_eq!(first, after + missing + 1, "missing counted");
                    }
                    ReplayOutcome::OutsideWindow => prop_assert!(seqs.is_empty()),
                    ReplayOutcome::Disabled => prop_assert!(false, "replay is enabled"),
                }
            }
            Op::Complete { session, stream } => {
                let key = StreamKey::new(model.sessions[session], StreamNo(stream));
                if let Some((_, completed)) = model.streams.get_mut(&key) {
                    rt.block_on(store.complete_stream(key));
                    *completed = true;
                }
            }
            Op::Forget { session } => {
                let old = model.sessions[session];
                rt.block_on(store.forget_session(old));
                model.streams.retain(|k, _| k.session != old);
                let id = SessionId::random();
                store.open_session_now(id);
                model.sessions[session] = id;
            }
            Op::Sweep => {
                store.sweep_at(now);
            }
            Op::Advance { ms } => now += Duration::from_millis(ms),
        }
        // The store-wide accounting matches what is held, within the budgets.
        let held = store
            .occupancy()
            .ok_or_else(|| TestCaseError::fail("no occupancy"))?;
        prop_assert_eq!(held.events as usize, store.len(), "events accounting");
        prop_assert_eq!(
            held.bytes as usize,
            store.payload_bytes(),
            "bytes accounting"
        );
        prop_assert!(store.len() <= retention.max_total_events);
        // The newest event of a stream stays even alone over a byte budget.
        let biggest = 60 * SESSIONS;
        prop_assert!(held.bytes as usize <= retention.max_total_bytes.max(biggest));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(300)
    ))]

    #[test]
    fn the_memory_store_agrees_with_the_model(
        retention in retention(),
        ops in proptest::collection::vec(op(), 1..120),
    ) {
        run(retention, ops)?;
    }
}
