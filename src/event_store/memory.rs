//! The in-memory backend: per session, one ordered log per stream plus one queue of the
//! session's events in arrival order.
//!
//! Arrival order is also age order, so both the TTL and the per-session cap evict from the
//! front of that queue in O(1) per event, and the evicted event is always the front of its
//! own stream's log. Replay finds its starting point by arithmetic on positions (logs hold
//! consecutive positions), so it costs O(events returned).
//!
//! Size: half of this file is the unit tests of the retention arithmetic (TTL, caps,
//! eviction, windows), kept beside the code they check.

use crate::telemetry::metrics::{EVENTS_EVICTED, Eviction};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{
    Appended, Event, EventStore, Occupancy, Replay, ReplayOutcome, Retention, StoreError,
    StreamKey, StreamNo, SweepStats,
};
use crate::ids::SessionId;

/// In-process event storage. Not shared: the store actor owns it (lent by the supervisor,
/// so it outlives a crash of the actor).
#[derive(Debug)]
pub struct MemoryStore {
    retention: Retention,
    sessions: HashMap<SessionId, SessionLog>,
    /// Events and bytes held across every session, against `sse.max_total_*`.
    totals: Totals,
    /// Task records with the instant each expires.
    tasks: HashMap<String, (Bytes, Instant)>,
}

/// Events and bytes held across every session.
#[derive(Debug, Default, Clone, Copy)]
struct Totals {
    events: usize,
    bytes: usize,
}

impl Totals {
    /// Accounts for a session that held `before` and now holds `after` (events, bytes).
    fn apply(&mut self, before: (usize, usize), after: (usize, usize)) {
        self.events = (self.events + after.0).saturating_sub(before.0);
        self.bytes = (self.bytes + after.1).saturating_sub(before.1);
    }
}

#[derive(Debug, Default)]
struct SessionLog {
    /// The stream of each retained event of the session, oldest first.
    arrivals: VecDeque<StreamNo>,
    /// Payload bytes retained.
    bytes: usize,
    streams: HashMap<StreamNo, StreamLog>,
}

#[derive(Debug)]
struct StreamLog {
    opened_at: Instant,
    /// Retained events, consecutive positions, oldest first.
    events: VecDeque<Stored>,
    /// Position of the last event appended (0: none yet).
    end: u64,
    /// Highest position evicted so far (0: none).
    evicted_through: u64,
    completed: bool,
    /// Nonces of the latest appends with their positions, to recognise re-sends.
    recent: VecDeque<(u64, u64)>,
}

/// How many recent append nonces each stream remembers. A re-send follows a crash of the
/// store actor, so only appends that were queued at that moment can come back.
const RECENT_NONCES: usize = 16;

#[derive(Debug)]
struct Stored {
    seq: u64,
    at: Instant,
    payload: Bytes,
    last: bool,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Retention::default())
    }
}

impl StreamLog {
    fn new(now: Instant) -> Self {
        Self {
            opened_at: now,
            events: VecDeque::new(),
            end: 0,
            evicted_through: 0,
            completed: false,
            recent: VecDeque::new(),
        }
    }

    /// When position `seq` was issued, if we still know.
    fn issued_at(&self, seq: u64) -> Option<Instant> {
        if seq == 0 {
            return Some(self.opened_at);
        }
        let first = self.events.front()?.seq;
        let index = usize::try_from(seq.checked_sub(first)?).ok()?;
        self.events.get(index).map(|e| e.at)
    }
}

impl SessionLog {
    /// Evicts the session's oldest event.
    fn evict_oldest(&mut self) -> bool {
        let Some(stream) = self.arrivals.pop_front() else {
            return false;
        };
        if let Some(log) = self.streams.get_mut(&stream) {
            if let Some(old) = log.events.pop_front() {
                log.evicted_through = old.seq;
                self.bytes = self.bytes.saturating_sub(old.payload.len());
            }
            if log.completed && log.events.is_empty() {
                self.streams.remove(&stream);
            }
        }
        true
    }

