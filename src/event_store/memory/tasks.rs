//! The memory backend's task side: task records with their expiry, counted against
//! `tasks.max_tasks` and each principal's `tasks.max_per_principal` in the budget the
//! shards share, and each principal's share of the event budget for its tasks' logs
//! (`tasks.principal_event_percent`).

use std::cmp::Reverse;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{MemoryStore, OldestFirst};
use crate::event_store::{Quota, StoreError};
use crate::ids::SessionId;
use crate::telemetry::metrics::Eviction;

impl MemoryStore {
    pub(super) fn drop_expired_tasks(&mut self, now: Instant) {
        let before = self.tasks.len();
        let shared = &self.shared;
        self.tasks.retain(|id, (_, expires, principal)| {
            let live = *expires > now;
            if let (false, Some(principal)) = (live, principal.as_deref()) {
                shared.release_for(principal, id);
            }
            live
        });
        self.shared.release_tasks(before - self.tasks.len());
    }

    /// Counts a new record against `tasks.max_tasks`, unless `id` is held already.
    fn reserve_task(&mut self, id: &str, now: Instant) -> Result<(), StoreError> {
        let max = self.retention.max_tasks;
        if !self.tasks.contains_key(id) && !self.shared.reserve_task(max) {
            // Expired records still count until a sweep: drop this shard's before
            // refusing (other shards drop theirs at their next sweep).
            self.drop_expired_tasks(now);
            if !self.shared.reserve_task(max) {
                return Err(StoreError::TooManyTasks);
            }
        }
        Ok(())
    }

    /// [`crate::event_store::EventStore::put_record`] at time `now`.
    pub(super) fn put_record_at(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        now: Instant,
    ) -> Result<(), StoreError> {
        self.reserve_task(id, now)?;
        let principal = self
            .tasks
            .remove(id)
            .and_then(|(_, _, principal)| principal);
        self.tasks
            .insert(id.to_owned(), (record, now + ttl, principal));
        Ok(())
    }

    /// [`crate::event_store::EventStore::create_record`] at time `now`.
    pub(super) fn create_record_at(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        quota: &Quota,
        now: Instant,
    ) -> Result<(), StoreError> {
        let expires = now + ttl;
        // The principal's count first: a principal at its cap takes nothing from the
        // store-wide one. Both are shared by every shard, so the count is exact.
        if !self
            .shared
            .reserve_for(&quota.principal, id, expires, quota.max, now)
        {
            return Err(StoreError::PrincipalFull);
        }
        if let Err(e) = self.reserve_task(id, now) {
            self.shared.release_for(&quota.principal, id);
            return Err(e);
        }
        self.tasks.insert(
            id.to_owned(),
            (record, expires, Some(quota.principal.clone())),
        );
        Ok(())
    }

    /// [`crate::event_store::EventStore::delete_record`].
    pub(super) fn delete_record_now(&mut self, id: &str, principal: Option<&str>) {
        if let Some((_, _, held_by)) = self.tasks.remove(id) {
            self.shared.release_tasks(1);
            if let Some(principal) = held_by.as_deref().or(principal) {
                self.shared.release_for(principal, id);
            }
        }
    }

    /// [`crate::event_store::EventStore::get_record`] at time `now`.
    pub(super) fn get_record_at(&self, id: &str, now: Instant) -> Option<Bytes> {
        self.tasks
            .get(id)
            .filter(|(_, expires, _)| *expires > now)
            .map(|(record, _, _)| record.clone())
    }

    /// Past `principal`'s share of the store-wide budget (`tasks.principal_event_percent`,
    /// counted across shards), evicts its own task logs' oldest events in this shard,
    /// never another session's, and never the newest event of a log (a reader still
    /// learns how its task ended). So one principal's task events cannot push the store
    /// over its budget, where the store-wide trim would evict others' events.
    pub(super) fn enforce_share(&mut self, principal: &Arc<str>) {
        let (max_events, max_bytes) = (
            self.retention.principal_events,
            self.retention.principal_bytes,
        );
        let over = |held: (usize, usize)| held.0 > max_events || held.1 > max_bytes;
        if !over(self.shared.principal_held(principal)) {
            return;
        }
        let mut oldest: OldestFirst = self
            .sessions
            .iter()
            .filter(|(_, s)| s.principal.as_ref() == Some(principal) && s.arrivals.len() > 1)
            .filter_map(|(id, s)| Some(Reverse((s.oldest_at()?, *id))))
            .collect();
        while over(self.shared.principal_held(principal)) {
            // Its logs were chosen by principal: accounting by the log's is accounting by it.
            if !self.evict_next(&mut oldest, 1, Eviction::Principal) {
                break;
            }
        }
    }

    /// [`EventStore::open_task_log`].
    pub fn open_task_log_now(&mut self, session: SessionId, principal: &str) {
        let log = self.sessions.entry(session).or_default();
        if log.principal.is_none() {
            log.principal = Some(Arc::from(principal));
        }
    }
}
