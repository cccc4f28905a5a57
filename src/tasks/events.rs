//! A task's event log (SEP-2694, resumable task event streams): every status change and
//! every note of a task's handler, stored before anyone is told, and read back by
//! `tasks/stream`.
//!
//! The log is a store session of its own, in the namespace its task's id spells
//! ([`TaskId::log_key`]), with one stream: like an execution's output
//! ([`crate::exec`]), it is retained, capped and evicted as a session's events are
//! (`sse.event_ttl`, `sse.max_session_events`, `sse.max_session_bytes`, the global
//! budget), kept in Redis when the store is, and followed live from any replica through
//! the store's own channel.
//!
//! The draft numbers a task's events from 0; the store numbers positions from 1. The
//! mapping lives here only: `seq = position - 1`.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use std::time::Duration;

use super::TaskHandle;
use crate::event_store::{Event, StreamWriter};
use crate::exec::tools as exec;
use crate::handler::Note;
use crate::ids::TaskId;
use crate::protocol::methods;

/// A status change: the payload is the task as `tasks/get` shows it.
pub const STATUS: &str = "dev.otpmcp.task.status";
/// A progress note (`progress`, `total`, `message`).
pub const PROGRESS: &str = "dev.otpmcp.progress";
/// A log note (`level`, `logger`, `data`).
pub const LOG: &str = "dev.otpmcp.log";
/// A chunk of an execution's output (`execute` run as a task): the
/// `notifications/otpmcp/execution_output` params (`executionId`, `id`, `stream`, `seq`,
/// `text` or `base64`).
pub const EXECUTION_OUTPUT: &str = "dev.otpmcp.execution.output";
/// An execution started (`executionId`, `program`).
pub const EXECUTION_STARTED: &str = "dev.otpmcp.execution.started";
/// Any other notification of the handler (`method`, `params`).
pub const NOTIFICATION: &str = "dev.otpmcp.notification";

/// How often a running task renews its log's store session: on Redis a session's keys
/// expire `server.session_timeout` after their last use, and a quiet task (one waiting
/// for its client's answer, say) must not lose its log meanwhile.
pub(crate) const LOG_KEEPALIVE: Duration = Duration::from_secs(60);

/// The method of the notification that carries each event.
pub const EVENT_METHOD: &str = "notifications/tasks/event";

/// An event as the log stores it: a mark byte ([`TERMINAL`] or [`EVENT`]) and then the
/// inside of the `notifications/tasks/event` params that do not change (`"type":…,
/// "payload":…`), so that a reader splices the stored bytes into its frames as they are,
/// without parsing or serializing them again.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Stored {
    pub(crate) kind: &'static str,
    pub(crate) payload: Value,
    /// The status event that ends the task.
    pub(crate) terminal: bool,
}

/// The mark of the status event that ends a task.
const TERMINAL: u8 = b'T';
/// The mark of any other event.
const EVENT: u8 = b'E';

impl Stored {
    pub(crate) fn bytes(&self) -> Bytes {
        let mut out = Vec::with_capacity(64);
        out.push(if self.terminal { TERMINAL } else { EVENT });
        out.extend_from_slice(b"\"type\":");
        // Serializing a string and a `Value` into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut out, self.kind);
        out.extend_from_slice(b",\"payload\":");
        let _ = serde_json::to_writer(&mut out, &self.payload);
        Bytes::from(out)
    }
}

/// The stored form of a handler's note.
pub(crate) fn of_note(note: Note) -> Stored {
    let (kind, payload) = match note {
        // The token is the request's, not the task's: a stream reader has no use for it.
        Note::Progress {
            progress,
            total,
            message,
            ..
        } => {
            let mut p = Map::new();
            // As on a session's stream: whole numbers as integers.
            p.insert("progress".into(), methods::number(progress));
            if let Some(total) = total {
                p.insert("total".into(), methods::number(total));
            }
            if let Some(message) = message {
                p.insert("message".into(), Value::String(message));
            }
            (PROGRESS, Value::Object(p))
        }
        Note::Log {
            level,
            logger,
            data,
        } => {
            let mut p = Map::new();
            p.insert("level".into(), json!(level));
            if let Some(logger) = logger {
                p.insert("logger".into(), Value::String(logger));
            }
            p.insert("data".into(), data);
            (LOG, Value::Object(p))
        }
        Note::Custom { method, params } if method == exec::OUTPUT_METHOD => {
            (EXECUTION_OUTPUT, params)
        }
        Note::Custom { method, params } if method == exec::STARTED_METHOD => {
            (EXECUTION_STARTED, params)
        }
        Note::Custom { method, params } => {
            (NOTIFICATION, json!({ "method": method, "params": params }))
        }
    };
    Stored {
        kind,
        payload,
        terminal: false,
    }
}

