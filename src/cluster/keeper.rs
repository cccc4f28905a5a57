//! The lease keeper: renews this replica's lease on its own clock, and takes over what
//! a replica whose lease lapsed left behind: its requests are answered (or, for a
//! planned stop, a re-runnable tool's calls run again here), its tasks run again or
//! end. Another replica's planned stop, heard on the bus, wakes it at once.

use tokio_util::task::AbortOnDropHandle;

use super::leases::{Lapsed, Leases, STOPPED_NOTICE, TASK_FIELD, orphan};
use crate::event_store::{EventStoreHandle, StoreCallError, StoreError};
use crate::ids::TaskId;
use crate::tasks::TaskHandle;
use crate::telemetry::metrics;
use crate::transport::Handovers;

/// Heard when another replica announces its planned stop ([`Leases::release`]): the
/// lease keeper reaps at once instead of at its next renewal, so the calls and tasks the
/// stopped replica handed on wait for nobody's timer.
#[derive(Debug, Clone, Default)]
pub struct Stops(std::sync::Arc<tokio::sync::Notify>);

impl Stops {
    /// A replica's notice arrived on the bus (`message`); false if it is not one.
    pub fn heard(&self, message: &[u8], me: u64) -> bool {
        let Some(rest) = message.strip_prefix(STOPPED_NOTICE.as_bytes()) else {
            return false;
        };
        let from = std::str::from_utf8(rest)
            .ok()
            .and_then(|r| r.parse::<u64>().ok());
        if from.is_some_and(|from| from != me) {
            self.0.notify_one();
        }
        true
    }

    async fn next(&self) {
        self.0.notified().await
    }
}

/// Renews this replica's lease on its own clock (a busy actor must not let it lapse) and
/// answers the requests of replicas whose lease lapsed. A task owned by the root
/// supervisor; dropping the keeper stops it.
#[derive(Debug)]
pub struct LeaseKeeper {
    _task: AbortOnDropHandle<()>,
}

impl LeaseKeeper {
    /// Takes the lease (before this replica takes any request: call it before the
    /// listener starts), then keeps it. A lapsed replica's tasks go to `heirs.tasks`, the
    /// calls a stopped replica handed on to `heirs.calls`.
    pub async fn start(leases: Leases, heirs: Heirs) -> Self {
        if let Err(e) = leases.renew().await {
            tracing::warn!(error = %e, "could not take this replica's lease yet");
        }
        Self {
            _task: AbortOnDropHandle::new(tokio::spawn(keep(leases, heirs))),
        }
    }
}

/// Who takes over what a lapsed replica left.
#[derive(Debug, Clone)]
pub struct Heirs {
    /// Where the error answers go.
    pub store: EventStoreHandle,
    /// Runs lost tasks again, or ends them.
    pub tasks: Option<TaskHandle>,
    /// Runs again the calls a replica handed on at its shutdown.
    pub calls: Handovers,
    /// Another replica's planned stop: reap now.
    pub stops: Stops,
}

async fn keep(leases: Leases, heirs: Heirs) {
    let mut tick = tokio::time::interval(leases.interval());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut healthy_since: Option<std::time::Instant> = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = heirs.stops.next() => {}
        }
        match leases.renew().await {
            Ok(lapsed) => {
                let since = *healthy_since.get_or_insert_with(std::time::Instant::now);
                // After an outage every lease looks lapsed: reap only once we have been
                // renewing for a whole lease, so a replica that is alive has had its turn
                // to renew too.
                if since.elapsed() >= leases.ttl() {
                    for replica in lapsed {
                        reap(&leases, &heirs, replica).await;
                    }
                }
            }
            Err(e) => {
                healthy_since = None;
                // The breaker warned when the outage began.
                tracing::debug!(error = %e, "could not renew this replica's lease");
            }
        }
    }
}

/// Answers (or runs again) every request still registered for lapsed replica `lapsed`
/// and ends (or runs again) its tasks, then forgets the replica if nothing is left.
async fn reap(leases: &Leases, heirs: &Heirs, lapsed: Lapsed) {
    let Lapsed { replica, stopped } = lapsed;
    let Ok(entries) = leases.entries(replica).await else {
        return;
    };
    let mut settled_all = true;
    for (field, value) in entries {
        if let Some(id) = field.strip_prefix(TASK_FIELD) {
            let Some(tasks) = &heirs.tasks else {
                settled_all = false;
                continue;
            };
            // Another replica reaping at the same time has it, and settles the entry.
            if !leases.claim(replica, &field).await {
                settled_all = false;
                continue;
            }
            // An entry that names no task (never written so) has nothing to end.
            if let Ok(id) = id.parse::<TaskId>() {
                tasks.orphaned(id, replica, stopped).await;
            }
            metrics::REQUESTS_REAPED.inc();
            settled_all &= leases.settle(replica, &field).await;
            continue;
        }
        let Some(mut orphan) = orphan(lapsed, field, &value) else {
            continue;
        };
        if let Some(handover) = orphan.handover.take().filter(|_| stopped) {
            // One replica runs it again: the one that claims it.
            if !leases.claim(replica, &orphan.field).await {
                settled_all = false;
                continue;
            }
            // Registered here before it leaves the stopped replica's table, so that a
            // shutdown of this replica hands it on again.
            let request = orphan.request.clone();
            if heirs.calls.take(orphan.key, request, handover).await {
                metrics::REQUESTS_REAPED.inc();
                tracing::warn!(stream = ?orphan.key, stopped_replica = replica, "a call handed on by a replica that shut down runs again here");
                settled_all &= leases.settle(replica, &orphan.field).await;
                continue;
            }
            // It cannot run here (its session ended, or this replica is stopping too): the
            // client gets the retryable error.
        }
        // Answer first, then clear the entry: a failure in between leaves it for the next
        // round, and the entry's own nonce makes a second answer (ours or another
        // replica's) a duplicate.
        let answered = match heirs
            .store
            .append_with_nonce(orphan.key, orphan.payload, true, orphan.nonce, 0)
            .await
        {
            Ok(Some(_)) => {
                metrics::REQUESTS_REAPED.inc();
                tracing::warn!(stream = ?orphan.key, lost_replica = replica, stopped, "a request whose replica was lost has its answer");
                true
            }
            // Ended after all, or its session did: nothing to answer.
            Err(StoreCallError::Store(StoreError::StreamCompleted | StoreError::UnknownStream)) => {
                true
            }
            // Not stored (delivered live at most), or the store is away: next round.
            Ok(None) | Err(_) => false,
        };
        settled_all &= answered && leases.settle(replica, &orphan.field).await;
    }
    if settled_all {
        leases.retire(replica).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn another_replicas_stop_notice_wakes_the_keeper_and_our_own_does_not() {
        let stops = Stops::default();
        assert!(
            !stops.heard(br#"{"kind":"session_ended"}"#, 5),
            "session news"
        );
        assert!(
            stops.heard(b"replica-stopped:5", 5),
            "ours: a notice, ignored"
        );
        let asleep = tokio::time::timeout(std::time::Duration::from_millis(20), stops.next());
        assert!(asleep.await.is_err(), "our own stop wakes nobody");
        assert!(stops.heard(b"replica-stopped:3", 5));
        let woken = tokio::time::timeout(std::time::Duration::from_secs(5), stops.next());
        assert!(woken.await.is_ok(), "another's stop wakes the keeper");
    }
}
