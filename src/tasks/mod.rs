//! Durable tasks (the `io.modelcontextprotocol/tasks` extension of 2026-07-28): a
//! `tools/call` answered with a task id, which the client polls (`tasks/get`), answers
//! (`tasks/update`) and cancels (`tasks/cancel`) from any replica.
//!
//! - A task's record lives in the event store (memory or Redis), written by the replica
//!   running it before any change can be seen: `tasks/get` on any replica reads the store.
//! - Each running task is a [`runner`] process owning its record and handler. The
//!   registry (a process of its own) maps the ids of this replica's running tasks to
//!   their runners, so `tasks/update` and `tasks/cancel` reach them; from another replica
//!   they travel over the cluster's bus ([`TaskSignals`]).
//! - A running task holds a lease ([`TaskLeases`]): if its replica dies, the cluster's
//!   lease keeper calls [`TaskHandle::orphaned`], which runs a re-runnable task again
//!   here or ends it `failed`.
//!
//! This layer knows the store, the news hub and the handler API's [`Outbox`]; it runs
//! handlers it is given (the server builds them), and asks [`Rerun`] to build one again.

pub mod events;
mod follow;
mod readers;
pub mod record;
mod registry;
mod runner;
mod signal;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::auth::Principal;
use crate::event_store::format::{self, CURRENT_FORMAT, WriteFormat};
use crate::event_store::{EventStoreHandle, Quota, StreamWriter};
use crate::handler::{BoxFuture, Outbox};
use crate::ids::{TaskId, TaskIdError};
use crate::protocol::{ErrorObject, Outgoing};
use crate::server_news::{NewsHub, ServerNews};
pub use follow::Followed;
pub(crate) use readers::{Reader, TaskReaders};

/// What a task record is called where its reading warns.
const TASK_RECORD: &str = "task record";
use record::{TaskRecord, TaskStatus, TaskWork, now_ms};
use registry::RegistryMsg;
pub use runner::{TaskMsg, TaskOutbox};
pub use signal::TaskSignal;

/// The message of a task whose replica was lost.
pub const LOST_REPLICA_MESSAGE: &str = "the server replica running this task was lost";

/// The message of a task whose replica shut down (a planned restart) and that could not
/// run again; its error's `data` says `"retryable": true`.
pub const STOPPED_REPLICA_MESSAGE: &str = "the server replica running this task shut down before it finished; the task may be started again";

/// How long a signal waits for room in a busy task's mailbox.
pub const SIGNAL_WAIT: Duration = Duration::from_secs(2);

/// How many times a re-runnable task is started at most (the first run and one re-run).
pub const MAX_ATTEMPTS: u32 = 2;

/// What `[tasks]` and the cluster decide.
#[derive(Debug, Clone)]
pub struct TaskSettings {
    /// `ttlMs` of new tasks.
    pub ttl: Duration,
    /// `pollIntervalMs`.
    pub poll_interval: Duration,
    /// Most tasks running here at once.
    pub max_running: usize,
    /// Run a lost re-runnable task again instead of failing it (`tasks.rerun_lost`).
    pub rerun_lost: bool,
    /// Most live tasks one principal holds (`tasks.max_per_principal`).
    pub max_per_principal: usize,
}

impl From<&crate::config::TasksConfig> for TaskSettings {
    fn from(config: &crate::config::TasksConfig) -> Self {
        Self {
            ttl: config.ttl.get(),
            poll_interval: config.poll_interval.get(),
            max_running: config.max_running.get(),
            rerun_lost: config.rerun_lost,
            max_per_principal: config.max_per_principal.get(),
        }
    }
}

impl Default for TaskSettings {
    /// The `[tasks]` defaults.
    fn default() -> Self {
        Self::from(&crate::config::TasksConfig::default())
    }
}

/// Why a task operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskError {
    /// No such task (never, expired, or not this principal's).
    #[error("Task not found: {0}")]
    NotFound(String),
    /// Too many tasks running or stored.
    #[error("too many tasks: {0}")]
    Full(String),
    /// The store could not be reached.
    #[error("the task store is unavailable: {0}")]
    Unavailable(String),
    /// The task did not take a signal in time (too many waiting); send it again.
    #[error("task {0} is busy; send again")]
    Busy(String),
}

