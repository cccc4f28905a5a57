//! Catching up after the pub/sub feed lost messages (its connection dropped or was
//! replaced, or too many pushes waited): once the feed is back, every followed stream is
//! followed again and read from the store after the position its connection was given, so
//! nothing another replica stored meanwhile is missed. Only a shared backend (Redis) ever
//! needs it.

use std::time::Duration;

use ractor::ActorRef;

use super::StoreMsg;
use super::tables::StoreTables;
use crate::event_store::feed::FeedEnd;
use crate::event_store::{EventStore, ReplayOutcome, StoreError, StreamKey};

/// When the next catch-up runs.
#[derive(Debug)]
pub(super) struct CatchUp {
    /// Wait between attempts (`store.retry_interval`).
    retry: Duration,
    /// An attempt is scheduled.
    scheduled: bool,
}

impl CatchUp {
    pub(super) fn new(retry: Duration) -> Self {
        Self {
            retry,
            scheduled: false,
        }
    }

    /// Schedules one attempt after the retry interval, unless one is pending. A timer
    /// message, so it is serialized with everything else the store does.
    pub(super) fn schedule(&mut self, myself: &ActorRef<StoreMsg>) {
        if !self.scheduled {
            self.scheduled = true;
            myself.send_after(self.retry, || StoreMsg::Resync);
        }
    }

    /// One attempt: retries later if the feed or the backend is not back yet.
    pub(super) async fn run<B: EventStore>(
        &mut self,
        tables: &mut StoreTables<B>,
        myself: &ActorRef<StoreMsg>,
    ) {
        self.scheduled = false;
        if !tables.backend.feed_ready().await {
            self.schedule(myself);
            return;
        }
        match catch_up(tables).await {
            Ok(caught_up) => tracing::info!(
                caught_up,
                "live feed back; followed streams caught up from the store"
            ),
            Err(Retry) => self.schedule(myself),
        }
    }
}

/// The backend failed during a catch-up: try again later.
struct Retry;

/// Follows every stream again, then sends every connection what its stream got since;
/// returns how many events that was.
async fn catch_up<B: EventStore>(tables: &mut StoreTables<B>) -> Result<usize, Retry> {
    let followed: Vec<(StreamKey, u64, bool)> = tables
        .subscribers
        .iter()
        .map(|(key, sub)| (*key, sub.forwarded, sub.position_known))
        .collect();
    let mut caught_up = 0;
    for (key, forwarded, position_known) in followed {
        // Every stream, not only those whose `follow` failed: a pub/sub connection that
        // was replaced (it stopped answering) lost all its subscriptions. Subscribing
        // again where nothing was lost does nothing.
        tables.backend.follow(key).await.map_err(|_| Retry)?;
        if let Some(sub) = tables.subscribers.get_mut(&key) {
            sub.followed = true;
            sub.on_feed = true;
        }
        if let Some(sub) = tables.subscribers.get_mut(&key) {
            // Announcements lost with the feed will not come back.
            sub.awaiting_announce = false;
        }
        // Heard of nothing yet (live-only): nothing to catch up with.
        if !position_known {
            continue;
        }
        match tables.backend.replay_after(key, Some(forwarded)).await {
            Ok(replay) if replay.outcome == ReplayOutcome::Complete => {
                caught_up += replay.events.len();
                let completed = replay.completed;
                let (events, skipped) = tables.already_delivered_removed(key, replay.events);
                tables.send_batch(key, events).await;
                tables.past_skipped(key, skipped);
                if completed {
                    tables.close_subscriber(key, FeedEnd::Completed).await;
                }
            }
            Err(StoreError::Backend(_)) => return Err(Retry),
            // Opened while the backend was away: nothing of it is stored yet.
            Err(StoreError::UnknownStream) => {}
            _ => {
                tables.close_subscriber(key, FeedEnd::Polling).await;
            }
        }
    }
    Ok(caught_up)
}