    fn oldest_at(&self) -> Option<Instant> {
        let stream = self.arrivals.front()?;
        Some(self.streams.get(stream)?.events.front()?.at)
    }
}

impl MemoryStore {
    /// An empty store with the given limits.
    pub fn new(retention: Retention) -> Self {
        Self {
            retention,
            sessions: HashMap::new(),
            totals: Totals::default(),
            tasks: HashMap::new(),
        }
    }

    /// Events and payload bytes `session` holds.
    fn size_of(&self, session: SessionId) -> (usize, usize) {
        self.sessions
            .get(&session)
            .map_or((0, 0), |s| (s.arrivals.len(), s.bytes))
    }

    /// Past `sse.max_total_events` or `sse.max_total_bytes`, evicts the oldest events of
    /// any session until the store is back under nine tenths of both: one pass over the
    /// sessions per batch, not per event.
    fn enforce_totals(&mut self) {
        let (max_events, max_bytes) = (
            self.retention.max_total_events,
            self.retention.max_total_bytes,
        );
        if self.totals.events <= max_events && self.totals.bytes <= max_bytes {
            return;
        }
        // Nine tenths, rounded up: a small budget still keeps all but what it must drop.
        let (low_events, low_bytes) = (max_events - max_events / 10, max_bytes - max_bytes / 10);
        let mut oldest: BinaryHeap<Reverse<(Instant, SessionId)>> = self
            .sessions
            .iter()
            .filter_map(|(id, s)| Some(Reverse((s.oldest_at()?, *id))))
            .collect();
        while self.totals.events > low_events || self.totals.bytes > low_bytes {
            let Some(Reverse((_, id))) = oldest.pop() else {
                break;
            };
            let Some(log) = self.sessions.get_mut(&id) else {
                continue;
            };
            let before = (log.arrivals.len(), log.bytes);
            log.evict_oldest();
            let after = (log.arrivals.len(), log.bytes);
            if let Some(at) = log.oldest_at() {
                oldest.push(Reverse((at, id)));
            }
            self.totals.apply(before, after);
            EVENTS_EVICTED.inc(Eviction::Total);
        }
    }

    /// Number of events held, for tests and metrics.
    pub fn len(&self) -> usize {
        self.sessions.values().map(|s| s.arrivals.len()).sum()
    }

    /// Payload bytes held, counted afresh (for tests).
    pub fn payload_bytes(&self) -> usize {
        self.sessions.values().map(|s| s.bytes).sum()
    }

