//! The store actor's tables: the backend, and the local connections following each stream
//! (`subscribers::Subscriber`) with what they were given so far. Forwarding puts
//! events back in order per stream: a duplicate is skipped, a gap (events of another
//! replica not heard of yet) is filled from the store first, and what cannot be filled
//! closes the connection so that its resume reads the store.
//!
//! One connection per stream is active and gets every event. On a request stream an older
//! connection is parked when a newer one arrives, instead of being closed: it gets only the
//! stream's last event (the response), and the newest parked connection becomes active
//! again if the active one leaves. Closing the older one made clients that reconnect a
//! stream in the background while also resuming it (the Python SDK) close each other in
//! turn, and the resume never got its answer. At most `max_per_stream` connections follow
//! a stream; past it the oldest parked one is closed with a `retry:` hint (superseded). The
//! standalone stream never ends, so a parked connection would only wait: there the newer
//! connection supersedes the older at once.

use bytes::Bytes;
use ractor::ActorId;

use super::subscribers::{Subscriber, UNSTORED_MEMORY, payload_hash};
use crate::event_store::feed::{Feed, FeedEnd};
use crate::event_store::{Event, EventStore, ReplayOutcome, StreamKey};
use crate::ids::IdMap;

/// Connections one stream may have on a replica unless configured
/// (`sse.max_connections_per_stream`).
pub const DEFAULT_MAX_PER_STREAM: usize = 4;

/// What the store actor keeps across its own restarts: the backend and who is listening.
#[derive(Debug)]
pub struct StoreTables<B> {
    /// The events.
    pub backend: B,
    pub(super) subscribers: IdMap<StreamKey, Subscriber>,
    /// Most connections (active and parked) following one stream.
    max_per_stream: usize,
}

impl<B: EventStore + Default> Default for StoreTables<B> {
    fn default() -> Self {
        Self::new(B::default())
    }
}

impl<B: EventStore> StoreTables<B> {
    /// Tables around a configured backend.
    pub fn new(backend: B) -> Self {
        Self {
            backend,
            subscribers: IdMap::default(),
            max_per_stream: DEFAULT_MAX_PER_STREAM,
        }
    }

    /// With `sse.max_connections_per_stream` (at least 1).
    pub fn with_max_per_stream(mut self, max: usize) -> Self {
        self.max_per_stream = max.max(1);
        self
    }

    /// Registers `new` as the active connection of `key`. On a request stream the
    /// connections already there stay, parked; on the standalone stream they are closed.
    pub(super) fn insert(&mut self, key: StreamKey, mut new: Subscriber) {
        let Some(mut previous) = self.subscribers.remove(&key) else {
            self.subscribers.insert(key, new);
            return;
        };
        // A re-sent Subscribe from the same actor must not park or close itself.
        let new_id = new.feed.as_ref().map(|f| f.get_id());
        if new_id.is_some_and(|id| previous.is_active(id)) {
            previous.feed = None;
        }
        if key.stream.is_standalone() {
            // A stop, not a message: ractor handles it before the events already queued
            // for the old connection, which the new one gets by replay.
            previous.stop_all();
        } else {
            previous.park_active(self.max_per_stream - 1);
            new.parked = previous.parked;
        }
        self.subscribers.insert(key, new);
    }

