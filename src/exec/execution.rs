//! The execution actor: one per running program, a child of the executions supervisor.
//!
//! It owns the program's process group, the pump of its output, its timers and its
//! working directory. Stopping (wall time, `cancel_execution`, the request or session
//! ending, shutdown, the output limit) is SIGTERM to the group, `exec.kill_grace`, then
//! SIGKILL. The execution ends once the leader is reaped and the pump has stored the
//! last chunk (or, if a process that left the group holds the pipes, `kill_grace` after
//! the leader). Its outcome is stored as the log's last event and in the record, then
//! sent to the request. The group is signalled only before its leader is reaped, and the
//! actor reaps it itself, so no signal can reach a group that reused the id.
//!
//! With `exec.isolation = "cgroup"` the execution also owns its cgroup: SIGKILL becomes
//! `cgroup.kill`, which reaches the descendants that left the group, and when the leader
//! exits whatever is left in the cgroup is killed; the execution ends once the cgroup is
//! empty. (In a PID namespace the kernel does the same when the namespace's init exits.)
//! Dropping the state (a clean stop or a panic) kills whatever is left of the group and
//! the cgroup, reaps the leader and removes the cgroup and the directory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::{mpsc, oneshot, watch};
use tokio_util::task::AbortOnDropHandle;

use super::cgroup::Cgroup;
use super::child::PrivateMounts;
use super::chunker::Chunker;
use super::isolation::{Isolation, Separation};
use super::process::{self, Containment, ExitInfo, Pipes, Process, Workdir};
use super::pump::{Output, Pump, Pumped};
use super::record::{self, ExecRecord, Outcome, Status, Usage, log_key};
use crate::config::{ExecConfig, ProgramConfig};
use crate::event_store::EventStoreHandle;

/// The execution actor.
pub struct Execution;

/// What an execution starts with.
pub struct ExecutionArgs {
    /// Its record, `running`, already stored.
    pub record: ExecRecord,
    /// The program's entry.
    pub program: Arc<ProgramConfig>,
    /// Arguments appended to its command.
    pub args: Vec<String>,
    /// Its stdin, if any.
    pub stdin: Option<Vec<u8>>,
    /// Its wall time.
    pub timeout: Duration,
    /// `[exec]`.
    pub settings: Arc<ExecConfig>,
    /// The event store.
    pub store: EventStoreHandle,
    /// The request's end of the output.
    pub output: mpsc::Sender<Output>,
    /// Where the outcome goes.
    pub done: oneshot::Sender<Outcome>,
    /// Chunks stored so far.
    pub progress: watch::Sender<u64>,
    /// How it is contained.
    pub isolation: Isolation,
    /// How it is kept from seeing other executions.
    pub separation: Separation,
}

/// Messages of an execution. Only [`super::ExecHandle`] and the execution's own tasks
/// send them.
#[derive(Debug)]
pub enum ExecutionMsg {
    /// Stop the program, for this reason.
    Stop(Status),
    /// The grace period is over: SIGKILL.
    Escalate,
    /// The leader exited: reap it.
    LeaderExited,
    /// The cgroup is empty (or the wait for it is over).
    Emptied,
    /// The pump stored the last chunk.
    Pumped(Pumped),
    /// The pipes stayed open `kill_grace` after the leader: give up on them.
    DrainOver,
    /// Renew the record.
    Heartbeat,
}

/// What the actor owns.
pub struct ExecutionState {
    record: ExecRecord,
    settings: Arc<ExecConfig>,
    store: EventStoreHandle,
    /// The process group; dropping it kills what is left and reaps the leader.
    process: Process,
    /// The execution's cgroup, if it has one; dropping it kills and removes it.
    cgroup: Option<Cgroup>,
    /// Nothing of it is left running (always, without a cgroup, once the leader exited).
    contained: bool,
    started: Instant,
    stopping: Option<Status>,
    exit: Option<ExitInfo>,
    pumped: Option<Pumped>,
    done: Option<oneshot::Sender<Outcome>>,
    /// Timers and helpers (the exit watcher among them); aborted with the state.
    tasks: Vec<AbortOnDropHandle<()>>,
    /// The pump.
    pump: Option<AbortOnDropHandle<()>>,
    /// Removed last, when the state drops.
    _workdir: Workdir,
}

/// How long the end of an execution waits for its killed cgroup to be empty.
const EMPTY_BOUND: Duration = Duration::from_secs(5);

