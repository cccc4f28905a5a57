//! A stream actor's state, and how it writes to its connection: events in order and once,
//! a replay paced by the client's reading, and the bounds that make a slow client a
//! disconnected one.
//!
//! A replay is written as the client reads it: the store hands it over a page at a time
//! ([`crate::event_store::REPLAY_PAGE`] events), what does not fit in the pipe waits in
//! `replay` until the body says there is room, and the next page is read once this one is
//! written. Live events that arrive meanwhile queue behind the replay, within the pipe's
//! byte budget; past it the client counts as too slow. So do live events that find the
//! pipe full: a burst may outrun the body for a moment. A client that reads nothing
//! therefore costs a page and that budget, whatever the size of what it resumes.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::task::AbortHandle;

use super::pipe::{PipeError, PipeTx};
use super::{CloseReason, StreamSettings, sse};
use crate::event_store::{Event, EventStoreHandle, Replay, ReplayOutcome, StoreCallError};
use crate::ids::StreamKey;
use crate::session::SessionHold;
use crate::telemetry::metrics::{EVENTS_REPLAYED, Tracked};

/// Replayed frames are coalesced into writes of about this size, so a long replay neither
/// fills the buffer frame by frame nor becomes one huge allocation.
const REPLAY_CHUNK: usize = 64 * 1024;

/// Something waiting to be written.
#[derive(Debug)]
enum Pending {
    /// A stored event.
    Event(Event),
    /// An event delivered live without being stored: written without an id.
    Unstored { payload: Bytes, last: bool },
    /// A frame of our own (a comment).
    Frame(Bytes),
}

impl Pending {
    /// Whether this is the stream's last event (a request's response).
    fn is_last(&self) -> bool {
        match self {
            Self::Event(e) => e.last,
            Self::Unstored { last, .. } => *last,
            Self::Frame(_) => false,
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Event(e) => e.payload.len(),
            Self::Unstored { payload, .. } | Self::Frame(payload) => payload.len(),
        }
    }
}

/// The part of a replay still in the store.
#[derive(Debug, Clone, Copy)]
struct Pages {
    /// The last position read so far.
    after: u64,
    /// The stream's end when the replay began: live events come after it.
    until: u64,
}

/// Running state of a stream actor.
#[derive(Debug)]
pub struct StreamState {
    pub(super) key: StreamKey,
    /// `None` once closed. Released explicitly, not left to drop: ractor hands a stopped
    /// actor's state to its supervisor inside the exit event, so anything left here would
    /// live on (keeping the HTTP body open) until the listener reads that event.
    tx: Option<PipeTx>,
    pub(super) store: EventStoreHandle,
    pub(super) settings: StreamSettings,
    pub(super) span: tracing::Span,
    /// Position of the last event taken (written, or queued behind the replay): live
    /// events at or before it are duplicates of the replay and skipped.
    pub(super) position: u64,
    pub(super) last_activity: Instant,
    pub(super) exit: Option<CloseReason>,
    pub(super) subscribed: bool,
    pub(super) ping_timer: Option<AbortHandle>,
    pub(super) idle_timer: Option<AbortHandle>,
    hold: Option<SessionHold>,
    /// Events written without being stored (the store's backend was down).
    unstored: u64,
    /// Counts in `otpmcp_streams_open` until released.
    open: Option<Tracked>,
    /// The page of the replay read and not yet written.
    replay: VecDeque<Pending>,
    /// What is left of the replay in the store.
    pages: Option<Pages>,
    /// Live events that arrived during the replay, to follow it.
    live: VecDeque<Pending>,
    /// Frames built from `replay` or `live` that did not fit yet.
    chunk: BytesMut,
    /// A large frame taken from `replay` or `live`, after `chunk`.
    large: Option<sse::Framed>,
    /// What was built into `chunk` and `large` ends the stream.
    chunk_last: Option<CloseReason>,
    /// Payload bytes of the events in `live`; past the byte budget the client is too
    /// slow.
    live_queued: usize,
    /// The byte budget of the pipe (`sse.stream_buffer_bytes`).
    budget: usize,
    /// Close this way once the backlog is written (the stream has ended).
    finish: Option<CloseReason>,
    /// Events replayed so far, counted for a resume (`missed_events`,
    /// `otpmcp_events_replayed_total`) page by page; `None` for other streams.
    pub(super) replayed: Option<u64>,
}

/// What [`StreamState::new`] needs.
#[derive(Debug)]
pub(super) struct Parts {
    pub(super) key: StreamKey,
    pub(super) tx: PipeTx,
    pub(super) budget: usize,
    pub(super) store: EventStoreHandle,
    pub(super) settings: StreamSettings,
    pub(super) span: tracing::Span,
    pub(super) hold: Option<SessionHold>,
    pub(super) open: Tracked,
}

