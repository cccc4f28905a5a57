//! The memory backend's logs: per session the arrival order of its events and a log per
//! stream, and the totals held across sessions. Arrival order is age order, so eviction
//! (by age, count or bytes) pops the session's front, which is also its stream's front.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::ids::{IdMap, StreamNo};
use crate::telemetry::metrics::{EVENTS_EVICTED, Eviction};

/// Events and bytes held across every session.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Totals {
    pub(super) events: usize,
    pub(super) bytes: usize,
}

impl Totals {
    /// Accounts for a session that held `before` and now holds `after` (events, bytes).
    pub(super) fn apply(&mut self, before: (usize, usize), after: (usize, usize)) {
        self.events = (self.events + after.0).saturating_sub(before.0);
        self.bytes = (self.bytes + after.1).saturating_sub(before.1);
    }
}

/// One session's events: its streams' logs and the order the events arrived in.
#[derive(Debug, Default)]
pub(super) struct SessionLog {
    /// The stream of each retained event of the session, oldest first.
    pub(super) arrivals: VecDeque<StreamNo>,
    /// Payload bytes retained.
    pub(super) bytes: usize,
    pub(super) streams: IdMap<StreamNo, StreamLog>,
    /// The principal whose task's log this session is (`tasks.principal_event_percent`);
    /// `None` for a client's session or an execution's output.
    pub(super) principal: Option<std::sync::Arc<str>>,
}

/// One stream's retained events and what is known of the ones before them.
#[derive(Debug)]
pub(super) struct StreamLog {
    pub(super) opened_at: Instant,
    /// Retained events, consecutive positions, oldest first.
    pub(super) events: VecDeque<Stored>,
    /// Position of the last event appended (0: none yet).
    pub(super) end: u64,
    /// Highest position evicted so far (0: none).
    pub(super) evicted_through: u64,
    pub(super) completed: bool,
    /// Nonces of the latest appends with their positions, to recognise re-sends.
    pub(super) recent: VecDeque<(u64, u64)>,
}

/// How many recent append nonces each stream remembers. A re-send follows a crash of the
/// store actor, so only appends that were queued at that moment can come back.
pub(super) const RECENT_NONCES: usize = 16;

/// One retained event.
#[derive(Debug)]
pub(super) struct Stored {
    pub(super) seq: u64,
    pub(super) at: Instant,
    pub(super) payload: Bytes,
    pub(super) last: bool,
}

impl StreamLog {
    pub(super) fn new(now: Instant) -> Self {
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
    pub(super) fn issued_at(&self, seq: u64) -> Option<Instant> {
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
    pub(super) fn evict_oldest(&mut self) -> bool {
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

    pub(super) fn oldest_at(&self) -> Option<Instant> {
        let stream = self.arrivals.front()?;
        Some(self.streams.get(stream)?.events.front()?.at)
    }
}

pub(super) fn expire_log(log: &mut SessionLog, ttl: Duration, now: Instant) -> usize {
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