    /// True when no event is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn expire(&mut self, session: SessionId, now: Instant) -> usize {
        let ttl = self.retention.event_ttl;
        let before = self.size_of(session);
        let Some(log) = self.sessions.get_mut(&session) else {
            return 0;
        };
        let n = expire_log(log, ttl, now);
        let after = self.size_of(session);
        self.totals.apply(before, after);
        n
    }

    /// [`EventStore::open_session`].
    pub fn open_session_now(&mut self, session: SessionId) {
        self.sessions.entry(session).or_default();
    }

    /// [`EventStore::open_stream`] at time `now`.
    pub fn open_stream_at(&mut self, key: StreamKey, now: Instant) -> Result<(), StoreError> {
        self.sessions
            .get_mut(&key.session)
            .ok_or(StoreError::UnknownStream)?
            .streams
            .entry(key.stream)
            .or_insert_with(|| StreamLog::new(now));
        Ok(())
    }

    /// [`EventStore::append`] at time `now`.
    pub fn append_at(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
        now: Instant,
    ) -> Result<Appended, StoreError> {
        let before = self.size_of(key.session);
        let appended = self.append_to_session(key, payload, last, nonce, now);
        let after = self.size_of(key.session);
        self.totals.apply(before, after);
        self.enforce_totals();
        appended
    }

    fn append_to_session(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
        now: Instant,
    ) -> Result<Appended, StoreError> {
        let retention = self.retention;
        let session = self
            .sessions
            .get_mut(&key.session)
            .ok_or(StoreError::UnknownStream)?;
        let log = session
            .streams
            .entry(key.stream)
            .or_insert_with(|| StreamLog::new(now));
        if let Some(&(_, seq)) = log.recent.iter().find(|(n, _)| *n == nonce) {
            let event = Event {
                id: key.event_id(seq),
                payload,
                last,
            };
            return Ok(Appended {
                event,
                duplicate: true,
            });
        }
        if log.completed {
            return Err(StoreError::StreamCompleted);
        }
        log.end += 1;
        if log.recent.len() == RECENT_NONCES {
            log.recent.pop_front();
        }
        log.recent.push_back((nonce, log.end));
        log.completed = last;
        let seq = log.end;
        let event = Event {
            id: key.event_id(seq),
            payload,
            last,
        };
        if retention.enabled {
            log.events.push_back(Stored {
                seq,
                at: now,
                payload: event.payload.clone(),
                last,
            });
            session.arrivals.push_back(key.stream);
            session.bytes += event.payload.len();
            // The newest event always stays, even alone over the byte budget, so the
            // stream's end can still be replayed.
            loop {
                let reason = if session.arrivals.len() > retention.max_session_events {
                    Eviction::Cap
                } else if session.bytes > retention.max_session_bytes && session.arrivals.len() > 1
                {
                    Eviction::Bytes
                } else {
                    break;
                };
                session.evict_oldest();
                EVENTS_EVICTED.inc(reason);
            }
        } else {
            log.evicted_through = seq;
            if last {
                session.streams.remove(&key.stream);
            }
        }
        Ok(Appended {
            event,
            duplicate: false,
        })
    }

    /// [`EventStore::replay_after`] at time `now`.
    pub fn replay_after_at(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        now: Instant,
    ) -> Result<Replay, StoreError> {
        self.replay_page_at(key, after, usize::MAX, now)
    }

    /// [`EventStore::replay_page`] at time `now`.
    pub fn replay_page_at(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
        now: Instant,
    ) -> Result<Replay, StoreError> {
        self.expire(key.session, now);
        let retention = self.retention;
        let log = self
            .sessions
            .get(&key.session)
            .and_then(|s| s.streams.get(&key.stream))
            .ok_or(StoreError::UnknownStream)?;
        let mut replay = Replay {
            events: Vec::new(),
            outcome: ReplayOutcome::Complete,
            position: log.end,
            completed: log.completed,
        };
        let Some(after) = after else {
            return Ok(replay);
        };
        if after > log.end {
            return Err(StoreError::FuturePosition(after));
        }
        if !retention.enabled {
            replay.outcome = ReplayOutcome::Disabled;
            return Ok(replay);
        }
        if let Some(issued) = log.issued_at(after)
            && now.saturating_duration_since(issued) > retention.replay_window
        {
            replay.outcome = ReplayOutcome::OutsideWindow;
            EVENTS_EVICTED.add(Eviction::Window, log.end - after);
            return Ok(replay);
        }
        if log.evicted_through > after {
            replay.outcome = ReplayOutcome::Truncated {
                missing: log.evicted_through - after,
            };
        }
        // Logs hold consecutive positions, so the start is found by arithmetic.
        let first = log.events.front().map_or(log.end + 1, |e| e.seq);
        let skip = if after < first {
            0
        } else {
            usize::try_from(after - first + 1)
                .unwrap_or(usize::MAX)
                .min(log.events.len())
        };
        replay.events = log
            .events
            .range(skip..)
            .take(max)
            .map(|e| Event {
                id: key.event_id(e.seq),
                payload: e.payload.clone(),
                last: e.last,
            })
            .collect();
        Ok(replay)
    }

    /// [`EventStore::sweep`] at time `now`.
    pub fn sweep_at(&mut self, now: Instant) -> SweepStats {
        let ttl = self.retention.event_ttl;
        let mut stats = SweepStats::default();
        for log in self.sessions.values_mut() {
            let before = log.streams.len();
            let size = (log.arrivals.len(), log.bytes);
            stats.expired_events += expire_log(log, ttl, now);
            stats.dropped_streams += before - log.streams.len();
            self.totals.apply(size, (log.arrivals.len(), log.bytes));
        }
        stats
    }
}

