//! The store actor's tables: the backend, and the local connection following each stream
//! with what it was given so far. Forwarding puts events back in order per stream: a
//! duplicate is skipped, a gap (events of another replica not heard of yet) is filled from
//! the store first, and what cannot be filled closes the connection so that its resume
//! reads the store.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use ractor::ActorId;

use crate::event_store::feed::{self, Feed, FeedEnd};
use crate::event_store::{Event, EventStore, ReplayOutcome, StreamKey};

/// What the store actor keeps across its own restarts: the backend and who is listening.
#[derive(Debug, Default)]
pub struct StoreTables<B> {
    /// The events.
    pub backend: B,
    pub(super) subscribers: HashMap<StreamKey, Subscriber>,
}

/// The local connection following a stream.
#[derive(Debug)]
pub(super) struct Subscriber {
    pub(super) feed: feed::Subscriber,
    /// Position of the last event it was given (by replay or forwarding): events at or
    /// before it are duplicates, events after the next one mean some went missing.
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
    unstored: VecDeque<u64>,
}

impl Subscriber {
    pub(super) fn new(feed: feed::Subscriber, forwarded: u64) -> Self {
        Self {
            feed,
            forwarded,
            position_known: true,
            followed: true,
            on_feed: true,
            awaiting_announce: false,
            unstored: VecDeque::new(),
        }
    }
}

/// Most unstored payloads remembered per connection (see [`Subscriber`]).
const UNSTORED_MEMORY: usize = 256;

fn payload_hash(payload: &[u8]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    payload.hash(&mut h);
    h.finish()
}