impl TaskHandle {
    /// A writer of task `id`'s log, for its runner.
    pub(super) fn log_writer(&self, id: TaskId) -> StreamWriter {
        StreamWriter::new(self.inner.store.clone(), id.log_key())
    }

    /// Sends `event` as the next of the log `log` writes (task `id`'s): it waits only
    /// while a few are in flight. A failure is logged, as for [`TaskHandle::append`].
    pub(super) async fn write_note(&self, log: &mut StreamWriter, id: TaskId, event: Stored) {
        if let Err(e) = log.write(event.bytes()).await {
            tracing::warn!(task_id = %id, error = %e, "could not store a task's event");
        }
    }

    /// Appends `event` to task `id`'s log. A failure is logged: the task goes on (as
    /// with a record that could not be stored), and a reader of the log sees the gap as
    /// nothing missing, since the store numbers only what it stored.
    pub(crate) async fn append(&self, id: TaskId, event: Stored) {
        let key = id.log_key();
        if let Err(e) = self.inner.store.append(key, event.bytes(), false).await {
            tracing::warn!(task_id = %id, error = %e, "could not store a task's event");
        }
    }

    /// Renews task `id`'s log (see [`LOG_KEEPALIVE`]); registering a session again keeps
    /// what it holds.
    pub(crate) async fn keep_log(&self, id: TaskId) {
        let _ = self.inner.store.open_session(id.log_key().session).await;
    }

    /// Drops task `id`'s log once its record is gone too (`after` from now).
    pub(super) fn forget_log_after(&self, id: TaskId, after: Duration) {
        let key = id.log_key();
        let store = self.inner.store.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            let _ = store.forget_session(key.session).await;
        });
    }
}

/// One event of a task's log, as `tasks/stream` delivers it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskEvent {
    /// Its sequence number in the task's log, from 0.
    pub seq: u64,
    /// Its store position (`seq + 1`).
    pub position: u64,
    /// The status event that ends the task: nothing follows it.
    pub terminal: bool,
    /// The stored `"type":…,"payload":…`.
    body: Bytes,
}

impl TaskEvent {
    /// Reads a stored event; `None` if it is not one (never written by this module).
    pub(crate) fn read(event: &Event) -> Option<Self> {
        let terminal = match *event.payload.first()? {
            TERMINAL => true,
            EVENT => false,
            _ => return None,
        };
        Some(Self {
            seq: event.id.seq.checked_sub(1)?,
            position: event.id.seq,
            terminal,
            body: event.payload.slice(1..),
        })
    }

    /// Its size in bytes, as stored.
    pub fn len(&self) -> usize {
        self.body.len() + 1
    }

    /// Never empty; here for `len`'s sake.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the `notifications/tasks/event` params to `out`, for the task whose id is
    /// `task_id`, already a JSON string (quoted, escaped).
    pub fn write_params(&self, task_id: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"seq\":");
        out.extend_from_slice(itoa::Buffer::new().format(self.seq).as_bytes());
        out.extend_from_slice(b",\"taskId\":");
        out.extend_from_slice(task_id.as_bytes());
        out.push(b',');
        out.extend_from_slice(&self.body);
        out.extend_from_slice(b",\"_meta\":{\"io.modelcontextprotocol/related-task\":{\"taskId\":");
        out.extend_from_slice(task_id.as_bytes());
        out.extend_from_slice(b"}}}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stored_note_reads_back_with_its_seq_from_zero() {
        let id = "0123456789abcdef0123456789abcdef";
        let Ok(task) = id.parse::<TaskId>() else {
            panic!("a task id")
        };
        let key = task.log_key();
        let stored = of_note(Note::Progress {
            token: json!("t"),
            progress: 3.0,
            total: Some(10.0),
            message: None,
        });
        let event = Event {
            id: key.event_id(1),
            payload: stored.bytes(),
            last: false,
        };
        let Some(read) = TaskEvent::read(&event) else {
            panic!("reads back")
        };
        assert_eq!(read.seq, 0);
        assert!(!read.terminal);
        let mut params = Vec::new();
        read.write_params(&json!(id).to_string(), &mut params);
        let params: Value = serde_json::from_slice(&params).unwrap_or_default();
        assert_eq!(
            params,
            json!({
                "seq": 0,
                "taskId": id,
                "type": PROGRESS,
                "payload": {"progress": 3, "total": 10},
                "_meta": {"io.modelcontextprotocol/related-task": {"taskId": id}},
            })
        );
        let terminal = Stored {
            kind: STATUS,
            payload: json!({"status": "completed"}),
            terminal: true,
        };
        let event = Event {
            id: key.event_id(7),
            payload: terminal.bytes(),
            last: false,
        };
        let read = TaskEvent::read(&event).map(|e| (e.seq, e.terminal));
        assert_eq!(read, Some((6, true)));
    }
}