    /// Gives `event` to the connections following its stream, in order: a duplicate is
    /// skipped, and a gap is filled from the store first.
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
        // Parked connections wait only for the last event: no gap to fill for them.
        if seq > forwarded + 1 && sub.feed.is_some() {
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

    /// Sends events after the active connection's position, in order; the last event goes
    /// to the parked connections too. An active connection found gone hands over to the
    /// newest parked one, which gets what it missed from the store.
    pub(super) async fn send_batch(&mut self, key: StreamKey, mut batch: Vec<Event>) {
        loop {
            let Some(sub) = self.subscribers.get_mut(&key) else {
                return;
            };
            let mut gone = false;
            for event in batch {
                if event.id.seq <= sub.forwarded {
                    continue;
                }
                sub.forwarded = event.id.seq;
                if event.last {
                    for parked in &sub.parked {
                        let _ = parked.feed.send_message(Feed::Event(event.clone()));
                    }
                    if let Some(feed) = &sub.feed {
                        let _ = feed.send_message(Feed::Event(event));
                    }
                    // Nothing more will be forwarded on this stream.
                    self.drop_subscriber(key).await;
                    return;
                }
                if let Some(feed) = &sub.feed
                    && feed.send_message(Feed::Event(event)).is_err()
                {
                    gone = true;
                    break;
                }
            }
            if !gone {
                return;
            }
            match self.promote(key).await {
                Some(missed) => batch = missed,
                None => return,
            }
        }
    }

    /// The active connection left: the newest parked one takes over and gets what it
    /// missed (returned, to be sent); with none parked, the stream is no longer followed.
    async fn promote(&mut self, key: StreamKey) -> Option<Vec<Event>> {
        let sub = self.subscribers.get_mut(&key)?;
        sub.feed = None;
        let Some(next) = sub.parked.pop() else {
            self.drop_subscriber(key).await;
            return None;
        };
        sub.feed = Some(next.feed);
        sub.forwarded = next.position;
        sub.unstored.clear();
        match self.backend.replay_after(key, Some(next.position)).await {
            Ok(replay) if replay.outcome == ReplayOutcome::Complete => Some(replay.events),
            _ => {
                // What it missed cannot be read now: it resumes from the store.
                if let Some(feed) = self.subscribers.get_mut(&key).and_then(|s| s.feed.take()) {
                    let _ = feed.send_message(Feed::End(FeedEnd::Polling));
                }
                self.vacated(key).await;
                None
            }
        }
    }

    /// Forgets the stream if nobody follows it any more.
    async fn vacated(&mut self, key: StreamKey) {
        if self
            .subscribers
            .get(&key)
            .is_some_and(|s| s.feed.is_none() && s.parked.is_empty())
        {
            self.drop_subscriber(key).await;
        }
    }

    /// Delivers an event the backend could not store to the stream's connection, live
    /// only (the last one to the parked connections too). `unconfirmed`: the append may
    /// still have been stored, so it is remembered and not delivered again if a gap fill
    /// reads it back.
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
        if last {
            for feed in sub.connections() {
                let payload = payload.clone();
                let _ = feed.send_message(Feed::Unstored { payload, last });
            }
            self.drop_subscriber(key).await;
            return;
        }
        let sent = sub
            .feed
            .as_ref()
            .is_none_or(|feed| feed.send_message(Feed::Unstored { payload, last }).is_ok());
        if !sent {
            // Unstored events cannot be replayed to a successor: it resumes from the store.
            sub.feed = None;
            if let Some(missed) = self.promote(key).await {
                self.send_batch(key, missed).await;
            }
        }
    }

    /// Forgets the stream's connections and stops hearing of the stream.
    pub(super) async fn drop_subscriber(&mut self, key: StreamKey) {
        if self.subscribers.remove(&key).is_some_and(|sub| sub.on_feed) {
            self.backend.unfollow(key).await;
        }
    }