/// Tells the actor when the leader exits.
fn watch_exit(myself: &ActorRef<ExecutionMsg>, process: &Process) -> AbortOnDropHandle<()> {
    let (myself, exited) = (myself.clone(), process.exited());
    AbortOnDropHandle::new(tokio::spawn(async move {
        exited.await;
        let _ = myself.cast(ExecutionMsg::LeaderExited);
    }))
}

fn after(
    myself: &ActorRef<ExecutionMsg>,
    wait: Duration,
    msg: ExecutionMsg,
) -> AbortOnDropHandle<()> {
    let myself = myself.clone();
    AbortOnDropHandle::new(tokio::spawn(async move {
        tokio::time::sleep(wait).await;
        let _ = myself.cast(msg);
    }))
}

impl Actor for Execution {
    type Msg = ExecutionMsg;
    type State = ExecutionState;
    type Arguments = ExecutionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ExecutionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let program = &args.program;
        let root = program
            .workdir_root
            .clone()
            .unwrap_or_else(std::env::temp_dir);
        let owner = program.uid.map(|uid| (uid, program.gid.unwrap_or(uid)));
        let workdir = Workdir::create(&root, &args.record.id.to_string(), owner)?;
        let mut cgroup = match &args.isolation {
            Isolation::Cgroup(parent) => Some(
                parent
                    .create(
                        &format!("exec-{}", args.record.id),
                        program.processes,
                        program.memory_bytes,
                    )
                    .map_err(|e| format!("cannot make the execution's cgroup: {e}"))?,
            ),
            _ => None,
        };
        let separation = &args.separation;
        let mounts = match separation.mounts {
            true => Some(Arc::new(
                PrivateMounts::plan(
                    workdir.path(),
                    &root,
                    &separation.shared,
                    program.file_bytes,
                    separation.proc,
                )
                .map_err(|e| format!("cannot plan the execution's mounts: {e}"))?,
            )),
            false => None,
        };
        let containment = Containment {
            cgroup: cgroup.as_mut(),
            pid_namespace: matches!(args.isolation, Isolation::PidNamespace) || separation.proc,
            mounts,
        };
        let (process, pipes) = process::spawn(
            program,
            &args.args,
            &workdir,
            args.stdin.is_some(),
            containment,
        )?;
        tracing::info!(execution = %args.record.id, program = %args.record.program, pid = process.pid(), "execution started");
        let Pipes {
            stdout,
            stderr,
            stdin,
        } = pipes;
        let mut tasks = Vec::new();
        if let (Some(pipe), Some(input)) = (stdin, args.stdin) {
            tasks.push(AbortOnDropHandle::new(tokio::spawn(process::feed_stdin(
                pipe,
                input,
                args.timeout,
            ))));
        }
        tasks.push(watch_exit(&myself, &process));
        let pump = Pump {
            id: args.record.id,
            store: args.store.clone(),
            output: Some(args.output),
            progress: args.progress,
            chunker: Chunker::new(
                args.settings.chunk_bytes,
                args.settings.chunk_interval.get(),
            ),
            limit: program.output_bytes,
            head_bytes: args.settings.result_bytes,
        };
        let pump = {
            let myself = myself.clone();
            let limit = myself.clone();
            AbortOnDropHandle::new(tokio::spawn(async move {
                let pumped = pump
                    .run(stdout, stderr, move || {
                        let _ = limit.cast(ExecutionMsg::Stop(Status::OutputLimit));
                    })
                    .await;
                let _ = myself.cast(ExecutionMsg::Pumped(pumped));
            }))
        };
        tasks.push(after(
            &myself,
            args.timeout,
            ExecutionMsg::Stop(Status::Timeout),
        ));
        let heartbeat = args.settings.heartbeat;
        let beat = myself.clone();
        tasks.push(AbortOnDropHandle::new(tokio::spawn(async move {
            let mut every = tokio::time::interval(heartbeat.get());
            every.tick().await;
            loop {
                every.tick().await;
                if beat.cast(ExecutionMsg::Heartbeat).is_err() {
                    return;
                }
            }
        })));
        Ok(ExecutionState {
            record: args.record,
            settings: args.settings,
            store: args.store,
            process,
            contained: cgroup.is_none(),
            cgroup,
            started: Instant::now(),
            stopping: None,
            exit: None,
            pumped: None,
            done: Some(args.done),
            tasks,
            pump: Some(pump),
            _workdir: workdir,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ExecutionMsg::Stop(reason) => {
                if state.stopping.is_none() && state.exit.is_none() {
                    tracing::info!(execution = %state.record.id, reason = reason.as_str(), "stopping an execution");
                    state.stopping = Some(reason);
                    state.process.signal_group(libc::SIGTERM);
                    let grace = state.settings.kill_grace;
                    state
                        .tasks
                        .push(after(&myself, grace, ExecutionMsg::Escalate));
                }
            }
            ExecutionMsg::Escalate => {
                if state.process.signal_group(libc::SIGKILL) {
                    tracing::info!(execution = %state.record.id, "the program outlived SIGTERM: SIGKILL");
                }
                // Also what left the group (setsid); the kernel reaches all of it.
                if let Some(cgroup) = &state.cgroup {
                    cgroup.kill();
                }
            }
            ExecutionMsg::LeaderExited => {
                // Reaped here, between messages, so no signal above can follow it.
                let exit = match state.process.reap() {
                    Ok(Some(exit)) => exit,
                    Ok(None) => {
                        state.tasks.push(watch_exit(&myself, &state.process));
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(execution = %state.record.id, error = %e, "could not reap the program");
                        ExitInfo::default()
                    }
                };
                state.exit = Some(exit);
                // A stopped child is gone with all it started, whichever way it ended.
                if let Some(cgroup) = &state.cgroup {
                    cgroup.kill();
                    let (emptied, myself) = (cgroup.emptied(EMPTY_BOUND), myself.clone());
                    state
                        .tasks
                        .push(AbortOnDropHandle::new(tokio::spawn(async move {
                            if !emptied.await {
                                tracing::warn!(
                                    "an execution's cgroup is not empty after cgroup.kill"
                                );
                            }
                            let _ = myself.cast(ExecutionMsg::Emptied);
                        })));
                }
                let grace = state.settings.kill_grace;
                state
                    .tasks
                    .push(after(&myself, grace, ExecutionMsg::DrainOver));
            }
            ExecutionMsg::Emptied => state.contained = true,
            ExecutionMsg::Pumped(pumped) => state.pumped = Some(pumped),
            ExecutionMsg::DrainOver => {
                if state.pumped.is_none() {
                    tracing::warn!(execution = %state.record.id, "a process outside the group holds the output pipes; output ends here");
                    state.pump = None;
                    state.pumped = Some(Pumped::default());
                }
            }
            ExecutionMsg::Heartbeat => {
                if super::ExecHandle::cancel_asked(&state.store, state.record.id).await {
                    let _ = myself.cast(ExecutionMsg::Stop(Status::Cancelled));
                }
                state.record.heartbeat_ms = record::now_ms();
                let ttl = state.settings.output_ttl;
                if let Err(e) = record::put(&state.store, &state.record, ttl.get()).await {
                    tracing::warn!(execution = %state.record.id, error = %e, "could not renew the execution's record");
                }
            }
        }
        if state.exit.is_some() && state.pumped.is_some() && state.contained {
            finish(state).await;
            myself.stop(None);
        }
        Ok(())
    }
}

