//! The in-memory backend: per session, one ordered log per stream plus one queue of the
//! session's events in arrival order.
//!
//! Arrival order is also age order, so both the TTL and the per-session cap evict from the
//! front of that queue in O(1) per event, and the evicted event is always the front of its
//! own stream's log. Replay finds its starting point by arithmetic on positions (logs hold
//! consecutive positions), so it costs O(events returned).
//!
//! `logs` holds the per-session and per-stream logs; `tests` the unit tests of the
//! retention arithmetic (TTL, caps, eviction, windows).

mod budget;
mod logs;
mod tasks;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{
    Appended, Event, EventStore, Occupancy, Quota, Replay, ReplayOutcome, Retention, StoreError,
    StreamKey, StreamNo, SweepStats,
};
use crate::ids::{IdMap, SessionId};
use crate::telemetry::metrics::{EVENTS_EVICTED, Eviction};
pub use budget::SharedBudget;
use logs::{RECENT_NONCES, SessionLog, Stored, StreamLog, Totals, expire_log};

/// Session logs by the age of their oldest event, oldest first.
type OldestFirst = BinaryHeap<Reverse<(Instant, SessionId)>>;

/// In-process event storage: one shard of it. Not shared: its store actor owns it (lent by
/// the supervisor, so it outlives a crash of the actor). The shards of one store share a
/// [`SharedBudget`].
#[derive(Debug)]
pub struct MemoryStore {
    retention: Retention,
    sessions: IdMap<SessionId, SessionLog>,
    /// Events and bytes this shard holds.
    totals: Totals,
    /// What all shards hold, against `sse.max_total_*` and `tasks.max_tasks`.
    shared: Arc<SharedBudget>,
    /// This shard's index in `shared`.
    shard: usize,
    /// The store is over budget and another shard holds older events: it should trim.
    trim_elsewhere: Option<usize>,
    /// Task records with the instant each expires, and the principal whose quota each
    /// counts against (created with one).
    tasks: HashMap<String, (Bytes, Instant, Option<String>)>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new(Retention::default())
    }
}

impl MemoryStore {
    /// An empty store with the given limits, alone in its budget.
    pub fn new(retention: Retention) -> Self {
        Self::shard(retention, Arc::new(SharedBudget::new(1)), 0)
    }

    /// An empty shard `shard` of a store whose shards share `shared`.
    pub fn shard(retention: Retention, shared: Arc<SharedBudget>, shard: usize) -> Self {
        Self {
            retention,
            sessions: IdMap::default(),
            totals: Totals::default(),
            shared,
            shard,
            trim_elsewhere: None,
            tasks: HashMap::new(),
        }
    }

    /// Accounts for a session that held `before` and now holds `after` (events, bytes),
    /// here and in the shared budget, and in its principal's share if it is a task log.
    fn account(
        &mut self,
        principal: Option<&Arc<str>>,
        before: (usize, usize),
        after: (usize, usize),
    ) {
        self.totals.apply(before, after);
        self.shared.apply(before, after);
        if let Some(principal) = principal {
            self.shared.apply_principal(principal, before, after);
        }
    }

    /// Events and payload bytes `session` holds.
    fn size_of(&self, session: SessionId) -> (usize, usize) {
        self.sessions
            .get(&session)
            .map_or((0, 0), |s| (s.arrivals.len(), s.bytes))
    }

    /// Evicts the oldest event of the log `oldest` names first, and puts that log back
    /// while it holds more than `keep` events; false once `oldest` is empty. The one step
    /// of the store-wide trim and of a principal's share.
    fn evict_next(&mut self, oldest: &mut OldestFirst, keep: usize, why: Eviction) -> bool {
        let Some(Reverse((_, id))) = oldest.pop() else {
            return false;
        };
        let Some(log) = self.sessions.get_mut(&id) else {
            return true;
        };
        let before = (log.arrivals.len(), log.bytes);
        log.evict_oldest();
        let after = (log.arrivals.len(), log.bytes);
        if log.arrivals.len() > keep
            && let Some(at) = log.oldest_at()
        {
            oldest.push(Reverse((at, id)));
        }
        let principal = log.principal.clone();
        self.account(principal.as_ref(), before, after);
        EVENTS_EVICTED.inc(why);
        true
    }

    /// Past `sse.max_total_events` or `sse.max_total_bytes` (across all shards), evicts
    /// the oldest events of the store until it is back under nine tenths of both (see
    /// [`Self::trim`]).
    fn enforce_totals(&mut self) {
        let (events, bytes) = self.shared.held();
        if events > self.retention.max_total_events || bytes > self.retention.max_total_bytes {
            self.trim();
        }
    }