    /// `subscriber` left the stream: if it was the active connection, the newest parked
    /// one takes over.
    pub(super) async fn unsubscribe(&mut self, key: StreamKey, subscriber: ActorId) {
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return;
        };
        if sub.is_active(subscriber) {
            if let Some(missed) = self.promote(key).await {
                self.send_batch(key, missed).await;
            }
            return;
        }
        sub.parked.retain(|p| p.feed.get_id() != subscriber);
        self.vacated(key).await;
    }

    /// Tells the stream's connections to close; true if one was open.
    pub(super) async fn close_subscriber(&mut self, key: StreamKey, end: FeedEnd) -> bool {
        // Every connection is told, so no short-circuiting.
        let told = self.subscribers.get(&key).map_or(0, |sub| {
            sub.connections()
                .filter(|feed| feed.send_message(Feed::End(end)).is_ok())
                .count()
        });
        self.drop_subscriber(key).await;
        told > 0
    }

    /// A newer connection on another replica took over the stream: the local active one is
    /// parked (a request stream) or stopped (the standalone stream).
    pub(super) async fn supersede(&mut self, key: StreamKey) {
        let max_parked = self.max_per_stream - 1;
        let Some(sub) = self.subscribers.get_mut(&key) else {
            return;
        };
        if key.stream.is_standalone() {
            sub.stop_all();
            self.drop_subscriber(key).await;
            return;
        }
        // Still followed, so that the parked connections hear the last event.
        sub.park_active(max_parked);
        self.vacated(key).await;
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
    use crate::event_store::feed;
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

    async fn append(tables: &mut StoreTables<MemoryStore>, key: StreamKey, last: bool) -> Event {
        let nonce = rand_nonce();
        match tables
            .backend
            .append(key, Bytes::from_static(b"{}"), last, nonce)
            .await
        {
            Ok(appended) => appended.event,
            Err(e) => panic!("append: {e}"),
        }
    }

    fn rand_nonce() -> u64 {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1 << 32);
        NEXT.fetch_add(1, Ordering::Relaxed)
    }

    /// True once the sink behind `rx` stopped (its sender went with its state).
    async fn stopped(rx: &mut mpsc::UnboundedReceiver<Feed>) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(5), rx.recv()).await,
            Ok(None)
        )
    }

    #[tokio::test]
    async fn an_older_connection_is_parked_and_gets_only_the_last_event() {
        let (mut tables, key, _) = tables_with(2).await;
        let (older, mut older_rx) = sink().await;
        let (newer, mut newer_rx) = sink().await;
        tables.insert(key, Subscriber::new(older, 2));
        tables.insert(key, Subscriber::new(newer, 2));
        let third = append(&mut tables, key, false).await;
        tables.forward(key, third).await;
        assert_eq!(next_seq(&mut newer_rx).await, Some(3));
        let last = append(&mut tables, key, true).await;
        tables.forward(key, last).await;
        assert_eq!(next_seq(&mut newer_rx).await, Some(4));
        assert_eq!(next_seq(&mut older_rx).await, Some(4), "the response only");
        assert!(tables.subscribers.is_empty());
    }

    #[tokio::test]
    async fn when_the_active_connection_leaves_the_newest_parked_one_takes_over() {
        let (mut tables, key, _) = tables_with(2).await;
        let (oldest, mut oldest_rx) = sink().await;
        let (older, mut older_rx) = sink().await;
        let (newer, _newer_rx) = sink().await;
        let newer_id = newer.get_id();
        tables.insert(key, Subscriber::new(oldest, 2));
        tables.insert(key, Subscriber::new(older, 2));
        tables.insert(key, Subscriber::new(newer, 2));
        let third = append(&mut tables, key, false).await;
        tables.forward(key, third).await;
        tables.unsubscribe(key, newer_id).await;
        assert_eq!(next_seq(&mut older_rx).await, Some(3), "what it missed");
        let fourth = append(&mut tables, key, false).await;
        tables.forward(key, fourth).await;
        assert_eq!(next_seq(&mut older_rx).await, Some(4));
        assert!(oldest_rx.try_recv().is_err(), "still parked");
    }

    #[tokio::test]
    async fn past_the_cap_the_oldest_parked_connection_is_closed() {
        let (tables, key, _) = tables_with(1).await;
        let mut tables = tables.with_max_per_stream(2);
        let (a, mut a_rx) = sink().await;
        let (b, mut b_rx) = sink().await;
        let (c, _c_rx) = sink().await;
        for feed in [a, b, c] {
            tables.insert(key, Subscriber::new(feed, 1));
        }
        assert!(stopped(&mut a_rx).await, "the oldest is superseded");
        assert!(b_rx.try_recv().is_err(), "the next is parked");
    }

    #[tokio::test]
    async fn on_the_standalone_stream_a_newer_connection_closes_the_older() {
        let (mut tables, _, _) = tables_with(0).await;
        let key = StreamKey::new(SessionId::random(), StreamNo::STANDALONE);
        let (older, mut older_rx) = sink().await;
        let (newer, _newer_rx) = sink().await;
        tables.insert(key, Subscriber::new(older, 0));
        tables.insert(key, Subscriber::new(newer, 0));
        assert!(stopped(&mut older_rx).await);
    }
}
