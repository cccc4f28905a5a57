//! The root supervisor: starts the event store's shards, the session manager and the HTTP
//! listener (in that order: each depends only on those before it; with Redis, the lease
//! keeper starts before the listener), restarts a child that fails (one_for_one: one shard
//! alone, with its own tables) within the OTP restart intensity, and escalates past it.
//!
//! We write this small supervisor instead of using `ractor-supervisor` because restarts
//! here must do two things a generic supervisor does not: hand the child's lent data back
//! to the next incarnation ([`crate::rt::heir`]) and publish the new `ActorRef` to the
//! handles ([`crate::rt::slot`]). See docs/architecture.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::cluster::{Heirs, LeaseKeeper, Leases, Stops};
use crate::config::Config;
use crate::event_store::redis::RedisLink;
use crate::event_store::{EventStoreHandle, Retention, ShardConfig, Shards, StoreMsg};
use crate::rt::heir::{Heir, lend};
use crate::rt::intensity::Intensity;
use crate::rt::slot::{Slot, SlotWriter};
use crate::server::McpServer;
use crate::session::{SessionArgs, SessionHandle, SessionManager, SessionMsg, SessionTable};
use crate::telemetry::metrics::{self, Label as _};
use crate::transport::listener::ListenerMsg;
use crate::transport::{Handovers, HttpListener, ListenerArgs};

pub mod tree;

pub use tree::Tree;

/// How long a restart waits for a crashed child's data to come back.
const RECLAIM_WAIT: Duration = Duration::from_secs(1);
/// How long each child gets to stop during shutdown.
const CHILD_STOP_WAIT: Duration = Duration::from_secs(5);

/// The supervised children.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Child {
    /// The event store actor of one shard.
    EventStore(usize),
    /// The session manager actor.
    SessionManager,
    /// The HTTP listener actor.
    HttpListener,
}

impl Child {
    fn metric(self) -> metrics::ActorName {
        match self {
            Self::EventStore(_) => metrics::ActorName::EventStore,
            Self::SessionManager => metrics::ActorName::SessionManager,
            Self::HttpListener => metrics::ActorName::HttpListener,
        }
    }

    /// The name with the shard, for logs and escalations: `event_store 2`.
    fn label(self) -> String {
        match self {
            Self::EventStore(shard) => format!("event_store {shard}"),
            _ => self.name().to_owned(),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::EventStore(_) => "event_store",
            Self::SessionManager => "session_manager",
            Self::HttpListener => "http_listener",
        }
    }
}

/// How the tree ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// Stopped on request.
    Shutdown,
    /// A child failed more often than the restart intensity allows.
    Escalated(String),
}

/// Messages of the root supervisor.
#[derive(Debug)]
pub enum SupervisorMsg {
    /// Stop the tree in order: listener (closing streams), sessions, store.
    Shutdown(RpcReplyPort<()>),
    /// The tree as it stands now.
    Tree(RpcReplyPort<Tree>),
}

/// Everything the root needs to (re)start its children.
#[derive(Debug)]
pub struct SupervisorArgs {
    /// Configuration.
    pub config: Arc<Config>,
    /// The bound socket; each listener incarnation gets a clone. `None` when the server
    /// is served over stdio ([`crate::serve_stdio`]): the tree then has no listener.
    pub socket: Option<std::net::TcpListener>,
    /// The MCP server.
    pub server: Arc<McpServer>,
    /// `[auth]`'s token checks, shared by every listener incarnation.
    pub gate: Option<Arc<crate::auth::Gate>>,
    /// Publication of each store shard's current actor, in shard order.
    pub store_slots: Vec<(SlotWriter<StoreMsg>, Slot<StoreMsg>)>,
    /// Publication of the current session manager.
    pub session_slot: (SlotWriter<SessionMsg>, Slot<SessionMsg>),
    /// Publication of the current listener.
    pub listener_slot: (SlotWriter<ListenerMsg>, Slot<ListenerMsg>),
    /// The shared Redis, when `[store] backend = "redis"`.
    pub redis: Option<RedisLink>,
    /// Other replicas' planned stops, for the lease keeper.
    pub stops: Stops,
    /// Told how the tree ended.
    pub exit: oneshot::Sender<Exit>,
}