impl<B: EventStore> StoreTables<B> {
    /// Tables around a configured backend.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            subscribers: HashMap::new(),
        }
    }

    /// Gives `event` to the local connection following its stream, in order: a duplicate
    /// is skipped, and a gap is filled from the store first.
    pub(super) async fn forward(&mut self, key: StreamKey, event: Event) {
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return;
        };
        let seq = event.id.seq;
        if !sub.position_known {
            sub.position_known = true;
            sub.forwarded = seq.saturating_sub(1);
        }
        let forwarded = sub.forwarded;
        if seq <= forwarded {
            return;
        }
        let mut batch = Vec::new();
        let mut skipped = 0;
        if seq > forwarded + 1 {
            match self.backend.replay_after(key, Some(forwarded)).await {
                Ok(replay) if replay.outcome == ReplayOutcome::Complete => {
                    let (events, removed) = self.already_delivered_removed(key, replay.events);
                    batch.extend(events);
                    skipped = removed;
                }
                _ => {
                    // The missing events cannot be read now: close with a retry hint, and
                    // the client's resume reads them from the store.
                    tracing::warn!(stream = ?key, forwarded, seq, "events missing from the live feed; the connection resumes from the store");
                    self.close_subscriber(key, FeedEnd::Polling).await;
                    return;
                }
            }
        }
        if batch.last().is_none_or(|e| e.id.seq < seq) {
            batch.push(event);
        }
        self.send_batch(key, batch).await;
        // Caught up with what is stored: nothing delivered unstored can turn up any more.
        self.past_skipped(key, skipped);
    }

    /// `events` (read back from the store) without those this connection already got live
    /// when their append's outcome was unknown. Also returns the highest position removed,
    /// which the connection must move past once the rest is sent.
    pub(super) fn already_delivered_removed(
        &mut self,
        key: StreamKey,
        mut events: Vec<Event>,
    ) -> (Vec<Event>, u64) {
        let mut skipped = 0;
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return (events, skipped);
        };
        if sub.unstored.is_empty() {
            return (events, skipped);
        }
        events.retain(|event| {
            let hash = payload_hash(&event.payload);
            match sub.unstored.iter().position(|h| *h == hash) {
                Some(i) => {
                    sub.unstored.remove(i);
                    skipped = skipped.max(event.id.seq);
                    false
                }
                None => true,
            }
        });
        (events, skipped)
    }

    /// After a batch: past the events skipped as already delivered, and nothing unstored
    /// can turn up any more.
    pub(super) fn past_skipped(&mut self, key: StreamKey, skipped: u64) {
        if let Some(sub) = self.subscribers.get_mut(&key) {
            sub.forwarded = sub.forwarded.max(skipped);
            sub.unstored.clear();
        }
    }

    /// Sends events after the subscriber's position, in order.
    pub(super) async fn send_batch(&mut self, key: StreamKey, batch: Vec<Event>) {
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return;
        };
        let mut ended = false;
        for event in batch {
            if event.id.seq <= sub.forwarded {
                continue;
            }
            sub.forwarded = event.id.seq;
            let last = event.last;
            if sub.feed.send_message(Feed::Event(event)).is_err() || last {
                ended = true;
                break;
            }
        }
        if ended {
            // Gone, or nothing more will be forwarded on this stream.
            self.drop_subscriber(key).await;
        }
    }

    /// Delivers an event the backend could not store to the stream's connection, live
    /// only. `unconfirmed`: the append may still have been stored, so it is remembered and
    /// not delivered again if a gap fill reads it back.
    pub(super) async fn deliver_unstored(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        unconfirmed: bool,
    ) {
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return;
        };
        if unconfirmed {
            if sub.unstored.len() == UNSTORED_MEMORY {
                sub.unstored.pop_front();
            }
            sub.unstored.push_back(payload_hash(&payload));
        }
        if sub
            .feed
            .send_message(Feed::Unstored { payload, last })
            .is_err()
            || last
        {
            self.drop_subscriber(key).await;
        }
    }

    /// Forgets the stream's connection and stops hearing of the stream.
    pub(super) async fn drop_subscriber(&mut self, key: StreamKey) {
        if self.subscribers.remove(&key).is_some_and(|sub| sub.on_feed) {
            self.backend.unfollow(key).await;
        }
    }

    /// Drops `subscriber` if it still follows `key` (a newer connection may have
    /// superseded it).
    pub(super) async fn unsubscribe(&mut self, key: StreamKey, subscriber: ActorId) {
        if self
            .subscribers
            .get(&key)
            .is_some_and(|s| s.feed.get_id() == subscriber)
        {
            self.drop_subscriber(key).await;
        }
    }

    /// Tells the stream's connection to close; true if one was open.
    pub(super) async fn close_subscriber(&mut self, key: StreamKey, end: FeedEnd) -> bool {
        let open = self
            .subscribers
            .get(&key)
            .is_some_and(|sub| sub.feed.send_message(Feed::End(end)).is_ok());
        self.drop_subscriber(key).await;
        open
    }

    /// Stops the stream's connection: a newer one (on another replica) took over.
    pub(super) async fn supersede(&mut self, key: StreamKey) {
        if let Some(sub) = self.subscribers.get(&key) {
            sub.feed.stop(Some(feed::SUPERSEDED.to_owned()));
        }
        self.drop_subscriber(key).await;
    }

    /// Closes every connection of `session` (it ended).
    pub(super) async fn close_session(&mut self, session: crate::ids::SessionId) {
        let keys: Vec<StreamKey> = self
            .subscribers
            .keys()
            .filter(|key| key.session == session)
            .copied()
            .collect();
        for key in keys {
            self.close_subscriber(key, FeedEnd::SessionEnded).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ractor::{Actor, ActorProcessingErr, ActorRef};
    use tokio::sync::mpsc;

    use super::*;
    use crate::event_store::{MemoryStore, Retention, StoreError};
    use crate::ids::{SessionId, StreamNo};

    /// Passes on what the store feeds it.
    struct Sink;

    impl Actor for Sink {
        type Msg = Feed;
        type State = mpsc::UnboundedSender<Feed>;
        type Arguments = mpsc::UnboundedSender<Feed>;
        async fn pre_start(
            &self,
            _: ActorRef<Feed>,
            tx: Self::Arguments,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(tx)
        }
        async fn handle(
            &self,
            _: ActorRef<Feed>,
            msg: Feed,
            tx: &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            let _ = tx.send(msg);
            Ok(())
        }
    }

    async fn sink() -> (feed::Subscriber, mpsc::UnboundedReceiver<Feed>) {
        let (tx, rx) = mpsc::unbounded_channel();
        match Actor::spawn(None, Sink, tx).await {
            Ok((actor, _)) => (actor.get_derived(), rx),
            Err(e) => panic!("sink: {e}"),
        }
    }

    /// Tables over a memory store holding events 1..=`n` of one stream.
    async fn tables_with(n: u64) -> (StoreTables<MemoryStore>, StreamKey, Vec<Event>) {
        let mut tables = StoreTables::new(MemoryStore::new(Retention::default()));
        let key = StreamKey::new(SessionId::random(), StreamNo(1));
        tables.backend.open_session(key.session).await;
        let mut events = Vec::new();
        for i in 1..=n {
            let payload = Bytes::from(format!("{{\"n\":{i}}}"));
            match tables.backend.append(key, payload, false, i).await {
                Ok(appended) => events.push(appended.event),
                Err(e) => panic!("append: {e}"),
            }
        }
        (tables, key, events)
    }

    async fn next_seq(rx: &mut mpsc::UnboundedReceiver<Feed>) -> Option<u64> {
        match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
            Ok(Some(Feed::Event(e))) => Some(e.id.seq),
            _ => None,
        }
    }

    #[tokio::test]
    async fn forwarding_skips_duplicates_and_fills_gaps_from_the_store() {
        let (mut tables, key, events) = tables_with(5).await;
        let (feed, mut rx) = sink().await;
        tables.subscribers.insert(key, Subscriber::new(feed, 1));
        tables.forward(key, events[4].clone()).await;
        for want in 2..=5 {
            assert_eq!(next_seq(&mut rx).await, Some(want));
        }
        tables.forward(key, events[2].clone()).await;
        assert!(rx.try_recv().is_err(), "a duplicate is not sent again");
        assert_eq!(tables.subscribers.get(&key).map(|s| s.forwarded), Some(5));
    }

    #[tokio::test]
    async fn an_event_delivered_unstored_is_not_delivered_again_when_read_back() {
        let (mut tables, key, events) = tables_with(3).await;
        let (feed, mut rx) = sink().await;
        tables.subscribers.insert(key, Subscriber::new(feed, 1));
        // Event 2's append timed out: delivered live, then found stored by a gap fill.
        tables
            .deliver_unstored(key, events[1].payload.clone(), false, true)
            .await;
        assert!(matches!(rx.recv().await, Some(Feed::Unstored { .. })));
        tables.forward(key, events[2].clone()).await;
        assert_eq!(next_seq(&mut rx).await, Some(3));
        assert!(rx.try_recv().is_err(), "event 2 came once, unstored");
    }

    #[tokio::test]
    async fn a_gap_that_cannot_be_filled_closes_the_connection_for_a_resume() {
        let (mut tables, key, events) = tables_with(3).await;
        let (feed, mut rx) = sink().await;
        tables.subscribers.insert(key, Subscriber::new(feed, 1));
        tables.backend.forget_session(key.session).await;
        assert_eq!(
            tables.backend.replay_after(key, Some(1)).await.err(),
            Some(StoreError::UnknownStream)
        );
        tables.forward(key, events[2].clone()).await;
        assert!(matches!(rx.recv().await, Some(Feed::End(FeedEnd::Polling))));
        assert!(tables.subscribers.is_empty());
    }

    #[tokio::test]
    async fn the_last_event_ends_the_subscription() {
        let (mut tables, key, _) = tables_with(1).await;
        let (feed, mut rx) = sink().await;
        tables.subscribers.insert(key, Subscriber::new(feed, 1));
        let last = tables
            .backend
            .append(key, Bytes::from_static(b"{}"), true, 99)
            .await;
        let Ok(last) = last else {
            panic!("append failed");
        };
        tables.forward(key, last.event).await;
        assert_eq!(next_seq(&mut rx).await, Some(2));
        assert!(tables.subscribers.is_empty());
    }
}
