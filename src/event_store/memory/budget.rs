//! The store-wide budget the shards of the in-memory store share: events, payload bytes
//! and task records held across all of them (`sse.max_total_*`, `tasks.max_tasks`), and
//! where each shard's oldest event is, so that eviction takes the oldest of the whole
//! store first.
//!
//! The counts are atomics every shard adds its own changes to, so they are exact at every
//! moment: a shard never estimates what the others hold. Eviction stays with the shard
//! that owns the events (no shard touches another's tables): a shard that finds the store
//! over budget evicts its own events while they are the oldest anywhere, and hands the
//! rest of the work to the shard that holds older ones (see
//! [`super::MemoryStore::trim`]). A per-shard share of the budget would need no hand-off,
//! but one busy session could then use only `1/shards` of the memory the operator gave
//! the store, and eviction would take a busy shard's recent events before a quiet
//! shard's old ones.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Moves `counter` by `after - before`.
fn shift(counter: &AtomicUsize, before: usize, after: usize) {
    match after.cmp(&before) {
        std::cmp::Ordering::Greater => {
            counter.fetch_add(after - before, Ordering::Relaxed);
        }
        std::cmp::Ordering::Less => {
            counter.fetch_sub(before - after, Ordering::Relaxed);
        }
        std::cmp::Ordering::Equal => {}
    }
}

/// Published when a shard holds no event (as far as it last looked).
const NONE_HELD: u64 = u64::MAX;

/// What the shards of one in-memory store hold together.
#[derive(Debug)]
pub struct SharedBudget {
    events: AtomicUsize,
    bytes: AtomicUsize,
    tasks: AtomicUsize,
    /// Per principal, its live task records (`tasks.max_per_principal`): id and expiry.
    /// A map, not a counter, so that a record that expired in any shard stops counting at
    /// once, without waiting for that shard's sweep. Locked only to create or drop a
    /// task record (a few times in a task's life), never on an append.
    principals: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// Per principal, the events and payload bytes its task logs hold across shards
    /// (`tasks.principal_event_percent`). Locked only on a change to a task log.
    task_logs: Mutex<HashMap<Arc<str>, (usize, usize)>>,
    /// Per shard, when its oldest event arrived, in nanoseconds after `base`: never later
    /// than the truth (an eviction or expiry only makes the truth later), or
    /// [`NONE_HELD`] while the shard holds nothing.
    oldest: Box<[AtomicU64]>,
    base: Instant,
}

impl SharedBudget {
    /// An empty budget for `shards` shards (at least one).
    pub fn new(shards: usize) -> Self {
        Self {
            events: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            tasks: AtomicUsize::new(0),
            principals: Mutex::new(HashMap::new()),
            task_logs: Mutex::new(HashMap::new()),
            oldest: (0..shards.max(1))
                .map(|_| AtomicU64::new(NONE_HELD))
                .collect(),
            base: Instant::now(),
        }
    }

    /// Events and payload bytes held by all shards.
    pub fn held(&self) -> (usize, usize) {
        (
            self.events.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }

    /// A shard that held `before` (events, bytes) now holds `after`: one atomic add or
    /// subtract per count that changed (the line they share is written by every shard).
    pub(super) fn apply(&self, before: (usize, usize), after: (usize, usize)) {
        shift(&self.events, before.0, after.0);
        shift(&self.bytes, before.1, after.1);
    }

    fn task_logs(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, (usize, usize)>> {
        self.task_logs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A task log of `principal` that held `before` (events, bytes) now holds `after`.
    pub(super) fn apply_principal(
        &self,
        principal: &Arc<str>,
        before: (usize, usize),
        after: (usize, usize),
    ) {
        if before == after {
            return;
        }
        let mut logs = self.task_logs();
        let held = logs.entry(principal.clone()).or_default();
        held.0 = (held.0 + after.0).saturating_sub(before.0);
        held.1 = (held.1 + after.1).saturating_sub(before.1);
        if *held == (0, 0) {
            logs.remove(principal);
        }
    }

    /// Events and payload bytes `principal`'s task logs hold across shards.
    pub fn principal_held(&self, principal: &str) -> (usize, usize) {
        self.task_logs().get(principal).copied().unwrap_or((0, 0))
    }

    /// Counts one more task record if fewer than `max` are held; false if not.
    pub(super) fn reserve_task(&self, max: usize) -> bool {
        self.tasks
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    /// `n` task records were dropped.
    pub(super) fn release_tasks(&self, n: usize) {
        self.tasks.fetch_sub(n, Ordering::Relaxed);
    }

    fn principals(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Instant>>> {
        self.principals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts record `id` (kept until `expires`) against `principal` if it holds fewer
    /// than `max` live ones at `now` (an id it holds already is a rewrite); false if not.
    pub(super) fn reserve_for(
        &self,
        principal: &str,
        id: &str,
        expires: Instant,
        max: usize,
        now: Instant,
    ) -> bool {
        let mut principals = self.principals();
        let held = principals.entry(principal.to_owned()).or_default();
        held.retain(|_, until| *until > now);
        if !held.contains_key(id) && held.len() >= max {
            return false;
        }
        held.insert(id.to_owned(), expires);
        true
    }

    /// Record `id` of `principal` was dropped (deleted, expired, or never stored).
    pub(super) fn release_for(&self, principal: &str, id: &str) {
        let mut principals = self.principals();
        if let Some(held) = principals.get_mut(principal) {
            held.remove(id);
            if held.is_empty() {
                principals.remove(principal);
            }
        }
    }

    /// Task records held by all shards.
    #[cfg(any(test, feature = "testing"))]
    pub fn tasks(&self) -> usize {
        self.tasks.load(Ordering::Relaxed)
    }

    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(NONE_HELD - 1)
    }

    /// Shard `shard`'s oldest event arrived at `at` (`None`: it holds nothing).
    pub(super) fn publish_oldest(&self, shard: usize, at: Option<Instant>) {
        if let Some(slot) = self.oldest.get(shard) {
            slot.store(at.map_or(NONE_HELD, |at| self.nanos(at)), Ordering::Relaxed);
        }
    }

    /// Shard `shard` just stored an event at `at`: if it published that it held nothing,
    /// it now holds this one (the newest, so an older published time stays right).
    pub(super) fn note_arrival(&self, shard: usize, at: Instant) {
        if let Some(slot) = self.oldest.get(shard)
            && slot.load(Ordering::Relaxed) == NONE_HELD
        {
            slot.store(self.nanos(at), Ordering::Relaxed);
        }
    }

    /// The shard other than `me` that holds the oldest event, if it arrived before `than`
    /// (or if `than` is `None`).
    pub(super) fn older_elsewhere(&self, me: usize, than: Option<Instant>) -> Option<usize> {
        let than = than.map_or(NONE_HELD, |at| self.nanos(at));
        self.oldest
            .iter()
            .enumerate()
            .filter(|(shard, _)| *shard != me)
            .map(|(shard, at)| (at.load(Ordering::Relaxed), shard))
            .filter(|(at, _)| *at != NONE_HELD && *at < than)
            .min()
            .map(|(_, shard)| shard)
    }
}
