//! Following a task's log (`tasks/stream`): the retained events after a cursor, a page at
//! a time as the reader takes them, then the live ones, until the task's terminal status.
//!
//! A follower replays from the store, by position, until it has caught up; then it takes
//! the live events from the store's own feed: it subscribes to the log's store stream as
//! a connection following a session's stream does, and the store forwards each event
//! stored here or (through Redis) on another replica, in order and without gaps. Whenever
//! that falls short (an event skipped because the follower's queue was full, a gap, the
//! feed gone quiet for [`LIVE_REREAD`]) the follower reads the store again from its
//! position, so nothing is skipped or given twice whatever the reader's replica. A feed
//! that ends (another connection to the same log took the store's place for it, or the
//! store restarted) leaves the follower reading the store every [`REREAD`].
//!
//! What a reader holds is weighed, not just counted: each batch of events takes its
//! stored size from the connection's byte budget ([`ByteBudget`],
//! `sse.stream_buffer_bytes`) before it is handed over, and gives it back only when its
//! frames leave for the socket; a page read from the store holds about as many events as
//! the budget takes (sized by the last page's events, and cut to the budget: the rest is
//! read again when there is room), and the feed queues at most the budget's bytes for the
//! follower (past it the follower reads the store instead). So a slow reader of 1 MB
//! events holds about the budget and the few events larger than it that pass one at a
//! time, as a GET stream does, not a page and a queue of them.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use tokio::sync::{Notify, mpsc};

use super::events::TaskEvent;
use super::{TaskError, TaskHandle};
use crate::event_store::format;
use crate::event_store::{
    Event, EventStoreHandle, Feed, REPLAY_PAGE, Replay, ReplayOutcome, StoreCallError, StoreError,
    StreamKey,
};
use crate::ids::TaskId;
use crate::protocol::ErrorObject;
use crate::rt::budget::{ByteBudget, Reserved};

/// How often a follower reads the store when the feed brings nothing: [`LIVE_REREAD`]
/// while it has one (a safety net), this when it lost it.
const REREAD: Duration = Duration::from_millis(250);
const LIVE_REREAD: Duration = Duration::from_secs(1);

/// Batches of events and the end queued for one reader, within its byte budget: the
/// follower waits when the reader is slow.
const BUFFER: usize = 64;

/// What a follower hands its reader.
#[derive(Debug)]
pub enum Followed {
    /// The next events of the log, in order, with their weight in the connection's byte
    /// budget: keep it until their frames are handed to the socket.
    Events(Vec<TaskEvent>, Reserved),
    /// The task's terminal status was delivered (now, or before the cursor): the stream
    /// ends with its result. A follower that stops without it (the record expired, the
    /// store failed) leaves the reader to resume.
    End,
}

/// Why `tasks/stream` cannot start.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StreamError {
    /// Unknown, expired or another principal's task: as `tasks/get` says it.
    #[error(transparent)]
    Task(#[from] TaskError),
    /// Events after the cursor are no longer retained.
    #[error("Task events are no longer available")]
    Gone {
        /// The task.
        task_id: TaskId,
        /// The oldest event still retained, when there is one.
        earliest: Option<u64>,
    },
    /// The cursor is past the task's last event.
    #[error("Invalid params: after ({after}) is beyond the task's last event")]
    Beyond {
        /// The cursor given.
        after: u64,
    },
}

impl StreamError {
    /// SEP-2694's code for `events_gone` (the implementation-defined server range).
    pub const EVENTS_GONE: i64 = -32010;
}

impl From<StreamError> for ErrorObject {
    fn from(e: StreamError) -> Self {
        match e {
            StreamError::Task(task) => task.into(),
            StreamError::Beyond { .. } => ErrorObject::invalid_params(e.to_string()),
            StreamError::Gone {
                ref task_id,
                earliest,
            } => {
                let mut error = ErrorObject::new(StreamError::EVENTS_GONE, e.to_string());
                error.data = Some(json!({
                    "reason": "events_gone",
                    "taskId": task_id,
                    "earliestSeq": earliest,
                }));
                error
            }
        }
    }
}