/// Running state of the root supervisor.
#[derive(Debug)]
pub struct SupervisorState {
    config: Arc<Config>,
    socket: Option<std::net::TcpListener>,
    server: Arc<McpServer>,
    gate: Option<Arc<crate::auth::Gate>>,
    store_writers: Vec<SlotWriter<StoreMsg>>,
    store: EventStoreHandle,
    /// Each shard's tables, of the backend `[store] backend` chose; outlive restarts.
    store_shards: Shards,
    session_writer: SlotWriter<SessionMsg>,
    session_slot: Slot<SessionMsg>,
    listener_writer: SlotWriter<ListenerMsg>,
    listener_slot: Slot<ListenerMsg>,
    redis: Option<RedisLink>,
    /// Renews this replica's lease and answers lapsed replicas' requests (Redis only);
    /// started before the listener, dropped (stopped) when the tree stops.
    keeper: Option<LeaseKeeper>,
    stops: Stops,
    session_heir: Option<Heir<SessionTable>>,
    running: Vec<(Child, ActorCell)>,
    /// When each running child's current incarnation started.
    since: Vec<(Child, Instant)>,
    /// Restarts of each child, by [`metrics::ActorName`] index (the store's shards
    /// together).
    restarts: [u32; 3],
    /// Restarts of each store shard.
    shard_restarts: Vec<u32>,
    started: Instant,
    /// Cancelled when the tree stops: every session's running requests end.
    cancel: tokio_util::sync::CancellationToken,
    intensity: Intensity,
    stopping: bool,
    exit: Option<oneshot::Sender<Exit>>,
}

/// The root supervisor actor.
#[derive(Debug, Default)]
pub struct RootSupervisor;

impl SupervisorState {
    fn store_handle(&self) -> EventStoreHandle {
        self.store.clone()
    }

    fn leases(&self) -> Option<Leases> {
        let link = self.redis.clone()?;
        Some(Leases::new(link, self.config.store.lease_ttl.get()))
    }

    fn session_handle(&self) -> SessionHandle {
        SessionHandle::new(self.session_slot.clone(), self.store_handle())
    }

    async fn start(
        &mut self,
        child: Child,
        supervisor: ActorCell,
        sessions: Option<SessionTable>,
    ) -> Result<(), ActorProcessingErr> {
        let sse = &self.config.sse;
        let cell = match child {
            Child::EventStore(shard) => {
                let config = ShardConfig {
                    retention: Retention {
                        enabled: sse.enable_replay,
                        event_ttl: sse.event_ttl.get(),
                        replay_window: sse.replay_window.get(),
                        max_session_events: sse.max_session_events.get(),
                        max_session_bytes: sse.max_session_bytes,
                        max_tasks: self.config.tasks.max_tasks.get(),
                        max_total_events: sse.max_total_events.get(),
                        max_total_bytes: sse.max_total_bytes.get(),
                        principal_events: usize::MAX,
                        principal_bytes: usize::MAX,
                    }
                    .with_principal_share(self.config.tasks.principal_event_percent.get()),
                    cleanup_interval: sse.cleanup_interval.get(),
                    retry_interval: self.config.store.retry_interval.get(),
                    shards: self.store_handle(),
                };
                let actor = self.store_shards.start(shard, config, supervisor).await?;
                if let Some(writer) = self.store_writers.get(shard) {
                    writer.publish(Some(actor.clone()));
                }
                actor.get_cell()
            }
            Child::SessionManager => {
                let (table, heir) = lend(sessions.unwrap_or_default());
                self.session_heir = Some(heir);
                let timeout = self.config.server.session_timeout.get();
                let args = SessionArgs {
                    table,
                    store: self.store_handle(),
                    session_timeout: timeout,
                    max_sessions: self.config.server.max_sessions.get(),
                    max_open_per_session: self.config.server.max_open_per_session.get(),
                    max_sessions_per_client: self.config.server.max_sessions_per_client,
                    max_sessions_per_principal: self.config.auth.max_sessions_per_principal as u32,
                    root_cancel: self.cancel.clone(),
                    // Expiry is late by at most timeout / 4, or the store's sweep if shorter.
                    sweep_interval: (timeout / 4)
                        .min(sse.cleanup_interval.get())
                        .max(Duration::from_millis(1)),
                    directory: match &self.redis {
                        Some(link) => crate::session::Directory::Redis(link.clone()),
                        None => crate::session::Directory::Local,
                    },
                };
                let (actor, _) =
                    Actor::spawn_linked(None, SessionManager, args, supervisor).await?;
                self.session_writer.publish(Some(actor.clone()));
                actor.get_cell()
            }
            Child::HttpListener => {
                let Some(socket) = &self.socket else {
                    return Err("no socket: this tree serves stdio".into());
                };
                let args = ListenerArgs {
                    socket: socket.try_clone()?,
                    config: self.config.clone(),
                    sessions: self.session_handle(),
                    store: self.store_handle(),
                    server: self.server.clone(),
                    gate: self.gate.clone(),
                    me: self.listener_slot.clone(),
                    inflight: self
                        .leases()
                        .map(|l| Arc::new(l) as Arc<dyn crate::transport::InFlight>),
                };
                let (actor, _) = Actor::spawn_linked(None, HttpListener, args, supervisor).await?;
                self.listener_writer.publish(Some(actor.clone()));
                actor.get_cell()
            }
        };
        self.running.retain(|(c, _)| *c != child);
        self.running.push((child, cell));
        self.since.retain(|(c, _)| *c != child);
        self.since.push((child, Instant::now()));
        Ok(())
    }

