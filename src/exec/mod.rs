//! Supervised execution (`[exec]`, off by default): configured programs run as OS
//! process groups, each contained (a cgroup or a PID namespace, `exec.isolation`) and
//! owned by an actor under the executions supervisor, their output stored as events.
//!
//! - [`tools`]: `execute`, `get_execution_output`, `list_executions`,
//!   `cancel_execution`, the handler-side face of this module.
//! - [`ExecHandle`]: what the tools call; it sends the supervisor its messages and reads
//!   the store.
//! - [`supervisor`] admits and supervises; [`execution`] owns one program (process group,
//!   timers, pump, directory); [`process`] spawns and signals, [`child`] is what the
//!   child does before `exec`; [`isolation`] chooses the containment at start-up,
//!   [`cgroup`] is one of them; [`reaper`] reaps the orphans the server adopts as a
//!   subreaper; [`pump`] and [`chunker`]
//!   turn output into stored chunks; [`record`] is what the store keeps, so any replica
//!   answers; [`poll`] reads a log back.
//!
//! See docs/execution.md for the configuration and the security model.

pub mod args;
pub mod cgroup;
pub mod child;
pub mod chunker;
pub mod execution;
pub mod isolation;
pub mod poll;
pub mod process;
pub mod pump;
pub mod reaper;
pub mod record;
pub mod supervisor;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use ractor::{Actor, ActorRef};
use tokio_util::task::AbortOnDropHandle;

use crate::config::ExecConfig;
use crate::event_store::EventStoreHandle;
use crate::ids::SessionId;
pub use record::{ExecRecord, Status};
pub use supervisor::{ExecMsg, ExecSupervisor, StartRequest, Started};

/// How long a call to the supervisor may take (a start forks and writes the store).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why an execution request failed. Each message says what the caller can do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExecError {
    /// No `[exec.programs.NAME]` entry.
    #[error("no program named `{0}` is configured")]
    UnknownProgram(String),
    /// The arguments break the program's limits.
    #[error("{0}")]
    Invalid(String),
    /// A limit on running executions is reached.
    #[error("too many executions: {0}; wait for one to end")]
    Busy(String),
    /// The program could not start.
    #[error("the program could not start: {0}")]
    Spawn(String),
    /// No such execution is kept, or it is another principal's.
    #[error(
        "unknown execution `{0}`: it never existed, its output expired (exec.output_ttl), or it belongs to another principal"
    )]
    Unknown(String),
    /// The output after the given id is no longer kept.
    #[error(
        "{missing} chunks after `{after}` were evicted (retention limits); call again without last_event_id to read the oldest output still kept"
    )]
    Evicted {
        /// The id asked for.
        after: String,
        /// How many chunks are gone.
        missing: u64,
    },
    /// The id is not one of this execution's chunks.
    #[error(
        "`{0}` is not an event id of this execution's output; use an `id` from its chunks, or omit last_event_id to read from the start"
    )]
    ForeignId(String),
    /// The log is gone while the record is kept.
    #[error("the output of execution `{0}` expired; only its outcome is kept")]
    Expired(String),
    /// The event store could not be reached.
    #[error("the event store is unavailable: {0}; try again")]
    Store(String),
    /// The executions supervisor is not running.
    #[error("the execution service is unavailable: {0}")]
    Unavailable(String),
}

/// Who is asking, as the execution module needs to know.
#[derive(Debug, Clone, Default)]
pub struct ExecCaller {
    /// The principal (`[auth]`), as an owner key.
    pub owner: Option<String>,
    /// The session, if any.
    pub session: Option<SessionId>,
}

impl ExecCaller {
    /// Whose limit and index an execution counts in: the principal, else the session.
    pub fn party(&self) -> Option<String> {
        match (&self.owner, self.session) {
            (Some(owner), _) => Some(format!("p:{owner}")),
            (None, Some(session)) => Some(format!("s:{session}")),
            (None, None) => None,
        }
    }

    /// True when this caller may see `record`: its owner, or anyone who knows the id of
    /// an execution started without `[auth]`.
    pub fn may_see(&self, record: &ExecRecord) -> bool {
        record.owner.is_none() || record.owner == self.owner
    }
}

/// Typed access to the executions supervisor and the records in the store.
#[derive(Debug, Clone)]
pub struct ExecHandle {
    actor: ActorRef<ExecMsg>,
    store: EventStoreHandle,
    settings: Arc<ExecConfig>,
    /// Reaps the orphans the server adopts, while any handle lives.
    _reaper: Arc<AbortOnDropHandle<()>>,
}