impl TaskHandle {
    /// Follows task `id`'s log after event `after` (from the oldest retained without
    /// one), as `principal` may see it, holding at most `budget` (and one event larger
    /// than it) for the reader. Checks the cursor against the store before it answers, so
    /// a refusal is an error rather than a stream.
    pub async fn follow(
        &self,
        id: TaskId,
        principal: Option<&crate::auth::Principal>,
        after: Option<u64>,
        budget: ByteBudget,
    ) -> Result<mpsc::Receiver<Followed>, StreamError> {
        let record = self.get(id, principal).await?;
        let key = id.log_key();
        let gone = |earliest| StreamError::Gone {
            task_id: id,
            earliest,
        };
        // Store positions are seqs plus one.
        let position = match after {
            None => 0,
            Some(after) => after.checked_add(1).ok_or(StreamError::Beyond { after })?,
        };
        let store = &self.inner.store;
        let (tx, rx) = mpsc::channel(BUFFER);
        // One event first: its size tells how many the next page may hold.
        let first = match store.read_page_of(key, position, 1).await {
            Ok(replay) => replay,
            // Nothing retained, not even the stream (all of it expired): a finished task
            // streamed from the start ends at once, as the draft asks.
            Err(StoreCallError::Store(StoreError::UnknownStream))
                if after.is_none() && record.is_terminal() =>
            {
                let _ = tx.try_send(Followed::End);
                return Ok(rx);
            }
            Err(StoreCallError::Store(StoreError::UnknownStream)) => return Err(gone(None)),
            Err(StoreCallError::Store(StoreError::FuturePosition(_))) => {
                return Err(StreamError::Beyond {
                    after: after.unwrap_or_default(),
                });
            }
            Err(e) => return Err(TaskError::Unavailable(e.to_string()).into()),
        };
        match first.outcome {
            ReplayOutcome::Complete => {}
            ReplayOutcome::Truncated { missing } if after.is_some() => {
                return Err(gone(Some(position + missing)));
            }
            ReplayOutcome::Truncated { .. } => {}
            ReplayOutcome::OutsideWindow | ReplayOutcome::Disabled => return Err(gone(None)),
        }
        let follower = Follower {
            tasks: self.clone(),
            id,
            key,
            position,
            tx,
            budget,
        };
        tokio::spawn(follower.run(first));
        Ok(rx)
    }

    /// Task `id`'s record whoever's it is, for a follower already allowed to read it.
    async fn record(&self, id: TaskId) -> Result<Option<super::TaskRecord>, StoreCallError> {
        let bytes = self.inner.store.get_record(id.as_str()).await?;
        Ok(bytes.and_then(|b| format::from_slice(super::TASK_RECORD, &b).ok()))
    }
}

struct Follower {
    tasks: TaskHandle,
    id: TaskId,
    key: StreamKey,
    /// The store position of the last event handed over (or before the cursor).
    position: u64,
    tx: mpsc::Sender<Followed>,
    budget: ByteBudget,
}

/// How handing events over went.
#[derive(Debug, PartialEq)]
enum Handed {
    /// Handed over; more may follow.
    More,
    /// The terminal status was among them: the stream ended.
    Ended,
    /// The reader is gone.
    Closed,
}