/// A malformed id names no task: answered as an unknown one.
impl From<TaskIdError> for TaskError {
    fn from(e: TaskIdError) -> Self {
        TaskError::NotFound(e.text().to_owned())
    }
}

impl From<TaskError> for ErrorObject {
    fn from(e: TaskError) -> Self {
        match e {
            TaskError::NotFound(_) => ErrorObject::invalid_params(e.to_string()),
            other => ErrorObject::internal(other.to_string()),
        }
    }
}

/// Who creates a task.
#[derive(Debug, Clone, Default)]
pub struct Creator {
    /// Who may see it: the [`crate::auth::Owner`] of the caller, as text (`None` without
    /// `[auth]`).
    pub owner: Option<String>,
    /// Whose `tasks.max_per_principal` it counts against: the owner with `[auth]`, the
    /// client's address without.
    pub quota: String,
    /// The scopes its tool requires (`[auth]`), checked again on every later use.
    pub scopes: Vec<String>,
}

/// Leases on running tasks (the cluster implements it with the replica's lease).
pub trait TaskLeases: Send + Sync + std::fmt::Debug {
    /// Task `id` runs here; awaited before its id reaches the client.
    fn begin(&self, id: TaskId) -> BoxFuture<'_, Result<(), String>>;
    /// Task `id` stopped running here.
    fn end(&self, id: TaskId) -> BoxFuture<'_, ()>;
}

/// Delivery of signals to the replica running a task (the cluster's bus).
pub trait TaskSignals: Send + Sync + std::fmt::Debug {
    /// Sends `signal` for task `id` to replica `owner`.
    fn send(&self, owner: u64, id: TaskId, signal: TaskSignal)
    -> BoxFuture<'_, Result<(), String>>;
}

/// Builds a task's handler again from its record (the server implements it).
pub trait Rerun: Send + Sync {
    /// The handler's work for `work`, its questions going to the task's `outbox`.
    fn rerun(&self, work: &TaskWork, outbox: TaskOutbox) -> BoxFuture<'static, Outgoing>;
}

/// The tasks of this replica; cheap to clone.
#[derive(Clone)]
pub struct TaskHandle {
    inner: Arc<Inner>,
}

struct Inner {
    store: EventStoreHandle,
    news: NewsHub,
    settings: TaskSettings,
    registry: mpsc::Sender<RegistryMsg>,
    /// This replica's number, once it has joined a cluster (0 otherwise).
    replica: OnceLock<u64>,
    leases: OnceLock<Arc<dyn TaskLeases>>,
    signals: OnceLock<Arc<dyn TaskSignals>>,
    rerun: OnceLock<Arc<dyn Rerun>>,
    /// The shared formats' version records are written in, once in a cluster (the
    /// current one otherwise).
    format: OnceLock<WriteFormat>,
}

impl std::fmt::Debug for TaskHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskHandle")
            .field("settings", &self.inner.settings)
            .finish()
    }
}

/// A task stored and registered, whose handler has not started running as one yet.
/// Dropped without [`NewTask::run`] (the request that made it went away first): a new
/// task, whose id no client has seen, is deleted, giving its place in its principal's
/// quota back; a task run again ends `failed`.
pub struct NewTask {
    record: TaskRecord,
    /// A new task's quota principal (`None` for a task run again).
    quota: Option<String>,
    /// Until it runs (then the runner's).
    mailbox: Option<mpsc::Receiver<TaskMsg>>,
    sender: mpsc::Sender<TaskMsg>,
    /// Until it runs: who cleans up if it never does.
    tasks: Option<TaskHandle>,
}