    fn unpublish(&self, child: Child) {
        match child {
            Child::EventStore(shard) => {
                if let Some(writer) = self.store_writers.get(shard) {
                    writer.publish(None);
                }
            }
            Child::SessionManager => self.session_writer.publish(None),
            Child::HttpListener => self.listener_writer.publish(None),
        }
    }

    /// Restarts `child` with its data, or reports that the intensity is exceeded.
    async fn restart(&mut self, child: Child, supervisor: ActorCell) -> Result<(), String> {
        if !self.intensity.record(Instant::now()) {
            let s = &self.config.supervisor;
            return Err(format!(
                "{} failed more than {} times within {:?}",
                child.label(),
                s.max_restarts,
                s.max_window
            ));
        }
        let mut sessions = None;
        match child {
            Child::EventStore(shard) => {
                if !self.store_shards.reclaim(shard, RECLAIM_WAIT).await {
                    tracing::error!(
                        shard,
                        "event store shard's data was not returned; starting empty"
                    );
                }
            }
            Child::SessionManager => {
                if let Some(heir) = self.session_heir.take() {
                    sessions = heir.reclaim(RECLAIM_WAIT).await;
                    if sessions.is_none() {
                        tracing::error!("session table was not returned; starting empty");
                    }
                }
            }
            Child::HttpListener => {}
        }
        self.start(child, supervisor, sessions)
            .await
            .map_err(|e| format!("{} could not restart: {e}", child.label()))
    }

    async fn stop_children(&mut self, drain: bool) {
        // Reverse start order: the listener first (it drains: no new work, running
        // requests finish, then streams close with a retry hint), then sessions, then the
        // store everything else wrote to. What still runs is cancelled once the streams are
        // closed, so nothing keeps writing while the tree stops. An escalation does not
        // wait for requests: the tree is failing.
        if !drain {
            self.cancel.cancel();
        }
        if let Some(listener) = self.listener_slot.current() {
            let _ = self
                .listener_slot
                .call(
                    ListenerMsg::Shutdown,
                    self.config.server.shutdown_timeout + CHILD_STOP_WAIT,
                )
                .await;
            let _ = listener.get_cell().wait(Some(CHILD_STOP_WAIT)).await;
        }
        self.cancel.cancel();
        let shards = (0..self.store_writers.len()).map(Child::EventStore);
        for child in [Child::HttpListener, Child::SessionManager]
            .into_iter()
            .chain(shards)
        {
            if let Some((_, cell)) = self.running.iter().find(|(c, _)| *c == child) {
                let _ = cell
                    .stop_and_wait(Some("shutdown".into()), Some(CHILD_STOP_WAIT))
                    .await;
            }
            self.unpublish(child);
        }
        self.running.clear();
        // Nothing of ours should run any more: let the lease lapse now, so another replica
        // at once answers any request of ours whose end did not reach Redis.
        self.keeper = None;
        if let Some(leases) = self.leases() {
            leases.release().await;
        }
    }
}