impl Follower {
    async fn run(mut self, first: Replay) {
        let store = self.tasks.inner.store.clone();
        let limit = self.budget.limit();
        // Before any further read, so that what is stored from now on comes through it.
        let mut live = Live::subscribe(&store, self.key, limit).await;
        let mut page = first;
        let mut asked = 1;
        let mut most = REPLAY_PAGE;
        // Set once the record showed a terminal status: the log is then read once more
        // before the end, since the last notes and the terminal event were stored before
        // the record changed, possibly after this follower's last read.
        let mut ending = false;
        loop {
            let read = page.events.len();
            if read > 0 {
                most = page_for(&page, limit);
            }
            within_budget(&mut page, limit);
            let cut = page.events.len() < read;
            let last = page.events.last().map(|e| e.id.seq);
            let events = page.events.iter().filter_map(TaskEvent::read).collect();
            if let Some(last) = last
                && self.hand_over(events, last).await != Handed::More
            {
                return;
            }
            let caught_up = read < asked && !cut;
            if caught_up && ending {
                // Caught up after the record turned terminal: the terminal event is
                // behind us (before the cursor, or its log expired): the end.
                let _ = self.tx.send(Followed::End).await;
                return;
            }
            if caught_up {
                // Gone: the reader resumes and hears that the task is.
                match self.tasks.record(self.id).await {
                    Ok(Some(record)) if record.is_terminal() => ending = true,
                    Ok(Some(_)) => {
                        if !self.follow_live(&mut live).await {
                            return;
                        }
                    }
                    Ok(None) | Err(_) => return,
                }
            }
            asked = most;
            page = match store.read_page_of(self.key, self.position, most).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::debug!(task_id = %self.id, error = %e, "a task stream stopped: the store failed");
                    return;
                }
            };
            // Evicted while this reader lagged: stop rather than skip; its resume hears
            // `events_gone`.
            if matches!(page.outcome, ReplayOutcome::Truncated { .. }) {
                return;
            }
        }
    }

    /// Hands the live events of the feed over, batched as they come, until the store
    /// must be read again (true) or the stream is over (false).
    async fn follow_live(&mut self, live: &mut Live) -> bool {
        let limit = self.budget.limit();
        loop {
            let next = tokio::select! {
                next = live.next() => next,
                () = self.tx.closed() => return false,
            };
            let Some(event) = next else {
                return true;
            };
            if event.id.seq <= self.position {
                continue;
            }
            if event.id.seq != self.position + 1 {
                return true;
            }
            // Whatever else the feed holds, to one frame write, within the budget.
            let mut batch = vec![event];
            let mut bytes = batch[0].payload.len();
            let mut gap = false;
            while batch.len() < REPLAY_PAGE && bytes < limit {
                let Some(next) = live.try_next() else { break };
                let expected = batch.last().map_or(0, |e| e.id.seq) + 1;
                if next.id.seq < expected {
                    continue;
                }
                if next.id.seq > expected {
                    gap = true;
                    break;
                }
                bytes += next.payload.len();
                batch.push(next);
            }
            let last = batch.last().map_or(self.position, |e| e.id.seq);
            let events = batch.iter().filter_map(TaskEvent::read).collect();
            if self.hand_over(events, last).await != Handed::More {
                return false;
            }
            if gap {
                return true;
            }
        }
    }

    /// Hands `events` (read up to store position `last`) to the reader once the budget
    /// has room for them, and then the end if the terminal status is among them.
    async fn hand_over(&mut self, mut events: Vec<TaskEvent>, last: u64) -> Handed {
        self.position = last;
        if let Some(end) = events.iter().position(|e| e.terminal) {
            events.truncate(end + 1);
        }
        let Some(terminal) = events.last().map(|e| e.terminal) else {
            return Handed::More;
        };
        let bytes = events.iter().map(TaskEvent::len).sum();
        let held = tokio::select! {
            held = self.budget.reserve(bytes) => held,
            () = self.tx.closed() => return Handed::Closed,
        };
        if self.tx.send(Followed::Events(events, held)).await.is_err() {
            return Handed::Closed;
        }
        if !terminal {
            return Handed::More;
        }
        let _ = self.tx.send(Followed::End).await;
        Handed::Ended
    }
}

/// How many events of the size of `page`'s fit `budget` bytes: the next page's size (1
/// to a full page).
fn page_for(page: &Replay, budget: usize) -> usize {
    let bytes: usize = page.events.iter().map(|e| e.payload.len()).sum();
    let each = (bytes / page.events.len().max(1)).max(1);
    (budget / each).clamp(1, REPLAY_PAGE)
}

/// Cuts `page` to the events that fit `budget` bytes (the first one always): the rest is
/// read again, by position, once the reader took these. A page is up to 256 events, and
/// on Redis each is a copy of its own.
fn within_budget(page: &mut Replay, budget: usize) {
    let mut total = 0usize;
    let fit = page
        .events
        .iter()
        .position(|event| {
            total = total.saturating_add(event.payload.len());
            total > budget
        })
        .unwrap_or(page.events.len())
        .max(1);
    page.events.truncate(fit);
}