impl Drop for NewTask {
    fn drop(&mut self) {
        let Some(tasks) = self.tasks.take() else {
            return;
        };
        let mut record = self.record.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let quota = self.quota.take();
        runtime.spawn(async move {
            if let Some(principal) = quota {
                tasks.discard(record.id, &principal).await;
                return;
            }
            let why = "the request that created this task went away before it started";
            record.error = Some(ErrorObject::internal(why));
            record.set(TaskStatus::Failed, Some(why.into()));
            tasks.save(&record).await;
            tasks.finished(record.id).await;
        });
    }
}

impl NewTask {
    /// The task as `CreateTaskResult` shows it (without `resultType`).
    pub fn wire(&self) -> Value {
        self.record.wire()
    }

    /// The outbox the task's handler must use.
    pub fn outbox(&self, announce: Option<Arc<dyn Outbox>>) -> TaskOutbox {
        TaskOutbox::new(self.sender.clone(), announce)
    }

    /// Runs `work` as this task, in a process of its own.
    pub fn run(mut self, work: BoxFuture<'static, Outgoing>) {
        let (Some(tasks), Some(mailbox)) = (self.tasks.take(), self.mailbox.take()) else {
            return;
        };
        tokio::spawn(runner::run(tasks, self.record.clone(), mailbox, work));
    }
}

impl TaskHandle {
    /// The tasks of this replica, stored through `store`, announced on `news`.
    pub fn new(store: EventStoreHandle, news: NewsHub, settings: TaskSettings) -> Self {
        let (tx, rx) = mpsc::channel(1024);
        tokio::spawn(registry::run(rx, settings.max_running));
        Self {
            inner: Arc::new(Inner {
                store,
                news,
                settings,
                registry: tx,
                replica: OnceLock::new(),
                leases: OnceLock::new(),
                signals: OnceLock::new(),
                rerun: OnceLock::new(),
                format: OnceLock::new(),
            }),
        }
    }

    /// Joins the cluster as replica `replica`, with its leases and bus, writing records
    /// in `format` (Redis only).
    pub fn join_cluster(
        &self,
        replica: u64,
        leases: Arc<dyn TaskLeases>,
        signals: Arc<dyn TaskSignals>,
        format: WriteFormat,
    ) {
        let _ = self.inner.replica.set(replica);
        let _ = self.inner.leases.set(leases);
        let _ = self.inner.signals.set(signals);
        let _ = self.inner.format.set(format);
    }

    /// The version to write a record in.
    fn write_format(&self) -> u8 {
        self.inner
            .format
            .get()
            .map_or(CURRENT_FORMAT, WriteFormat::get)
    }

    fn replica(&self) -> u64 {
        self.inner.replica.get().copied().unwrap_or(0)
    }

    /// Installs what builds a lost task's handler again.
    pub fn set_rerun(&self, rerun: Arc<dyn Rerun>) {
        let _ = self.inner.rerun.set(rerun);
    }

    /// Creates a task: stored (so any replica can read it), registered here and leased,
    /// before the caller may tell the client its id. `rerun`: what to run again if this
    /// replica is lost (a tool that may run twice).
    pub async fn create(
        &self,
        rerun: Option<TaskWork>,
        creator: Creator,
    ) -> Result<NewTask, TaskError> {
        let id = TaskId::random().map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let now = now_ms();
        let settings = &self.inner.settings;
        let record = TaskRecord {
            id,
            status: TaskStatus::Working,
            status_message: None,
            created_ms: now,
            updated_ms: now,
            ttl_ms: millis(settings.ttl),
            poll_ms: millis(settings.poll_interval),
            input_requests: Map::new(),
            result: None,
            error: None,
            owner: self.replica(),
            principal: creator.owner,
            rerun,
            attempts: 1,
            scopes: creator.scopes,
        };
        let quota = Quota {
            principal: creator.quota,
            max: settings.max_per_principal,
        };
        self.start(record, Some(quota)).await
    }

    /// Drops new task `id`, whose id never reached its client: its record (giving its
    /// place in `principal`'s quota back) and its log.
    async fn discard(&self, id: TaskId, principal: &str) {
        self.finished(id).await;
        let deleted = self.inner.store.delete_record(id.as_str(), Some(principal));
        if let Err(e) = deleted.await {
            tracing::warn!(task_id = %id, error = %e, "could not drop a task that never started; it counts until its ttl");
        }
        let _ = self.inner.store.forget_session(id.log_key().session).await;
    }