    /// Evicts this shard's oldest events while the store is over nine tenths of its
    /// budget and they are the oldest of any shard: one pass over the sessions per batch,
    /// not per event. Where another shard holds older events, it is named in
    /// [`Self::take_trim_elsewhere`] for the store actor to hand the rest over to.
    pub fn trim(&mut self) {
        let (max_events, max_bytes) = (
            self.retention.max_total_events,
            self.retention.max_total_bytes,
        );
        // Nine tenths, rounded up: a small budget still keeps all but what it must drop.
        let (low_events, low_bytes) = (max_events - max_events / 10, max_bytes - max_bytes / 10);
        self.trim_elsewhere = None;
        let (events, bytes) = self.shared.held();
        if events <= low_events && bytes <= low_bytes {
            // A hand-off that came after other shards trimmed enough: no pass needed.
            return;
        }
        let mut oldest: OldestFirst = self
            .sessions
            .iter()
            .filter_map(|(id, s)| Some(Reverse((s.oldest_at()?, *id))))
            .collect();
        loop {
            let mine = oldest.peek().map(|Reverse((at, _))| *at);
            let (events, bytes) = self.shared.held();
            if events <= low_events && bytes <= low_bytes {
                break;
            }
            if let Some(other) = self.shared.older_elsewhere(self.shard, mine) {
                self.trim_elsewhere = Some(other);
                break;
            }
            if !self.evict_next(&mut oldest, 0, Eviction::Total) {
                break;
            }
        }
        let mine = oldest.peek().map(|Reverse((at, _))| *at);
        self.shared.publish_oldest(self.shard, mine);
    }

    /// The shard the last append or trim found holding older events while the store is
    /// over budget; taken once.
    pub fn take_trim_elsewhere(&mut self) -> Option<usize> {
        self.trim_elsewhere.take()
    }

    /// Number of events held, for tests and metrics.
    #[cfg(any(test, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.sessions.values().map(|s| s.arrivals.len()).sum()
    }

    /// Payload bytes held, counted afresh (for tests).
    #[cfg(any(test, feature = "testing"))]
    pub fn payload_bytes(&self) -> usize {
        self.sessions.values().map(|s| s.bytes).sum()
    }

    /// True when no event is held.
    #[cfg(any(test, feature = "testing"))]
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
        let principal = log.principal.clone();
        let after = self.size_of(session);
        self.account(principal.as_ref(), before, after);
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
        // One lookup for the size and, for a task's log, its principal.
        let (after, principal) = self.sessions.get(&key.session).map_or(((0, 0), None), |s| {
            ((s.arrivals.len(), s.bytes), s.principal.clone())
        });
        self.account(principal.as_ref(), before, after);
        if after.0 > before.0 {
            self.shared.note_arrival(self.shard, now);
        }
        if let Some(principal) = principal {
            self.enforce_share(&principal);
        }
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
    #[cfg(any(test, feature = "testing"))]
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
        let mut oldest: Option<Instant> = None;
        for log in self.sessions.values_mut() {
            let before = log.streams.len();
            let size = (log.arrivals.len(), log.bytes);
            stats.expired_events += expire_log(log, ttl, now);
            stats.dropped_streams += before - log.streams.len();
            let held = (log.arrivals.len(), log.bytes);
            self.totals.apply(size, held);
            self.shared.apply(size, held);
            if let Some(principal) = &log.principal {
                self.shared.apply_principal(principal, size, held);
            }
            oldest = oldest.into_iter().chain(log.oldest_at()).min();
        }
        // The pass over the sessions is made anyway: publish the truth, which expiry made
        // later.
        self.shared.publish_oldest(self.shard, oldest);
        // Shards that take no appends trim here.
        self.enforce_totals();
        stats
    }
}

impl EventStore for MemoryStore {
    async fn open_session(&mut self, session: SessionId) {
        self.open_session_now(session);
    }

    async fn open_task_log(&mut self, session: SessionId, principal: &str) {
        self.open_task_log_now(session, principal);
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
        let principal = self.sessions.remove(&session).and_then(|s| s.principal);
        self.account(principal.as_ref(), size, (0, 0));
    }

    async fn sweep(&mut self) -> SweepStats {
        let now = Instant::now();
        self.drop_expired_tasks(now);
        self.sweep_at(now)
    }

    async fn put_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        self.put_record_at(id, record, ttl, Instant::now())
    }

    async fn create_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        quota: &Quota,
    ) -> Result<(), StoreError> {
        self.create_record_at(id, record, ttl, quota, Instant::now())
    }

    async fn delete_record(&mut self, id: &str, principal: Option<&str>) -> Result<(), StoreError> {
        self.delete_record_now(id, principal);
        Ok(())
    }

    async fn get_record(&mut self, id: &str) -> Result<Option<Bytes>, StoreError> {
        Ok(self.get_record_at(id, Instant::now()))
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

    fn trim(&mut self) {
        MemoryStore::trim(self);
    }

    fn take_trim_elsewhere(&mut self) -> Option<usize> {
        MemoryStore::take_trim_elsewhere(self)
    }
}

#[cfg(test)]
mod tests;