impl StreamState {
    pub(super) fn new(parts: Parts) -> Self {
        Self {
            key: parts.key,
            tx: Some(parts.tx),
            store: parts.store,
            settings: parts.settings,
            span: parts.span,
            position: 0,
            last_activity: Instant::now(),
            exit: None,
            subscribed: false,
            ping_timer: None,
            idle_timer: None,
            hold: parts.hold,
            unstored: 0,
            open: Some(parts.open),
            replay: VecDeque::new(),
            pages: None,
            live: VecDeque::new(),
            chunk: BytesMut::new(),
            large: None,
            chunk_last: None,
            live_queued: 0,
            budget: parts.budget,
            finish: None,
            replayed: None,
        }
    }

    /// Writes `frame` now, or fails: a full pipe means the client reads too slowly.
    pub(super) fn write(&mut self, frame: Bytes) -> Result<(), CloseReason> {
        let Some(tx) = &self.tx else {
            return Err(CloseReason::ClientGone);
        };
        tx.try_send(frame).map_err(|e| match e {
            PipeError::Full => CloseReason::SlowConsumer,
            PipeError::Closed => CloseReason::ClientGone,
        })
    }

    /// A keep-alive comment, unless the pipe is full: what waits there keeps the
    /// connection busy anyway, and a ping must not count the client as too slow.
    pub(super) fn ping(&mut self) -> Result<(), CloseReason> {
        let frame = sse::comment("ping");
        match &self.tx {
            Some(tx) if !tx.fits(frame.len()) => Ok(()),
            _ => self.write(frame),
        }
    }

    fn frame(&self, event: &Event) -> sse::Framed {
        sse::framed(self.settings.with_ids.then_some(&event.id), &event.payload)
    }

    /// Writes a message frame now, or fails like [`Self::write`].
    fn write_framed(&mut self, framed: sse::Framed) -> Result<(), CloseReason> {
        let Some(tx) = &self.tx else {
            return Err(CloseReason::ClientGone);
        };
        tx.try_send_framed(framed).map_err(|e| match e {
            PipeError::Full => CloseReason::SlowConsumer,
            PipeError::Closed => CloseReason::ClientGone,
        })
    }

    fn replaying(&self) -> bool {
        !self.replay.is_empty()
            || self.pages.is_some()
            || !self.live.is_empty()
            || !self.chunk.is_empty()
            || self.large.is_some()
    }

    /// Starts the connection: the frames it opens with, then the first page of `replay`,
    /// as fast as the client reads; once the whole replay is written, `finish` closes it.
    pub(super) fn start(
        &mut self,
        opening: Bytes,
        replay: Replay,
        finish: Option<CloseReason>,
    ) -> Result<(), CloseReason> {
        self.chunk.extend_from_slice(&opening);
        let until = replay.position;
        match replay.events.last().map(|e| e.id.seq) {
            Some(last) if last < until => {
                self.pages = Some(Pages { after: last, until });
                // The rest of the replay comes from the store: live events start after it.
                self.position = self.position.max(until);
            }
            Some(last) => self.position = self.position.max(last),
            None => {}
        }
        self.replay
            .extend(replay.events.into_iter().map(Pending::Event));
        self.finish = finish;
        self.pump()
    }

    /// The position after which the next page of the replay is wanted: when everything
    /// read so far is written and more is in the store.
    pub(super) fn page_wanted(&self) -> Option<u64> {
        let idle = self.replay.is_empty() && self.chunk.is_empty() && self.large.is_none();
        self.pages.filter(|_| idle).map(|p| p.after)
    }

    /// Takes the next page of the replay, then writes what fits.
    pub(super) fn add_page(
        &mut self,
        page: Result<Replay, StoreCallError>,
    ) -> Result<(), CloseReason> {
        let Some(pages) = self.pages else {
            return self.pump();
        };
        // The store lost the stream, or cannot be asked: the client resumes from where
        // it got to, and learns what is left.
        let page = page.map_err(|_| CloseReason::Polling)?;
        if matches!(
            page.outcome,
            ReplayOutcome::OutsideWindow | ReplayOutcome::Disabled
        ) {
            return Err(CloseReason::Polling);
        }
        let first = page.events.first().map_or(pages.until + 1, |e| e.id.seq);
        let missing = first.min(pages.until + 1) - pages.after - 1;
        if missing > 0 {
            self.replay.push_back(Pending::Frame(sse::comment(&format!(
                "otpmcp: {missing} events were evicted during this replay"
            ))));
        }
        let last = page.events.last().map(|e| e.id.seq);
        if let Some(replayed) = &mut self.replayed {
            let n = page.events.len() as u64;
            *replayed += n;
            EVENTS_REPLAYED.add(n);
            self.span.record("missed_events", *replayed);
        }
        self.replay.extend(
            page.events
                .into_iter()
                .take_while(|e| e.id.seq <= pages.until)
                .map(Pending::Event),
        );
        self.pages = match last {
            Some(last) if last < pages.until => Some(Pages {
                after: last,
                ..pages
            }),
            _ => None,
        };
        self.pump()
    }

    /// A stored event from the live feed.
    pub(super) fn deliver(&mut self, event: Event) -> Result<(), CloseReason> {
        if event.id.seq <= self.position {
            return Ok(());
        }
        self.position = event.id.seq;
        if self.replaying() {
            return self.queue_live(Pending::Event(event));
        }
        let framed = self.frame(&event);
        self.write_live(framed, Pending::Event(event))
    }

