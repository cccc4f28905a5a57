//! The local connections following one stream: the active one, the parked ones, and what
//! the active one was given so far. [`super::tables::StoreTables`] keeps one per stream
//! and decides who is active.

use std::collections::VecDeque;

use ractor::ActorId;

use crate::event_store::feed;

#[derive(Debug)]
pub(super) struct Subscriber {
    /// The active connection; `None` once a newer one on another replica took over.
    pub(super) feed: Option<feed::Subscriber>,
    /// Older connections, oldest first: they get only the stream's last event.
    pub(super) parked: Vec<Parked>,
    /// Position of the last event the active connection was given (by replay or
    /// forwarding): events at or before it are duplicates, events after the next one mean
    /// some went missing.
    pub(super) forwarded: u64,
    /// `forwarded` is real. False for a live-only stream opened while the backend was
    /// down: its position is taken from the first event heard, with no gap filled (the
    /// client asked for live events, not the stream's history).
    pub(super) position_known: bool,
    /// Nothing more to do to hear of other processes' events on this stream. False after
    /// a failed `follow`; the catch-up retries it.
    pub(super) followed: bool,
    /// Subscribed to the backend's feed for this stream (so leaving it unsubscribes).
    pub(super) on_feed: bool,
    /// Our announcement that we follow the stream has not come back yet: a "superseded"
    /// from another replica heard before it was published before ours, so it is stale.
    pub(super) awaiting_announce: bool,
    /// Hashes of payloads delivered live without being stored since the last stored
    /// event: one whose append failed with an unknown outcome may turn up stored in a
    /// later gap fill, and is not delivered twice.
    pub(super) unstored: VecDeque<u64>,
}

/// An older connection on a stream, and the position it had been given when a newer one
/// took over.
#[derive(Debug)]
pub(super) struct Parked {
    pub(super) feed: feed::Subscriber,
    pub(super) position: u64,
}

impl Subscriber {
    pub(super) fn new(feed: feed::Subscriber, forwarded: u64) -> Self {
        Self {
            feed: Some(feed),
            parked: Vec::new(),
            forwarded,
            position_known: true,
            followed: true,
            on_feed: true,
            awaiting_announce: false,
            unstored: VecDeque::new(),
        }
    }

    /// Whether the active connection is `id`.
    pub(super) fn is_active(&self, id: ActorId) -> bool {
        self.feed.as_ref().is_some_and(|f| f.get_id() == id)
    }

    /// Parks the active connection behind the connections already parked, then closes
    /// the oldest parked ones beyond `max_parked` (superseded).
    pub(super) fn park_active(&mut self, max_parked: usize) {
        if let Some(feed) = self.feed.take() {
            self.parked.push(Parked {
                feed,
                position: self.forwarded,
            });
        }
        let excess = self.parked.len().saturating_sub(max_parked);
        for old in self.parked.drain(..excess) {
            old.feed.stop(Some(feed::SUPERSEDED.to_owned()));
        }
    }

    /// Every connection of the stream, active first.
    pub(super) fn connections(&self) -> impl Iterator<Item = &feed::Subscriber> {
        self.feed.iter().chain(self.parked.iter().map(|p| &p.feed))
    }

    /// Closes every connection at once, without the events queued for them.
    pub(super) fn stop_all(&self) {
        for feed in self.connections() {
            feed.stop(Some(feed::SUPERSEDED.to_owned()));
        }
    }
}

/// Most unstored payloads remembered per connection (see [`Subscriber`]).
pub(super) const UNSTORED_MEMORY: usize = 256;

pub(super) fn payload_hash(payload: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}