    /// Registers, leases and stores `record` as running here; a new task's counted
    /// against `quota`.
    async fn start(&self, record: TaskRecord, quota: Option<Quota>) -> Result<NewTask, TaskError> {
        let (sender, mailbox) = mpsc::channel(runner::MAILBOX);
        let (reply, registered) = oneshot::channel();
        let msg = RegistryMsg::Register {
            id: record.id,
            mailbox: sender.clone(),
            reply,
        };
        let room = self.inner.registry.send(msg).await.is_ok() && registered.await == Ok(true);
        if !room {
            return Err(TaskError::Full(format!(
                "{} are running on this replica (tasks.max_running)",
                self.inner.settings.max_running
            )));
        }
        if let Some(leases) = self.inner.leases.get()
            && let Err(e) = leases.begin(record.id).await
        {
            tracing::warn!(task_id = %record.id, error = %e, "if this replica dies, the task stays working until its ttl");
        }
        // The log's store session, before its first event (the status below). Idempotent:
        // a re-run continues the log of the run it replaces.
        let log = record.id.log_key().session;
        // A new task's log counts against its principal's share of the event budget.
        let _ = match &quota {
            Some(quota) => self.inner.store.open_task_log(log, &quota.principal).await,
            None => self.inner.store.open_session(log).await,
        };
        let principal = quota.as_ref().map(|q| q.principal.clone());
        if let Err(e) = self.put(&record, quota).await {
            self.finished(record.id).await;
            // A refused new task has no record: its log (the status just written) goes
            // too. A task run again keeps its log: its client knows it.
            if principal.is_some() {
                let _ = self.inner.store.forget_session(log).await;
            }
            return Err(e);
        }
        Ok(NewTask {
            record,
            quota: principal,
            mailbox: Some(mailbox),
            sender,
            tasks: Some(self.clone()),
        })
    }

    /// Stores `record` ([`TaskHandle::save`]) once every note `log` sent is stored, so the
    /// log keeps the order the task made its notes and changes in.
    pub(crate) async fn save_after(&self, log: &mut StreamWriter, record: &TaskRecord) {
        if let Err(e) = log.flush().await {
            tracing::warn!(task_id = %record.id, error = %e, "could not store a task's event");
        }
        self.save(record).await;
    }

    /// Stores `record` and announces it; a failure is logged (the runner goes on, and
    /// the next change stores the whole record again).
    pub(crate) async fn save(&self, record: &TaskRecord) {
        if let Err(e) = self.put(record, None).await {
            tracing::error!(task_id = %record.id, error = %e, "could not store a task's change");
        }
    }

    async fn put(&self, record: &TaskRecord, quota: Option<Quota>) -> Result<(), TaskError> {
        // In the log before the record: a `tasks/stream` reader never learns of a status
        // `tasks/get` could not show yet, and a `tasks/get` never shows one its log lacks.
        let status = events::Stored {
            kind: events::STATUS,
            payload: record.wire(),
            terminal: record.is_terminal(),
        };
        self.append(record.id, status).await;
        let bytes = format::to_vec(self.write_format(), record)
            .map_err(|e| TaskError::Unavailable(e.to_string()))?;
        let bytes = Bytes::from(bytes);
        let ttl = record.remaining(now_ms());
        let store = &self.inner.store;
        let stored = match quota {
            Some(quota) => {
                store
                    .create_record(record.id.as_str(), bytes, ttl, quota)
                    .await
            }
            None => store.put_record(record.id.as_str(), bytes, ttl).await,
        };
        stored.map_err(|e| match e {
            crate::event_store::StoreCallError::Store(
                crate::event_store::StoreError::TooManyTasks,
            ) => TaskError::Full("the store holds tasks.max_tasks tasks".into()),
            crate::event_store::StoreCallError::Store(
                crate::event_store::StoreError::PrincipalFull,
            ) => TaskError::Full(format!(
                "this principal holds {} live tasks already (tasks.max_per_principal); \
                 finished tasks count until their ttl",
                self.inner.settings.max_per_principal
            )),
            other => TaskError::Unavailable(other.to_string()),
        })?;
        self.inner.news.publish(ServerNews::Task {
            task_id: record.id,
            task: record.wire(),
            owner: record.principal.clone(),
        });
        Ok(())
    }