    /// An event the store could not keep: written without an id.
    pub(super) fn deliver_unstored(
        &mut self,
        payload: Bytes,
        last: bool,
    ) -> Result<(), CloseReason> {
        self.unstored += 1;
        self.span.record("unstored_events", self.unstored);
        tracing::debug!(parent: &self.span, "event delivered live but not stored; it cannot be replayed");
        if self.replaying() {
            return self.queue_live(Pending::Unstored { payload, last });
        }
        let framed = sse::Framed::Whole(sse::message(None, &payload));
        self.write_live(framed, Pending::Unstored { payload, last })
    }

    /// Writes a live event now. If the pipe is full it waits behind what is there, as it
    /// would behind a replay, and goes out as the body makes room: a burst that outruns
    /// the body for a moment is not a slow client. Past the byte budget it is.
    fn write_live(&mut self, framed: sse::Framed, pending: Pending) -> Result<(), CloseReason> {
        let Some(tx) = &self.tx else {
            return Err(CloseReason::ClientGone);
        };
        match tx.try_send_framed(framed) {
            Ok(()) => {
                self.last_activity = Instant::now();
                if pending.is_last() {
                    return Err(CloseReason::Completed);
                }
                Ok(())
            }
            Err(PipeError::Full) => {
                self.queue_live(pending)?;
                self.pump()
            }
            Err(PipeError::Closed) => Err(CloseReason::ClientGone),
        }
    }

    /// The stream ended (or the store closes it): at once, or after the replay for a
    /// completion.
    pub(super) fn end(&mut self, reason: CloseReason) -> Result<(), CloseReason> {
        if reason == CloseReason::Completed && self.replaying() {
            self.finish = Some(reason);
            return Ok(());
        }
        Err(reason)
    }

    fn queue_live(&mut self, pending: Pending) -> Result<(), CloseReason> {
        self.live_queued += pending.len();
        if self.live_queued > self.budget {
            return Err(CloseReason::SlowConsumer);
        }
        self.live.push_back(pending);
        Ok(())
    }

    /// The next thing to write: the replay first, then (once the store has no more of
    /// it) the live events that came meanwhile.
    fn next_pending(&mut self) -> Option<Pending> {
        if let Some(next) = self.replay.pop_front() {
            return Some(next);
        }
        if self.pages.is_some() {
            return None;
        }
        let next = self.live.pop_front();
        if self.live.is_empty() {
            self.live_queued = 0;
        }
        next
    }

    /// Writes as much of the backlog as the pipe takes; asks to be told when there is
    /// room for the rest. Small frames are coalesced into chunks; a large payload goes on
    /// its own, shared with the store rather than copied.
    pub(super) fn pump(&mut self) -> Result<(), CloseReason> {
        loop {
            while self.large.is_none()
                && self.chunk.len() < REPLAY_CHUNK
                && self.chunk_last.is_none()
                && let Some(next) = self.next_pending()
            {
                let (framed, last) = match next {
                    Pending::Event(event) => (self.frame(&event), event.last),
                    Pending::Unstored { payload, last } => {
                        (sse::Framed::Whole(sse::message(None, &payload)), last)
                    }
                    Pending::Frame(frame) => (sse::Framed::Whole(frame), false),
                };
                if last {
                    self.chunk_last = Some(CloseReason::Completed);
                }
                match framed {
                    sse::Framed::Whole(frame) => self.chunk.extend_from_slice(&frame),
                    around => self.large = Some(around),
                }
            }
            // The chunk goes first: it holds what came before the large frame.
            let (len, parts) = match (&self.large, self.chunk.is_empty()) {
                (_, false) => (self.chunk.len(), 1),
                (Some(large), true) => (large.len(), large.parts()),
                // Done, or waiting for the next page of the replay.
                (None, true) if self.pages.is_some() => return Ok(()),
                (None, true) => return self.finish.map_or(Ok(()), Err),
            };
            let Some(tx) = &self.tx else {
                return Err(CloseReason::ClientGone);
            };
            if !tx.fits_parts(len, parts) {
                if tx.wait_for_room(len, parts) {
                    continue;
                }
                return Ok(());
            }
            if self.chunk.is_empty() {
                if let Some(large) = self.large.take() {
                    self.write_framed(large)?;
                }
            } else {
                let chunk = self.chunk.split().freeze();
                self.write(chunk)?;
            }
            self.last_activity = Instant::now();
            if self.chunk.is_empty()
                && self.large.is_none()
                && let Some(reason) = self.chunk_last.take()
            {
                return Err(reason);
            }
        }
    }

    /// Ends the HTTP body, lets the session expire again and ends the stream's span.
    pub(super) fn release(&mut self) {
        self.tx = None;
        self.hold = None;
        self.open = None;
        self.replay.clear();
        self.live.clear();
        self.pages = None;
        self.chunk = BytesMut::new();
        self.large = None;
        self.span = tracing::Span::none();
    }
}