/// The log's live events, as the store's feed brings them.
struct Live {
    /// `None` once the store let go of this follower.
    events: Option<mpsc::Receiver<Event>>,
    queue: Arc<Queue>,
    sink: Option<(ActorRef<Feed>, EventStoreHandle, StreamKey)>,
}

/// What the feed's sink and the follower share.
#[derive(Debug)]
struct Queue {
    /// Bytes of the events queued for the follower.
    bytes: AtomicUsize,
    /// The most it may queue: the connection's byte budget.
    limit: usize,
    /// Rung when an event could not be queued: the follower reads the store.
    lagged: Notify,
}

impl Live {
    /// Live only: what came before is read from the store.
    async fn subscribe(store: &EventStoreHandle, key: StreamKey, limit: usize) -> Self {
        let queue = Arc::new(Queue {
            bytes: AtomicUsize::new(0),
            limit,
            lagged: Notify::new(),
        });
        let (tx, rx) = mpsc::channel(REPLAY_PAGE);
        let off = |queue| Self {
            events: None,
            queue,
            sink: None,
        };
        let Ok((actor, _)) = Actor::spawn(None, Sink, (tx, queue.clone())).await else {
            return off(queue);
        };
        match store.subscribe(key, None, false, actor.get_derived()).await {
            Ok(_) => Self {
                events: Some(rx),
                queue,
                sink: Some((actor, store.clone(), key)),
            },
            Err(_) => {
                actor.stop(None);
                off(queue)
            }
        }
    }

    /// The next live event; `None` when the store must be read instead (the feed fell
    /// behind, went quiet for [`LIVE_REREAD`], or let go of this follower).
    async fn next(&mut self) -> Option<Event> {
        let Some(events) = self.events.as_mut() else {
            tokio::time::sleep(REREAD).await;
            return None;
        };
        tokio::select! {
            event = events.recv() => match event {
                Some(event) => {
                    self.queue.bytes.fetch_sub(event.payload.len(), Ordering::Relaxed);
                    Some(event)
                }
                None => {
                    // The store let go of this follower: read it on a timer from now on.
                    self.events = None;
                    None
                }
            },
            () = self.queue.lagged.notified() => None,
            () = tokio::time::sleep(LIVE_REREAD) => None,
        }
    }

    /// The next live event already queued.
    fn try_next(&mut self) -> Option<Event> {
        let event = self.events.as_mut()?.try_recv().ok()?;
        self.queue
            .bytes
            .fetch_sub(event.payload.len(), Ordering::Relaxed);
        Some(event)
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some((actor, store, key)) = self.sink.take() {
            store.unsubscribe(key, actor.get_id());
            actor.stop(None);
        }
    }
}

/// The follower's end of the store's feed: queues each event for it within the budget,
/// or tells it to read the store.
struct Sink;

impl Actor for Sink {
    type Msg = Feed;
    type State = (mpsc::Sender<Event>, Arc<Queue>);
    type Arguments = (mpsc::Sender<Event>, Arc<Queue>);

    async fn pre_start(
        &self,
        _: ActorRef<Feed>,
        state: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        me: ActorRef<Feed>,
        feed: Feed,
        (events, queue): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match feed {
            Feed::Event(event) => {
                let len = event.payload.len();
                let queued = queue.bytes.fetch_add(len, Ordering::Relaxed);
                // One event larger than the budget still goes, alone.
                let fits = queued == 0 || queued + len <= queue.limit;
                if !fits || events.try_send(event).is_err() {
                    queue.bytes.fetch_sub(len, Ordering::Relaxed);
                    queue.lagged.notify_one();
                }
            }
            // Not stored, so not the log's: the store is read for what it holds.
            Feed::Unstored { .. } => queue.lagged.notify_one(),
            // The store let go: dropping the sender tells the follower.
            Feed::End(_) => me.stop(None),
        }
        Ok(())
    }
}
