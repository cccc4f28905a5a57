//! Reading an execution's output back (`get_execution_output`): the chunks after an id,
//! a page at a time, waiting up to `wait` for new ones. On the replica that runs the
//! execution the wait ends at the next chunk; elsewhere the log is read again every
//! `exec.poll_interval`.

use std::str::FromStr as _;
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::record::{self, ExecRecord, Outcome, Status, log_key};
use super::{ExecCaller, ExecError, ExecHandle};
use crate::event_store::{
    Event, EventStoreHandle, REPLAY_PAGE, Replay, ReplayOutcome, StoreCallError, StoreError,
    StreamKey,
};
use crate::ids::{EventId, SessionId};

/// One answer of `get_execution_output`.
#[derive(Debug, Clone)]
pub struct Page {
    /// Chunks after the id asked for, oldest first, each with its `id`.
    pub chunks: Vec<Map<String, Value>>,
    /// The execution's status now.
    pub status: Status,
    /// Its outcome, once it ended.
    pub outcome: Option<Outcome>,
    /// The id to ask after next time (the last chunk's, or the one given).
    pub next: Option<String>,
    /// More chunks are stored than this page holds: ask again at once.
    pub more: bool,
    /// Reading from the start: how many of the oldest chunks were evicted.
    pub missing: u64,
}

impl ExecHandle {
    /// The chunks of execution `id` after `after` (from the start when `None`), waiting
    /// up to `wait` (at most `exec.max_wait`) when there are none yet and it still runs.
    pub async fn output(
        &self,
        caller: &ExecCaller,
        id: SessionId,
        after: Option<&str>,
        wait: Duration,
    ) -> Result<Page, ExecError> {
        let mut record = self.record(caller, id).await?;
        let key = log_key(id);
        let position = match after {
            None => 0,
            Some(text) => match EventId::from_str(text) {
                Ok(event) if event.key_in(id) == Some(key) => event.seq,
                _ => return Err(ExecError::ForeignId(text.to_owned())),
            },
        };
        let deadline = Instant::now() + wait.min(self.settings.max_wait);
        loop {
            let replay = match self.store.read_page(key, position).await {
                Ok(replay) => replay,
                // The log's stream begins with its first chunk.
                Err(StoreCallError::Store(StoreError::UnknownStream))
                    if record.status == Status::Running && position == 0 =>
                {
                    Replay {
                        events: Vec::new(),
                        outcome: ReplayOutcome::Complete,
                        position: 0,
                        completed: false,
                    }
                }
                Err(StoreCallError::Store(StoreError::UnknownStream)) => {
                    return Err(ExecError::Expired(id.to_string()));
                }
                Err(StoreCallError::Store(StoreError::FuturePosition(_))) => {
                    return Err(ExecError::ForeignId(after.unwrap_or_default().to_owned()));
                }
                Err(e) => return Err(ExecError::Store(e.to_string())),
            };
            let missing = match replay.outcome {
                ReplayOutcome::Truncated { missing } => missing,
                _ => 0,
            };
            if let (Some(after), true) = (after, missing > 0) {
                return Err(ExecError::Evicted {
                    after: after.to_owned(),
                    missing,
                });
            }
            let status = record.status_at(
                record::now_ms(),
                self.settings.heartbeat.get().as_millis() as u64,
            );
            let now = Instant::now();
            if replay.events.is_empty() && status == Status::Running && now < deadline {
                self.wait_for_more(id, deadline, replay.position).await;
                record = self.record(caller, id).await?;
                continue;
            }
            let more = replay.events.len() >= REPLAY_PAGE
                && replay
                    .events
                    .last()
                    .is_some_and(|e| e.id.seq < replay.position);
            return Ok(page(record, status, &replay.events, after, more, missing));
        }
    }

    /// Waits until the log holds more than `position` chunks, `deadline`, or (elsewhere
    /// than the running replica) the next `poll_interval`.
    async fn wait_for_more(&self, id: SessionId, deadline: Instant, position: u64) {
        let interval = self.settings.poll_interval;
        let pause = tokio::time::sleep_until(deadline.min(Instant::now() + interval.get()));
        match self.watch(id).await {
            // Runs here: wake at the next chunk (or when the pump ends). Compared with
            // what was read, not with what this receiver saw: it is a fresh clone.
            Some(mut progress) => {
                tokio::select! {
                    // `wait_for` holds the value's lock: keep only whether the pump lives.
                    more = async { progress.wait_for(|&stored| stored > position).await.is_ok() } => if !more { pause.await },
                    () = tokio::time::sleep_until(deadline) => {}
                }
            }
            None => pause.await,
        }
    }
}

fn page(
    record: ExecRecord,
    mut status: Status,
    events: &[Event],
    after: Option<&str>,
    more: bool,
    missing: u64,
) -> Page {
    let mut chunks = Vec::with_capacity(events.len());
    let mut outcome = record.outcome;
    for event in events {
        let Ok(Value::Object(mut chunk)) = serde_json::from_slice::<Value>(&event.payload) else {
            continue;
        };
        if chunk.get("type").and_then(Value::as_str) == Some("exit") {
            chunk.remove("type");
            if let Ok(ended) = serde_json::from_value::<Outcome>(Value::Object(chunk)) {
                status = ended.status;
                outcome = Some(ended);
            }
            continue;
        }
        chunk.insert("id".into(), event.id.to_string().into());
        chunks.push(chunk);
    }
    if status == Status::Lost && outcome.is_none() {
        outcome = Some(Outcome::without_exit(
            status,
            "the replica running it stopped; its program was killed with it (the parent-death signal of its process group's leader)".into(),
        ));
    }
    let next = chunks
        .last()
        .and_then(|c| c.get("id"))
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| after.map(str::to_owned));
    Page {
        chunks,
        status,
        outcome,
        next,
        more,
        missing,
    }
}

/// Every event of `key` (an index: small), a page at a time.
pub async fn read_all(store: &EventStoreHandle, key: StreamKey) -> Result<Vec<Event>, ExecError> {
    let mut out = Vec::new();
    let mut position = 0;
    loop {
        let replay = match store.read_page(key, position).await {
            Ok(replay) => replay,
            Err(StoreCallError::Store(StoreError::UnknownStream)) => return Ok(out),
            Err(e) => return Err(ExecError::Store(e.to_string())),
        };
        let Some(last) = replay.events.last().map(|e| e.id.seq) else {
            return Ok(out);
        };
        out.extend(replay.events);
        if last >= replay.position {
            return Ok(out);
        }
        position = last;
    }
}
