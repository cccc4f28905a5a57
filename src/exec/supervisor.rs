//! The executions supervisor: admits executions (`exec.max_running`,
//! `exec.max_per_session`), starts each as a linked [`Execution`] actor, hears when one
//! ends or fails, and drops the store's copies of ended executions after
//! `exec.output_ttl`. Only [`super::ExecHandle`] builds its messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::{mpsc, oneshot, watch};

use super::ExecError;
use super::execution::{Execution, ExecutionArgs, ExecutionMsg};
use super::isolation::{Isolation, Separation};
use super::pump::Output;
use super::record::{self, ExecRecord, Outcome, Status, index_entry, index_key, log_key};
use crate::config::ExecConfig;
use crate::event_store::EventStoreHandle;
use crate::ids::SessionId;

/// Chunks handed to the request ahead of it; past them the pump waits.
const OUTPUT_BUFFER: usize = 16;
/// Whose `max_per_session` counts callers with neither a session nor a principal (a
/// stateless request or a task without `[auth]`): all of them together.
const ANONYMOUS: &str = "anonymous";

/// The supervisor actor.
pub struct ExecSupervisor;

/// What one `execute` asks for, checked against its program's entry.
#[derive(Debug)]
pub struct StartRequest {
    /// The program's name.
    pub program: String,
    /// Arguments appended to its command.
    pub args: Vec<String>,
    /// Its stdin.
    pub stdin: Option<Vec<u8>>,
    /// Its wall time.
    pub timeout: Duration,
    /// The principal starting it, if `[auth]` is on.
    pub owner: Option<String>,
    /// Whose limit and index it counts in (the session, else the principal).
    pub party: Option<String>,
}

/// A started execution, as its request sees it.
#[derive(Debug)]
pub struct Started {
    /// Its id.
    pub id: SessionId,
    /// Its chunks as they are stored.
    pub output: mpsc::Receiver<Output>,
    /// Its outcome, once stored.
    pub done: oneshot::Receiver<Outcome>,
}

/// Messages of the supervisor.
#[derive(Debug)]
pub enum ExecMsg {
    /// Admit and start an execution.
    Start(Box<StartRequest>, RpcReplyPort<Result<Started, ExecError>>),
    /// Stop execution `id` if it runs here; answers (if asked) whether it did.
    Stop(SessionId, Status, Option<RpcReplyPort<bool>>),
    /// The progress of execution `id`, if it runs here.
    Watch(SessionId, RpcReplyPort<Option<watch::Receiver<u64>>>),
    /// Drop the store's copy of an ended execution's log, or an idle index.
    Forget(SessionId),
    /// Shutdown: stop every execution; answers once none runs.
    Drain(RpcReplyPort<()>),
}

struct Running {
    actor: ActorRef<ExecutionMsg>,
    /// Whose `max_per_session` it counts in.
    party: String,
    progress: watch::Receiver<u64>,
    record: ExecRecord,
}

/// What the supervisor owns.
pub struct ExecSupervisorState {
    settings: Arc<ExecConfig>,
    store: EventStoreHandle,
    /// How every execution is contained, chosen at start-up.
    isolation: Isolation,
    /// How executions are kept from seeing each other, chosen at start-up.
    separation: Separation,
    running: HashMap<SessionId, Running>,
    by_actor: HashMap<ActorId, SessionId>,
    per_party: HashMap<String, usize>,
    /// When each owner's index was last written.
    indexes: HashMap<SessionId, Instant>,
    /// Waiting for the last execution to end.
    drains: Vec<RpcReplyPort<()>>,
}

impl Actor for ExecSupervisor {
    type Msg = ExecMsg;
    type State = ExecSupervisorState;
    type Arguments = (Arc<ExecConfig>, EventStoreHandle, Isolation, Separation);