fn expire_log(log: &mut SessionLog, ttl: Duration, now: Instant) -> usize {
    let mut n = 0;
    while log
        .oldest_at()
        .is_some_and(|at| now.saturating_duration_since(at) > ttl)
    {
        log.evict_oldest();
        n += 1;
    }
    EVENTS_EVICTED.add(Eviction::Ttl, n as u64);
    n
}

impl EventStore for MemoryStore {
    async fn open_session(&mut self, session: SessionId) {
        self.open_session_now(session);
    }

    async fn open_stream(&mut self, key: StreamKey) -> Result<(), StoreError> {
        self.open_stream_at(key, Instant::now())
    }

    async fn append(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Result<Appended, StoreError> {
        self.append_at(key, payload, last, nonce, Instant::now())
    }

    async fn replay_page(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> Result<Replay, StoreError> {
        self.replay_page_at(key, after, max, Instant::now())
    }

    async fn complete_stream(&mut self, key: StreamKey) {
        if let Some(log) = self
            .sessions
            .get_mut(&key.session)
            .and_then(|s| s.streams.get_mut(&key.stream))
        {
            log.completed = true;
        }
    }

    async fn forget_session(&mut self, session: SessionId) {
        let size = self.size_of(session);
        self.sessions.remove(&session);
        self.totals.apply(size, (0, 0));
    }

    async fn sweep(&mut self) -> SweepStats {
        let now = Instant::now();
        self.tasks.retain(|_, (_, expires)| *expires > now);
        self.sweep_at(now)
    }

    async fn put_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let now = Instant::now();
        if !self.tasks.contains_key(id) && self.tasks.len() >= self.retention.max_tasks {
            // Expired records still count until a sweep: drop them before refusing.
            self.tasks.retain(|_, (_, expires)| *expires > now);
            if self.tasks.len() >= self.retention.max_tasks {
                return Err(StoreError::TooManyTasks);
            }
        }
        self.tasks.insert(id.to_owned(), (record, now + ttl));
        Ok(())
    }

    async fn get_record(&mut self, id: &str) -> Result<Option<Bytes>, StoreError> {
        Ok(self
            .tasks
            .get(id)
            .filter(|(_, expires)| *expires > Instant::now())
            .map(|(record, _)| record.clone()))
    }

    async fn positions(&self, session: SessionId) -> Vec<(StreamNo, u64)> {
        let mut out: Vec<_> = self
            .sessions
            .get(&session)
            .map(|s| s.streams.iter().map(|(n, l)| (*n, l.end)).collect())
            .unwrap_or_default();
        out.sort_unstable();
        out
    }

    fn open_streams(&self, session: SessionId, limit: usize) -> Vec<(StreamNo, u64)> {
        let mut out: Vec<_> = self
            .sessions
            .get(&session)
            .map(|s| {
                s.streams
                    .iter()
                    .filter(|(_, l)| !l.completed)
                    .map(|(n, l)| (*n, l.end))
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable_by(|a, b| b.cmp(a));
        out.truncate(limit);
        out
    }

    fn occupancy(&self) -> Option<Occupancy> {
        // The running totals (what the budget is enforced on), not a recount: the model
        // test compares them with what the sessions hold.
        Some(Occupancy {
            sessions: self.sessions.len() as u64,
            events: self.totals.events as u64,
            bytes: self.totals.bytes as u64,
        })
    }

    fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }
}

#[cfg(test)]
mod tests {
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
        }
    }

    fn payloads(r: &Replay) -> Vec<String> {
        r.events
            .iter()
            .map(|e| String::from_utf8_lossy(&e.payload).into_owned())
            .collect()
    }

    fn fill(
        store: &mut MemoryStore,
        key: StreamKey,
        range: std::ops::RangeInclusive<u32>,
        t: Instant,
    ) {
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
}
