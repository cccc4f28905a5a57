//! A task's record: what the store keeps of a task (serialized as JSON, opaque to the
//! store), and the task as the wire shows it (`tasks/get`, `notifications/tasks`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ids::TaskId;
use crate::protocol::ErrorObject;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for the client's answers (`tasks/update`).
    InputRequired,
    /// Finished with a result (a tool result, even one with `isError`).
    Completed,
    /// Ended by a protocol error (the result would have been a JSON-RPC error), or its
    /// replica was lost.
    Failed,
    /// Cancelled by the client.
    Cancelled,
}

impl TaskStatus {
    /// True for the statuses a task never leaves.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// What to run again if the task's replica is lost and its tool may run twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskWork {
    /// The request's `params` (tool name and arguments).
    pub params: Value,
    /// The capabilities the client declared on the request.
    pub capabilities: Value,
    /// The answers the request gathered before it became a task (multi round-trip).
    #[serde(default)]
    pub answers: Map<String, Value>,
    /// The caller (`[auth]`), so the tool run again sees who asked: its owner, scopes
    /// and token expiry, none of its other claims (the record lives in Redis for the
    /// task's ttl). A record an older replica wrote, with the whole principal, reads as
    /// this too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<crate::auth::HandedPrincipal>,
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    /// The unguessable id.
    pub id: TaskId,
    /// Its status.
    pub status: TaskStatus,
    /// A word on the status, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Creation, milliseconds since the epoch.
    pub created_ms: u64,
    /// Last change, milliseconds since the epoch.
    pub updated_ms: u64,
    /// Kept this long from creation.
    pub ttl_ms: u64,
    /// Suggested polling interval.
    pub poll_ms: u64,
    /// The questions waiting for the client, by key.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub input_requests: Map<String, Value>,
    /// The result, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// The error, once failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
    /// The replica running it (0 with the in-memory store).
    pub owner: u64,
    /// Who may see it: the [`crate::auth::Owner`] of the principal that created it, as
    /// text (`None` without `[auth]`, and then only requests without one match).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// What to run again if its replica is lost; `None`: the tool may not run twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<TaskWork>,
    /// How many times it was started.
    pub attempts: u32,
    /// The scopes its tool required when it was created (`[auth]`): every read or signal
    /// checks them again against the caller's token. Absent from records written before
    /// it existed, which then need none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scopes: Vec<String>,
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl TaskRecord {
    /// True once the task can no longer change.
    pub fn is_terminal(&self) -> bool {
        self.status.is_terminal()
    }

    /// How long the store should still keep it.
    pub fn remaining(&self, now_ms: u64) -> Duration {
        let ends = self.created_ms.saturating_add(self.ttl_ms);
        Duration::from_millis(ends.saturating_sub(now_ms).max(1))
    }

    /// Moves to `status`, stamping the change.
    pub fn set(&mut self, status: TaskStatus, message: Option<String>) {
        self.status = status;
        self.status_message = message;
        self.updated_ms = now_ms();
    }

    /// The task as `tasks/get` returns it (without `resultType`) and as
    /// `notifications/tasks` carries it.
    pub fn wire(&self) -> Value {
        let mut task = json!({
            "taskId": self.id,
            "status": self.status,
            "createdAt": iso8601(self.created_ms),
            "lastUpdatedAt": iso8601(self.updated_ms),
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_ms,
        });
        if let Some(message) = &self.status_message {
            task["statusMessage"] = Value::String(message.clone());
        }
        match self.status {
            TaskStatus::InputRequired => {
                task["inputRequests"] = Value::Object(self.input_requests.clone());
            }
            TaskStatus::Completed => {
                task["result"] = self.result.clone().unwrap_or_else(|| json!({}));
            }
            TaskStatus::Failed => {
                let error = self
                    .error
                    .clone()
                    .unwrap_or_else(|| ErrorObject::internal("the task failed"));
                task["error"] = serde_json::to_value(error).unwrap_or(Value::Null);
            }
            TaskStatus::Working | TaskStatus::Cancelled => {}
        }
        task
    }
}

/// `2026-11-23T21:20:00.123Z` for milliseconds since the epoch (UTC, proleptic Gregorian).
pub fn iso8601(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Days to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso_8601_utc() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso8601(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(iso8601(1_795_392_000_123), "2026-11-23T00:00:00.123Z");
    }

    #[test]
    fn the_wire_shows_what_the_status_has() {
        let mut record = TaskRecord {
            id: "0123456789abcdef0123456789abcdef"
                .parse()
                .unwrap_or_else(|e| panic!("{e}")),
            status: TaskStatus::Working,
            status_message: None,
            created_ms: 0,
            updated_ms: 0,
            ttl_ms: 60_000,
            poll_ms: 1000,
            input_requests: Map::new(),
            result: Some(json!({"content": []})),
            error: None,
            owner: 0,
            principal: None,
            rerun: None,
            attempts: 1,
            scopes: Vec::new(),
        };
        assert!(record.wire().get("result").is_none());
        record.set(TaskStatus::Completed, None);
        assert_eq!(record.wire()["result"], json!({"content": []}));
        assert_eq!(record.wire()["status"], "completed");
        record.set(TaskStatus::InputRequired, None);
        assert_eq!(record.wire()["status"], "input_required");
        assert!(record.wire().get("result").is_none());
    }

    #[test]
    fn a_record_written_before_scopes_were_kept_still_reads() {
        let old = json!({
            "id": "0123456789abcdef0123456789abcdef", "status": "working", "created_ms": 0, "updated_ms": 0,
            "ttl_ms": 1000, "poll_ms": 100, "input_requests": {}, "owner": 0, "attempts": 1
        });
        let record: TaskRecord = serde_json::from_value(old).unwrap_or_else(|e| panic!("{e}"));
        assert!(record.scopes.is_empty());
    }
}