impl Actor for RootSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let s = &args.config.supervisor;
        let shards = args.store_slots.len();
        let (store_writers, store_slots): (Vec<_>, Vec<_>) = args.store_slots.into_iter().unzip();
        let store_shards = Shards::new(
            args.redis.clone(),
            args.config.server.session_timeout.get(),
            args.config.sse.max_connections_per_stream.get(),
            shards,
        );
        let mut state = SupervisorState {
            intensity: Intensity::new(s.max_restarts, s.max_window.get()),
            since: Vec::new(),
            restarts: [0; 3],
            shard_restarts: vec![0; shards],
            started: Instant::now(),
            config: args.config,
            socket: args.socket,
            server: args.server,
            gate: args.gate,
            store_writers,
            store: EventStoreHandle::new(store_slots),
            store_shards,
            session_writer: args.session_slot.0,
            session_slot: args.session_slot.1,
            listener_writer: args.listener_slot.0,
            listener_slot: args.listener_slot.1,
            session_heir: None,
            redis: args.redis,
            keeper: None,
            stops: args.stops,
            running: Vec::new(),
            cancel: tokio_util::sync::CancellationToken::new(),
            stopping: false,
            exit: Some(args.exit),
        };
        let shards = (0..shards).map(Child::EventStore);
        for child in shards.chain([Child::SessionManager]) {
            state.start(child, myself.get_cell(), None).await?;
        }
        // Hold the lease before this replica takes any request.
        if let Some(leases) = state.leases() {
            let heirs = Heirs {
                store: state.store_handle(),
                tasks: state.server.tasks().cloned(),
                calls: Handovers::new(state.listener_slot.clone()),
                stops: state.stops.clone(),
            };
            state.keeper = Some(LeaseKeeper::start(leases, heirs).await);
        }
        if state.socket.is_some() {
            state
                .start(Child::HttpListener, myself.get_cell(), None)
                .await?;
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Tree(reply) => {
                let _ = reply.send(state.tree());
            }
            SupervisorMsg::Shutdown(reply) => {
                state.stopping = true;
                state
                    .stop_children(true)
                    .instrument(tracing::info_span!("supervisor.shutdown"))
                    .await;
                if let Some(exit) = state.exit.take() {
                    let _ = exit.send(Exit::Shutdown);
                }
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        event: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, why) = match &event {
            SupervisionEvent::ActorFailed(cell, err) => (cell.clone(), format!("failed: {err}")),
            SupervisionEvent::ActorTerminated(cell, _, reason) => (
                cell.clone(),
                format!("stopped: {}", reason.as_deref().unwrap_or("no reason")),
            ),
            _ => return Ok(()),
        };
        // The event may hold the child's final state, and with it the lent data: drop it
        // before waiting for that data to come back.
        drop(event);
        let Some(child) = state
            .running
            .iter()
            .find(|(_, c)| c.get_id() == cell.get_id())
            .map(|(child, _)| *child)
        else {
            return Ok(());
        };
        if state.stopping {
            return Ok(());
        }
        state.unpublish(child);
        tracing::error!(child = %child.label(), reason = %why, "supervised actor exited; restarting");
        // Whatever its mailbox held died with it.
        metrics::MAILBOX_DEPTH.get(child.metric()).set(0);
        let restarted = state.restart(child, myself.get_cell()).await;
        if restarted.is_ok() {
            metrics::ACTOR_RESTARTS.inc(child.metric());
            if let Some(n) = state.restarts.get_mut(child.metric().index()) {
                *n += 1;
            }
            if let Child::EventStore(shard) = child
                && let Some(n) = state.shard_restarts.get_mut(shard)
            {
                *n += 1;
            }
        }
        if let Err(escalation) = restarted {
            metrics::ESCALATIONS.inc();
            tracing::error!(reason = %escalation, "restart intensity exceeded; supervisor gives up");
            state.stopping = true;
            state
                .stop_children(false)
                .instrument(tracing::info_span!("supervisor.escalate", reason = %escalation))
                .await;
            if let Some(exit) = state.exit.take() {
                let _ = exit.send(Exit::Escalated(escalation.clone()));
            }
            myself.stop(Some(format!("escalated: {escalation}")));
        }
        Ok(())
    }
}