/// Stores the outcome (log, then record) and hands it to the request.
async fn finish(state: &mut ExecutionState) {
    let exit = state.exit.unwrap_or_default();
    let pumped = state.pumped.take().unwrap_or_default();
    let status = match (state.stopping, exit.signal) {
        (Some(reason), _) => reason,
        (None, Some(_)) => Status::Killed,
        (None, None) => Status::Exited,
    };
    let outcome = Outcome {
        status,
        exit_code: exit.code,
        signal: exit.signal,
        duration_ms: state.started.elapsed().as_millis() as u64,
        truncated: pumped.truncated,
        stdout_bytes: pumped.bytes[0],
        stderr_bytes: pumped.bytes[1],
        chunks: pumped.chunks,
        usage: Usage {
            user_ms: exit.user_ms,
            system_ms: exit.system_ms,
            max_rss_kb: exit.max_rss_kb,
        },
        message: None,
    };
    tracing::info!(execution = %state.record.id, status = status.as_str(), code = ?exit.code, signal = ?exit.signal, "execution ended");
    let mut last = serde_json::to_value(&outcome).unwrap_or_default();
    if let Some(map) = last.as_object_mut() {
        map.insert("type".into(), "exit".into());
    }
    let key = log_key(state.record.id);
    if let Err(e) = state
        .store
        .append(key, Bytes::from(last.to_string()), true)
        .await
    {
        tracing::warn!(execution = %state.record.id, error = %e, "could not store the execution's outcome in its log");
    }
    state.record.status = status;
    state.record.outcome = Some(outcome.clone());
    if let Err(e) = record::put(&state.store, &state.record, state.settings.output_ttl.get()).await
    {
        tracing::warn!(execution = %state.record.id, error = %e, "could not store the execution's record");
    }
    if let Some(done) = state.done.take() {
        let _ = done.send(outcome);
    }
    state.tasks.clear();
}
