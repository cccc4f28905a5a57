//! What the event store keeps of an execution, so that any replica can answer for it:
//! its record (status, owner, outcome), its output log and its owner's index.
//!
//! - The record is stored like a task record, under `exec:<id>`, for `exec.output_ttl`
//!   past the execution's end; a running execution renews it every `exec.heartbeat`.
//! - The output log is a store session of its own whose id is the execution id: its
//!   stream 1 holds one event per chunk, then the outcome as the last event. So a chunk's
//!   id is an event id, resumable and evicted like any other, and foreign ids are
//!   recognised.
//! - The index is a store session per owner (principal, or session without `[auth]`)
//!   whose events name the owner's executions, for `list_executions` from any replica.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::event_store::{EventStoreHandle, StoreCallError};
use crate::ids::{SessionId, StreamKey, StreamNo};

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Its program runs.
    Running,
    /// It exited by itself (see the exit code).
    Exited,
    /// A signal ended it that the server did not send (e.g. RLIMIT_CPU's SIGKILL).
    Killed,
    /// Stopped at its wall time.
    Timeout,
    /// Stopped by `cancel_execution`, the end of its request or session, or shutdown.
    Cancelled,
    /// Stopped when its output reached the program's `output_bytes`.
    OutputLimit,
    /// Could not start, or its actor failed (the message says why).
    Failed,
    /// Its replica stopped renewing the record (it died); its program died with it (the
    /// parent-death signal of its group's leader).
    Lost,
}

impl Status {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Exited => "exited",
            Self::Killed => "killed",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::OutputLimit => "output_limit",
            Self::Failed => "failed",
            Self::Lost => "lost",
        }
    }
}

/// CPU and memory an execution used (from `wait4`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// User CPU time, ms.
    pub user_ms: u64,
    /// System CPU time, ms.
    pub system_ms: u64,
    /// Peak resident memory, KiB.
    pub max_rss_kb: u64,
}

/// How an execution ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// Why it ended.
    pub status: Status,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// Wall time from start to end, ms.
    pub duration_ms: u64,
    /// Output was cut at the program's `output_bytes`.
    pub truncated: bool,
    /// Bytes read from stdout.
    pub stdout_bytes: u64,
    /// Bytes read from stderr.
    pub stderr_bytes: u64,
    /// Chunks stored.
    pub chunks: u64,
    /// Resources used.
    pub usage: Usage,
    /// What went wrong, for `failed` and `lost`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl Outcome {
    /// The outcome of an execution that never ran to its end: `failed` or `lost`.
    pub fn without_exit(status: Status, message: String) -> Self {
        Self {
            status,
            exit_code: None,
            signal: None,
            duration_ms: 0,
            truncated: false,
            stdout_bytes: 0,
            stderr_bytes: 0,
            chunks: 0,
            usage: Usage::default(),
            message: Some(message),
        }
    }
}

/// The stored record of one execution.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecRecord {
    /// The execution id.
    pub id: SessionId,
    /// The program's name.
    pub program: String,
    /// The principal that started it (`[auth]`): only it may read or cancel it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Its status; `running` until the outcome is stored.
    pub status: Status,
    /// Start, Unix ms.
    pub started_ms: u64,
    /// Last renewal, Unix ms, while running.
    pub heartbeat_ms: u64,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
}

impl ExecRecord {
    /// Its status as a reader sees it: a running record not renewed for three heartbeats
    /// belongs to a replica that died.
    pub fn status_at(&self, now_ms: u64, heartbeat_ms: u64) -> Status {
        match self.status {
            Status::Running if now_ms > self.heartbeat_ms + 3 * heartbeat_ms => Status::Lost,
            status => status,
        }
    }
}

/// The log of execution `id`.
pub fn log_key(id: SessionId) -> StreamKey {
    StreamKey::new(id, StreamNo(1))
}

/// The index of `party`'s executions.
pub fn index_key(party: &str) -> StreamKey {
    let digest = Sha256::new()
        .chain_update(b"otpmcp exec index\0")
        .chain_update(party.as_bytes())
        .finalize();
    let mut bytes = [0; 16];
    bytes.copy_from_slice(&digest[..16]);
    // Every 32-hex-digit string is a session id.
    let id = format!("{:032x}", u128::from_be_bytes(bytes))
        .parse()
        .unwrap_or_else(|_| SessionId::random());
    StreamKey::new(id, StreamNo(1))
}

fn record_id(id: SessionId) -> String {
    format!("exec:{id}")
}

/// Stores `record` for `ttl`.
pub async fn put(
    store: &EventStoreHandle,
    record: &ExecRecord,
    ttl: std::time::Duration,
) -> Result<(), StoreCallError> {
    let bytes = serde_json::to_vec(record).unwrap_or_default();
    store
        .put_record(&record_id(record.id), Bytes::from(bytes), ttl)
        .await
}

/// Execution `id`'s record, if it is kept.
pub async fn get(
    store: &EventStoreHandle,
    id: SessionId,
) -> Result<Option<ExecRecord>, StoreCallError> {
    let bytes = store.get_record(&record_id(id)).await?;
    Ok(bytes.and_then(|b| serde_json::from_slice(&b).ok()))
}

/// An entry of an owner's index.
pub fn index_entry(record: &ExecRecord) -> Bytes {
    let entry = serde_json::json!({"id": record.id, "program": record.program, "startedMs": record.started_ms});
    Bytes::from(entry.to_string())
}

/// The execution an index entry names.
pub fn parse_index_entry(payload: &[u8]) -> Option<SessionId> {
    let entry: Value = serde_json::from_slice(payload).ok()?;
    entry.get("id")?.as_str()?.parse().ok()
}

/// Unix time now, ms.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