    async fn pre_start(
        &self,
        _: ActorRef<Self::Msg>,
        (settings, store, isolation, separation): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(ExecSupervisorState {
            settings,
            store,
            isolation,
            separation,
            running: HashMap::new(),
            by_actor: HashMap::new(),
            per_party: HashMap::new(),
            indexes: HashMap::new(),
            drains: Vec::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ExecMsg::Start(request, reply) => {
                let started = state.start(&myself, *request).await;
                let id = started.as_ref().ok().map(|s| s.id);
                // The caller gave up waiting: nobody would ever stop or read it.
                if reply.send(started).is_err()
                    && let Some(running) = id.and_then(|id| state.running.get(&id))
                {
                    let _ = running.actor.cast(ExecutionMsg::Stop(Status::Cancelled));
                }
            }
            ExecMsg::Stop(id, reason, reply) => {
                let found = state.running.get(&id);
                if let Some(running) = found {
                    let _ = running.actor.cast(ExecutionMsg::Stop(reason));
                }
                if let Some(reply) = reply {
                    let _ = reply.send(found.is_some());
                }
            }
            ExecMsg::Watch(id, reply) => {
                let _ = reply.send(state.running.get(&id).map(|r| r.progress.clone()));
            }
            ExecMsg::Drain(reply) => {
                for running in state.running.values() {
                    let _ = running.actor.cast(ExecutionMsg::Stop(Status::Cancelled));
                }
                match state.running.is_empty() {
                    true => {
                        let _ = reply.send(());
                    }
                    false => state.drains.push(reply),
                }
            }
            ExecMsg::Forget(session) => {
                let ttl = state.settings.output_ttl;
                match state.indexes.get(&session) {
                    // An index written again since: its own timer forgets it.
                    Some(at) if at.elapsed() < ttl.get() => return Ok(()),
                    Some(_) => {
                        state.indexes.remove(&session);
                    }
                    None => {}
                }
                let _ = state.store.forget_session(session).await;
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            SupervisionEvent::ActorFailed(cell, error) => (cell, Some(error.to_string())),
            _ => return Ok(()),
        };
        let Some(id) = state.by_actor.remove(&cell.get_id()) else {
            return Ok(());
        };
        let Some(running) = state.running.remove(&id) else {
            return Ok(());
        };
        if let Some(n) = state.per_party.get_mut(&running.party) {
            *n -= 1;
            if *n == 0 {
                state.per_party.remove(&running.party);
            }
        }
        if let Some(why) = failure {
            // Its state was dropped, killing the group; the record says what happened.
            tracing::error!(execution = %id, error = %why, "an execution actor failed");
            let mut record = running.record;
            record.status = Status::Failed;
            record.outcome = Some(Outcome::without_exit(
                Status::Failed,
                format!("the execution's actor failed: {why}"),
            ));
            let _ = record::put(&state.store, &record, state.settings.output_ttl.get()).await;
        }
        myself.send_after(state.settings.output_ttl.get(), move || ExecMsg::Forget(id));
        if state.running.is_empty() {
            for reply in state.drains.drain(..) {
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Shutdown: each execution's state kills its group as it drops.
        for running in state.running.values() {
            running.actor.stop(Some("shutdown".into()));
        }
        Ok(())
    }
}

impl ExecSupervisorState {
    async fn start(
        &mut self,
        myself: &ActorRef<ExecMsg>,
        request: StartRequest,
    ) -> Result<Started, ExecError> {
        let program = self
            .settings
            .programs
            .get(&request.program)
            .cloned()
            .ok_or_else(|| ExecError::UnknownProgram(request.program.clone()))?;
        if self.running.len() >= self.settings.max_running.get() {
            return Err(ExecError::Busy(format!(
                "{} executions run on this replica (exec.max_running)",
                self.running.len()
            )));
        }
        let party = request.party.clone().unwrap_or_else(|| ANONYMOUS.into());
        if self.per_party.get(&party).copied().unwrap_or(0) >= self.settings.max_per_session.get() {
            return Err(ExecError::Busy(format!(
                "this session runs {} executions already (exec.max_per_session)",
                self.settings.max_per_session
            )));
        }
        let id = SessionId::random();
        let now = record::now_ms();
        let mut record = ExecRecord {
            id,
            program: request.program.clone(),
            owner: request.owner,
            status: Status::Running,
            started_ms: now,
            heartbeat_ms: now,
            outcome: None,
        };
        // The record and the log exist before anyone can learn the id.
        let ttl = self.settings.output_ttl;
        self.store.open_session(id).await.map_err(store_error)?;
        if let Err(e) = self.remember(&record, request.party.as_deref()).await {
            myself.send_after(ttl.get(), move || ExecMsg::Forget(id));
            return Err(e);
        }
        if let Some(party) = &request.party {
            let session = index_key(party).session;
            myself.send_after(ttl.get(), move || ExecMsg::Forget(session));
        }
        let (output_tx, output) = mpsc::channel(OUTPUT_BUFFER);
        let (done_tx, done) = oneshot::channel();
        let (progress_tx, progress) = watch::channel(0);
        let args = ExecutionArgs {
            record: record.clone(),
            program: Arc::new(program),
            args: request.args,
            stdin: request.stdin,
            timeout: request.timeout,
            settings: self.settings.clone(),
            store: self.store.clone(),
            output: output_tx,
            done: done_tx,
            progress: progress_tx,
            isolation: self.isolation.clone(),
            separation: self.separation.clone(),
        };
        let actor = match Actor::spawn_linked(None, Execution, args, myself.get_cell()).await {
            Ok((actor, _)) => actor,
            Err(e) => {
                let why = e.to_string();
                tracing::warn!(execution = %id, program = %record.program, error = %why, "could not start an execution");
                record.status = Status::Failed;
                record.outcome = Some(Outcome::without_exit(Status::Failed, why.clone()));
                let _ = record::put(&self.store, &record, ttl.get()).await;
                let _ = self
                    .store
                    .append(
                        log_key(id),
                        bytes::Bytes::from("{\"type\":\"exit\",\"status\":\"failed\"}"),
                        true,
                    )
                    .await;
                myself.send_after(ttl.get(), move || ExecMsg::Forget(id));
                return Err(ExecError::Spawn(why));
            }
        };
        *self.per_party.entry(party.clone()).or_default() += 1;
        self.by_actor.insert(actor.get_id(), id);
        self.running.insert(
            id,
            Running {
                actor,
                party,
                progress,
                record,
            },
        );
        Ok(Started { id, output, done })
    }
}

impl ExecSupervisorState {
    /// Stores a new execution's record and adds it to its owner's index.
    async fn remember(
        &mut self,
        record: &ExecRecord,
        party: Option<&str>,
    ) -> Result<(), ExecError> {
        record::put(&self.store, record, self.settings.output_ttl.get())
            .await
            .map_err(store_error)?;
        if let Some(party) = party {
            let index = index_key(party);
            self.store
                .open_session(index.session)
                .await
                .map_err(store_error)?;
            self.store
                .append(index, index_entry(record), false)
                .await
                .map_err(store_error)?;
            self.indexes.insert(index.session, Instant::now());
        }
        Ok(())
    }
}

fn store_error(e: impl std::fmt::Display) -> ExecError {
    ExecError::Store(e.to_string())
}