    /// A runner ended.
    async fn finished(&self, id: TaskId) {
        let _ = self.inner.registry.send(RegistryMsg::Unregister(id)).await;
        if let Some(leases) = self.inner.leases.get() {
            leases.end(id).await;
        }
    }

    /// Task `id` as `principal` may see it: its own (the owner matches), and only while
    /// its token still holds the scopes the task's tool required. Anything else is not
    /// found, like an unknown id, so a token learns nothing of tasks it may not use.
    pub async fn get(
        &self,
        id: TaskId,
        principal: Option<&Principal>,
    ) -> Result<TaskRecord, TaskError> {
        let not_found = || TaskError::NotFound(id.to_string());
        let bytes = self
            .inner
            .store
            .get_record(id.as_str())
            .await
            .map_err(|e| TaskError::Unavailable(e.to_string()))?
            .ok_or_else(not_found)?;
        let record: TaskRecord =
            format::from_slice(TASK_RECORD, &bytes).map_err(|_| not_found())?;
        // A task is visible only to the principal that created it, and only with its
        // tool's scopes (a token down-scoped since is refused as the tool would be).
        let owner = principal.map(|p| p.owner().to_string());
        if record.principal != owner {
            return Err(not_found());
        }
        if let Some(principal) = principal
            && !principal.has_scopes(&record.scopes)
        {
            return Err(not_found());
        }
        Ok(record)
    }

    /// Task `id` was running on lost replica `lost`: runs it again here if its tool may
    /// run twice and it has not been, else ends it `failed`. Idempotent, and safe when
    /// several replicas reap at once (the store's record decides, last write wins, and
    /// both outcomes are an end the client can see).
    pub async fn orphaned(&self, id: TaskId, lost: u64, stopped: bool) {
        let Ok(bytes) = self.inner.store.get_record(id.as_str()).await else {
            return;
        };
        let Some(mut record) =
            bytes.and_then(|b| format::from_slice::<TaskRecord>(TASK_RECORD, &b).ok())
        else {
            return;
        };
        if record.is_terminal() || record.owner != lost {
            return;
        }
        let rerun = self
            .inner
            .rerun
            .get()
            .filter(|_| self.inner.settings.rerun_lost)
            .cloned();
        // A planned stop is not a failed attempt: a rolling restart may hit one task
        // several times, and each time it is handed on.
        if let (Some(work), Some(rerun)) = (record.rerun.clone(), rerun)
            && (stopped || record.attempts < MAX_ATTEMPTS)
        {
            record.owner = self.replica();
            let why = if stopped {
                "restarted after its replica shut down"
            } else {
                record.attempts += 1;
                "restarted after its replica was lost"
            };
            record.input_requests.clear();
            record.set(TaskStatus::Working, Some(why.into()));
            match self.start(record.clone(), None).await {
                Ok(task) => {
                    tracing::warn!(task_id = %id, replica = lost, stopped, "a task whose replica was lost or stopped runs again here");
                    let work = rerun.rerun(&work, task.outbox(None));
                    task.run(work);
                    return;
                }
                // No room here (tasks.max_running), or the store refused: it fails.
                Err(e) => {
                    tracing::warn!(task_id = %id, error = %e, "could not run a lost task again")
                }
            }
        }
        record.input_requests.clear();
        let error = if stopped {
            ErrorObject::retryable(STOPPED_REPLICA_MESSAGE)
        } else {
            ErrorObject::internal(LOST_REPLICA_MESSAGE)
        };
        record.set(TaskStatus::Failed, Some(error.message.clone()));
        record.error = Some(error);
        self.save(&record).await;
        tracing::warn!(task_id = %id, replica = lost, stopped, "a task whose replica was lost or stopped has failed");
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