impl ExecHandle {
    /// Chooses the isolation (refusing to start without one that the configuration
    /// accepts), makes the server a subreaper, and starts the executions supervisor.
    pub async fn start(
        settings: Arc<ExecConfig>,
        store: EventStoreHandle,
    ) -> Result<Self, ExecError> {
        let (isolation, separation) =
            isolation::start(&settings).map_err(|e| ExecError::Unavailable(e.to_string()))?;
        let orphans = reaper::start()
            .map_err(|e| ExecError::Unavailable(format!("cannot become a child subreaper: {e}")))?;
        let args = (settings.clone(), store.clone(), isolation, separation);
        let (actor, _) = Actor::spawn(None, ExecSupervisor, args)
            .await
            .map_err(|e| ExecError::Unavailable(e.to_string()))?;
        Ok(Self {
            actor,
            store,
            settings,
            _reaper: Arc::new(orphans),
        })
    }

    /// `[exec]`.
    pub fn settings(&self) -> &ExecConfig {
        &self.settings
    }

    /// Starts an execution.
    pub async fn run(&self, request: StartRequest) -> Result<Started, ExecError> {
        let request = Box::new(request);
        match self
            .actor
            .call(|reply| ExecMsg::Start(request, reply), Some(CALL_TIMEOUT))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(started)) => started,
            Ok(_) => Err(ExecError::Unavailable(
                "the supervisor did not answer".into(),
            )),
            Err(e) => Err(ExecError::Unavailable(e.to_string())),
        }
    }

    /// Stops execution `id` for `reason` if it runs on this replica; whether it does.
    pub async fn stop_here(&self, id: SessionId, reason: Status) -> bool {
        matches!(
            self.actor
                .call(
                    |reply| ExecMsg::Stop(id, reason, Some(reply)),
                    Some(CALL_TIMEOUT)
                )
                .await,
            Ok(ractor::rpc::CallResult::Success(true))
        )
    }

    /// [`Self::stop_here`] without waiting: for a request dropped mid-execution (it
    /// may run in a `Drop`).
    pub fn abandon(&self, id: SessionId) {
        let _ = self.actor.cast(ExecMsg::Stop(id, Status::Cancelled, None));
    }

    /// Cancels execution `id` for `caller`: at once if it runs here, else at its
    /// replica's next heartbeat. Returns its record as it was.
    pub async fn cancel(
        &self,
        caller: &ExecCaller,
        id: SessionId,
    ) -> Result<ExecRecord, ExecError> {
        let record = self.record(caller, id).await?;
        if record.status == Status::Running && !self.stop_here(id, Status::Cancelled).await {
            let ttl = self.settings.heartbeat.get() * 4;
            self.store
                .put_record(&cancel_key(id), Bytes::from_static(b"1"), ttl)
                .await
                .map_err(|e| ExecError::Store(e.to_string()))?;
        }
        Ok(record)
    }

    /// Execution `id`'s record, if `caller` may see it.
    pub async fn record(
        &self,
        caller: &ExecCaller,
        id: SessionId,
    ) -> Result<ExecRecord, ExecError> {
        match record::get(&self.store, id).await {
            Ok(Some(record)) if caller.may_see(&record) => Ok(record),
            Ok(_) => Err(ExecError::Unknown(id.to_string())),
            Err(e) => Err(ExecError::Store(e.to_string())),
        }
    }

    /// The caller's executions, newest first, at most `limit`.
    pub async fn list(
        &self,
        caller: &ExecCaller,
        limit: usize,
    ) -> Result<Vec<ExecRecord>, ExecError> {
        let Some(party) = caller.party() else {
            return Err(ExecError::Invalid(
                "list_executions needs a session or an authenticated caller".into(),
            ));
        };
        let ids = poll::read_all(&self.store, record::index_key(&party))
            .await?
            .iter()
            .filter_map(|event| record::parse_index_entry(&event.payload))
            .collect::<Vec<_>>();
        let mut out = Vec::new();
        for id in ids.into_iter().rev().take(limit) {
            if let Ok(record) = self.record(caller, id).await {
                out.push(record);
            }
        }
        Ok(out)
    }

    /// Whether a cancel was asked for `id` on another replica.
    pub(crate) async fn cancel_asked(store: &EventStoreHandle, id: SessionId) -> bool {
        matches!(store.get_record(&cancel_key(id)).await, Ok(Some(_)))
    }

    /// Stops the supervisor and with it every execution still running (their groups are
    /// killed as their actors stop).
    pub async fn shutdown(&self) {
        // SIGTERM, the grace, SIGKILL, the outcome stored: a little past the grace.
        let wait = self.settings.kill_grace * 2 + Duration::from_secs(5);
        let _ = self.actor.call(ExecMsg::Drain, Some(wait)).await;
        let _ = self
            .actor
            .stop_and_wait(Some("shutdown".into()), Some(CALL_TIMEOUT))
            .await;
    }

    async fn watch(&self, id: SessionId) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self
            .actor
            .call(|reply| ExecMsg::Watch(id, reply), Some(CALL_TIMEOUT))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(watch)) => watch,
            _ => None,
        }
    }
}

fn cancel_key(id: SessionId) -> String {
    format!("exec-cancel:{id}")
}
