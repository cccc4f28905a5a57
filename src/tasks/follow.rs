//! Following a task's log (`tasks/stream`): the retained events after a cursor, a page at
//! a time as the reader takes them, then the live ones, until the task's terminal status.
//!
//! Every event is read from the store, by position, so nothing is skipped or given twice
//! whatever the reader's replica. What is live comes as a doorbell: the follower
//! subscribes to the log's store stream like a connection following a session's stream,
//! and the store forwards it each event stored here or (through Redis) on another
//! replica; each ring only makes the follower read the store again. A doorbell that stops
//! ringing (another connection to the same log took the store's place for it, or the
//! store restarted) leaves the follower re-reading every [`REREAD`].

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;
use tokio::sync::mpsc;

use super::events::{TaskEvent, log_key};
use super::{TaskError, TaskHandle};
use crate::event_store::{
    EventStoreHandle, Feed, Replay, ReplayOutcome, StoreCallError, StoreError, StreamKey,
};
use crate::protocol::ErrorObject;

/// How often a follower reads the store when no doorbell rings: [`LIVE_REREAD`] while
/// it has one (a safety net), this when it lost it.
const REREAD: Duration = Duration::from_millis(250);
const LIVE_REREAD: Duration = Duration::from_secs(1);

/// Events and the end queued for one reader: the follower waits when the reader is slow.
const BUFFER: usize = 64;

/// What a follower hands its reader.
#[derive(Debug)]
pub enum Followed {
    /// The next event of the log.
    Event(TaskEvent),
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
        task_id: String,
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
    /// one), as `principal` may see it. Checks the cursor against the store before it
    /// answers, so a refusal is an error rather than a stream.
    pub async fn follow(
        &self,
        id: &str,
        principal: Option<&str>,
        after: Option<u64>,
    ) -> Result<mpsc::Receiver<Followed>, StreamError> {
        let record = self.get(id, principal).await?;
        let not_found = || TaskError::NotFound(id.chars().take(64).collect());
        let key = log_key(id).ok_or_else(not_found)?;
        let gone = |earliest| StreamError::Gone {
            task_id: id.to_owned(),
            earliest,
        };
        // Store positions are seqs plus one.
        let position = match after {
            None => 0,
            Some(after) => after.checked_add(1).ok_or(StreamError::Beyond { after })?,
        };
        let store = &self.inner.store;
        let (tx, rx) = mpsc::channel(BUFFER);
        let first = match store.read_page(key, position).await {
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
            id: id.to_owned(),
            key,
            position,
            tx,
        };
        tokio::spawn(follower.run(first));
        Ok(rx)
    }

    /// Task `id`'s record whoever's it is, for a follower already allowed to read it.
    async fn record(&self, id: &str) -> Result<Option<super::TaskRecord>, StoreCallError> {
        let bytes = self.inner.store.get_task(id).await?;
        Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
    }
}

struct Follower {
    tasks: TaskHandle,
    id: String,
    key: StreamKey,
    /// The store position of the last event handed over (or before the cursor).
    position: u64,
    tx: mpsc::Sender<Followed>,
}

impl Follower {
    async fn run(mut self, mut page: Replay) {
        let store = self.tasks.inner.store.clone();
        let mut doorbell = Doorbell::subscribe(&store, self.key, self.position).await;
        loop {
            let read = page.events.len();
            for event in &page.events {
                self.position = event.id.seq;
                let Some(event) = TaskEvent::read(event) else {
                    continue;
                };
                let terminal = event.terminal;
                if self.tx.send(Followed::Event(event)).await.is_err() {
                    return;
                }
                if terminal {
                    let _ = self.tx.send(Followed::End).await;
                    return;
                }
            }
            if read == 0 {
                // Caught up. A finished task's terminal event was stored before its
                // record changed, but maybe after the empty read above: read once more,
                // and end only if that finds nothing (else its events, the terminal one
                // among them, go out first). Gone: the reader resumes and hears that the
                // task is.
                match self.tasks.record(&self.id).await {
                    Ok(Some(record)) if record.is_terminal() => {
                        let again = match store.read_page(self.key, self.position).await {
                            Ok(again) => again,
                            Err(e) => {
                                tracing::debug!(task_id = %self.id, error = %e, "a task stream stopped: the store failed");
                                return;
                            }
                        };
                        if matches!(again.outcome, ReplayOutcome::Truncated { .. }) {
                            return;
                        }
                        if again.events.is_empty() {
                            let _ = self.tx.send(Followed::End).await;
                            return;
                        }
                        page = again;
                        continue;
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => return,
                }
                tokio::select! {
                    () = doorbell.rung() => {}
                    () = self.tx.closed() => return,
                }
            }
            page = match store.read_page(self.key, self.position).await {
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
}

/// Rings when the store forwards an event of the followed log.
struct Doorbell {
    bell: Option<mpsc::Receiver<()>>,
    sink: Option<(ActorRef<Feed>, EventStoreHandle, StreamKey)>,
}

impl Doorbell {
    async fn subscribe(store: &EventStoreHandle, key: StreamKey, position: u64) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let Ok((actor, _)) = Actor::spawn(None, Sink, tx).await else {
            return Self {
                bell: None,
                sink: None,
            };
        };
        match store
            .subscribe(key, Some(position), false, actor.get_derived())
            .await
        {
            Ok(_) => Self {
                bell: Some(rx),
                sink: Some((actor, store.clone(), key)),
            },
            Err(_) => {
                actor.stop(None);
                Self {
                    bell: None,
                    sink: None,
                }
            }
        }
    }

    /// Resolves at the next ring, or after the re-read interval.
    async fn rung(&mut self) {
        let Some(bell) = self.bell.as_mut() else {
            tokio::time::sleep(REREAD).await;
            return;
        };
        tokio::select! {
            rung = bell.recv() => if rung.is_none() {
                // The store let go of this follower: re-read on a timer from now on.
                self.bell = None;
            },
            () = tokio::time::sleep(LIVE_REREAD) => {}
        }
    }
}

impl Drop for Doorbell {
    fn drop(&mut self) {
        if let Some((actor, store, key)) = self.sink.take() {
            store.unsubscribe(key, actor.get_id());
            actor.stop(None);
        }
    }
}

/// The follower's end of the store's feed: each message rings, coalesced.
struct Sink;

impl Actor for Sink {
    type Msg = Feed;
    type State = mpsc::Sender<()>;
    type Arguments = mpsc::Sender<()>;

    async fn pre_start(
        &self,
        _: ActorRef<Feed>,
        bell: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(bell)
    }

    async fn handle(
        &self,
        _: ActorRef<Feed>,
        _: Feed,
        bell: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Full: a ring is already waiting, and one read takes every event.
        let _ = bell.try_send(());
        Ok(())
    }
}
