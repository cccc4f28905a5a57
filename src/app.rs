//! `start(Config)`: binds the socket, creates the slots through which everyone reaches
//! the actors, starts the root supervisor (which starts and restarts the children), and
//! hands back an [`App`] to query and stop it.
//!
//! Stop order (one signal fans out from the root, one completion is awaited):
//! 1. the HTTP listener drains: new requests are refused, running ones get up to
//!    `shutdown_timeout` to finish, then every open SSE stream closes with a `retry:`
//!    hint;
//! 2. the root cancellation token is cancelled, and with it every request still running
//!    (after an escalation it is cancelled first, and nothing is waited for);
//! 3. the session manager stops;
//! 4. the event store stops last, since everything above writes to it;
//! 5. the caller (main) flushes telemetry and exits 0.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};
use tokio::sync::oneshot;

use crate::admin::{AdminServer, Probes};
use crate::cluster::{Leases, NewsRelay, Router, Stops, TaskBus};
use crate::config::Config;
use crate::event_store::EventStoreHandle;
use crate::event_store::redis;
use crate::handler::{PromptRegistry, ResourceRegistry, ToolRegistry};
use crate::protocol::methods::ListKind;
use crate::rt::slot::{Slot, SlotError, SlotWriter, slot};
use crate::server::McpServer;
use crate::server::stateless::StatelessSettings;
use crate::server_news::{NewsHub, ServerNews};
use crate::session::{SessionError, SessionHandle, SessionId, SessionInfo};
use crate::supervisor::{Child, Exit, RootSupervisor, SupervisorArgs, SupervisorMsg};
use crate::tasks::{TaskHandle, TaskSettings};
use crate::telemetry::metrics::{ActorName, MAILBOX_DEPTH};

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The supervision tree did not start.
    #[error("the supervision tree did not start: {0}")]
    Tree(String),
    /// The configuration is invalid (checked here too, for embedders that build it in code).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// `[store] backend = "redis"` and Redis could not be reached.
    #[error(transparent)]
    Redis(#[from] redis::ConnectError),
    /// `[auth]` is enabled and its verifier could not be built.
    #[error(transparent)]
    Auth(#[from] crate::auth::verifier::SetupError),
    /// `[exec]` is enabled and the process could not be made non-dumpable.
    #[error("cannot make the server non-dumpable (PR_SET_DUMPABLE): {0}")]
    NonDumpable(std::io::Error),
}

/// A running server.
#[derive(Debug)]
pub struct App {
    addr: SocketAddr,
    path: String,
    root: ActorRef<SupervisorMsg>,
    server: Arc<McpServer>,
    /// SSE is on: there are standalone streams to deliver server notifications on.
    streams: bool,
    shutdown_timeout: Duration,
    exit: Option<oneshot::Receiver<Exit>>,
    sessions: SessionHandle,
    store: EventStoreHandle,
    listener: crate::rt::slot::Slot<crate::transport::listener::ListenerMsg>,
    redis: Option<redis::RedisLink>,
    /// Tells the other replicas of this one's changes (Redis only).
    _relay: Option<NewsRelay>,
    /// The health probes' listener, when `[admin] enabled`.
    admin: Option<AdminServer>,
    /// Set when shutdown begins (readiness turns 503).
    draining: Arc<std::sync::atomic::AtomicBool>,
    /// The executions supervisor, when `[exec] enabled`.
    exec: Option<crate::exec::ExecHandle>,
}

/// Starts the default server (`echo`, `stream_events`).
pub async fn start(config: Config) -> Result<App, StartError> {
    start_with(config, McpServer::default()).await
}

/// Starts a server offering `server`'s tools.
pub async fn start_with(config: Config, server: McpServer) -> Result<App, StartError> {
    launch(config, server, Listen::Http).await
}

/// Serves `server` over stdio (newline-delimited JSON-RPC on stdin and stdout, both
/// protocol eras) with the whole runtime behind it, as a client that starts the server as
/// a subprocess expects. Runs until stdin ends, then gives running requests up to
/// `server.shutdown_timeout` and stops the tree in order. Logs go to stderr (the
/// binary's [`crate::init_telemetry`] writes there); nothing but protocol goes to stdout.
/// `[server] bind` is not used: no socket is opened (the admin listener still is, if
/// enabled).
pub async fn serve_stdio(config: Config, server: McpServer) -> Result<Exit, StartError> {
    serve_stdio_until(config, server, std::future::pending()).await
}

/// [`serve_stdio`], also stopping gracefully when `stop` resolves (a signal, say).
pub async fn serve_stdio_until(
    config: Config,
    server: McpServer,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Exit, StartError> {
    let (input, output) = crate::transport::stdio::standard_streams();
    serve_io(config, server, input, output, stop).await
}

/// [`serve_stdio_until`] on any pair of byte streams: the server reads newline-delimited
/// JSON-RPC from `input` and writes to `output`. A test serves over in-memory pipes
/// (`tokio::io::duplex`) this way; [`crate::client::Client::stdio`] does it for you.
pub async fn serve_io(
    config: Config,
    server: McpServer,
    input: impl tokio::io::AsyncRead + Unpin + Send + 'static,
    output: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    stop: impl std::future::Future<Output = ()>,
) -> Result<Exit, StartError> {
    let settings = Arc::new(config.clone());
    let mut app = launch(config, server, Listen::Stdio).await?;
    let parts = crate::transport::stdio::StdioParts {
        server: app.server.clone(),
        config: settings,
        sessions: app.sessions.clone(),
    };
    let served = crate::transport::stdio::serve(parts, input, output, stop);
    let escalated = tokio::select! {
        () = served => None,
        exit = app.wait() => Some(exit),
    };
    match escalated {
        // The tree stopped itself.
        Some(exit) => Ok(exit),
        None => {
            app.shutdown().await;
            Ok(Exit::Shutdown)
        }
    }
}

/// Whether the tree gets an HTTP listener.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Listen {
    /// Bind `server.bind` and serve Streamable HTTP there.
    Http,
    /// No socket: the caller serves the tree's server over stdio.
    Stdio,
}

/// Starts the tree, with an HTTP listener or without one.
pub(crate) async fn launch(
    config: Config,
    server: McpServer,
    listen: Listen,
) -> Result<App, StartError> {
    config.validate()?;
    let addr = config.server.bind;
    let socket = match listen {
        Listen::Http => Some(
            std::net::TcpListener::bind(addr)
                .map_err(|source| StartError::Bind { addr, source })?,
        ),
        Listen::Stdio => None,
    };
    let addr = match &socket {
        Some(socket) => socket
            .local_addr()
            .map_err(|source| StartError::Bind { addr, source })?,
        None => addr,
    };
    let admin_socket = match config.admin.enabled {
        true => {
            let at = config.admin.bind;
            if !at.ip().is_loopback() {
                tracing::warn!(%at, "the admin listener binds off loopback (admin.allow_remote): anyone who reaches it can read metrics and the dashboard");
            }
            let socket = std::net::TcpListener::bind(at)
                .map_err(|source| StartError::Bind { addr: at, source })?;
            Some(socket)
        }
        false => None,
    };
    let config = Arc::new(config);
    let store_slots: Vec<_> = (0..config.store.shard_count())
        .map(|_| {
            counted(slot("event store"), || {
                MAILBOX_DEPTH.get(ActorName::EventStore).inc();
            })
        })
        .collect();
    let session_slot = counted(slot("session manager"), || {
        MAILBOX_DEPTH.get(ActorName::SessionManager).inc();
    });
    let listener_slot = counted(slot("http listener"), || {
        MAILBOX_DEPTH.get(ActorName::HttpListener).inc();
    });
    let store = EventStoreHandle::new(store_slots.iter().map(|(_, slot)| slot.clone()));
    let sessions = SessionHandle::new(session_slot.1.clone(), store.clone());
    let news = NewsHub::new(config.stateless.listen_backlog.get());
    let tasks = TaskHandle::new(
        store.clone(),
        news.clone(),
        TaskSettings::from(&config.tasks),
    );
    // Other replicas' planned stops, heard by the router, wake the lease keeper.
    let stops = Stops::default();
    let redis = match config.store.backend {
        crate::config::BackendKind::Memory => None,
        crate::config::BackendKind::Redis => {
            let (store, sessions) = (store.clone(), sessions.clone());
            let (news, tasks) = (news.clone(), tasks.clone());
            let stops = stops.clone();
            let link = redis::connect(&config.store, move |replica, keys| {
                let router = Router {
                    replica,
                    keys,
                    store,
                    sessions,
                    news,
                    tasks,
                    stops,
                };
                move |push| router.route(push)
            })
            .await?;
            Some(link)
        }
    };
    let relay = redis.as_ref().map(|link| {
        let leases = Leases::new(link.clone(), config.store.lease_ttl.get());
        tasks.join_cluster(
            link.replica,
            Arc::new(leases),
            Arc::new(TaskBus::new(link.clone())),
            link.format.clone(),
        );
        NewsRelay::start(&news, link.clone())
    });
    let listener = listener_slot.1.clone();
    let (exit_tx, exit_rx) = oneshot::channel();
    if config.store.backend == crate::config::BackendKind::Redis
        && config.stateless.request_state_key.is_empty()
    {
        tracing::warn!(
            "stateless.request_state_key is not set: a multi round-trip retry that reaches another replica will be refused"
        );
    }
    let exec = match config.exec.enabled {
        true => {
            // A program running as the server's user could read its environment (the
            // introspection secret, the Redis URL) and memory under /proc/<pid>.
            crate::exec::process::set_non_dumpable().map_err(StartError::NonDumpable)?;
            let exec = crate::exec::ExecHandle::start(Arc::new(config.exec.clone()), store.clone())
                .await
                .map_err(|e| StartError::Tree(e.to_string()))?;
            server.update_tools(|tools| crate::exec::tools::register(tools, &exec));
            tracing::info!(
                programs = config.exec.programs.len(),
                "execution tools offered"
            );
            Some(exec)
        }
        false => None,
    };
    let server = Arc::new(
        server
            .with_stateless_settings(StatelessSettings::from_config(&config.stateless))
            .with_stream_limits(crate::server::StreamLimits::from_config(&config))
            .with_news(news)
            .with_tasks(tasks.clone()),
    );
    server.serve_reruns();
    let gate = match config.auth.enabled {
        true => {
            let verifier = crate::auth::Verifier::new(&config.auth)?;
            tracing::info!(issuer = %config.auth.issuer, audience = %config.auth.audience, "bearer tokens required on every MCP request");
            Some(Arc::new(crate::auth::Gate::new(Arc::new(verifier))))
        }
        false => None,
    };
    let args = SupervisorArgs {
        config: config.clone(),
        socket,
        server: server.clone(),
        gate,
        store_slots,
        session_slot,
        listener_slot,
        redis: redis.clone(),
        stops,
        exit: exit_tx,
    };
    let (root, _) = Actor::spawn(None, RootSupervisor, args)
        .await
        .map_err(|e| StartError::Tree(e.to_string()))?;
    let draining = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let admin = match admin_socket {
        Some(socket) => {
            let probes = Probes::new(
                root.clone(),
                listener.clone(),
                store.clone(),
                redis.clone(),
                draining.clone(),
                sessions.clone(),
                config.clone(),
            );
            let at = config.admin.bind;
            Some(
                AdminServer::start(socket, probes)
                    .map_err(|source| StartError::Bind { addr: at, source })?,
            )
        }
        None => None,
    };
    match listen {
        Listen::Http => tracing::info!(%addr, path = %config.sse.path, "otpmcp started"),
        Listen::Stdio => tracing::info!("otpmcp started on stdio"),
    }
    Ok(App {
        addr,
        path: config.sse.path.clone(),
        root,
        server,
        streams: config.sse.enabled,
        shutdown_timeout: config.server.shutdown_timeout,
        exit: Some(exit_rx),
        sessions,
        store,
        listener,
        redis,
        _relay: relay,
        admin,
        draining,
        exec,
    })
}

impl App {
    /// The bound address (useful with port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Events delivered live but not stored because Redis was unavailable (0 with the
    /// in-memory store): those cannot be replayed.
    pub fn unstored_events(&self) -> u64 {
        self.redis
            .as_ref()
            .map_or(0, |r| r.unstored.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// This replica's number among those sharing the Redis (0 with the in-memory store).
    pub fn replica(&self) -> u64 {
        self.redis.as_ref().map_or(0, |r| r.replica)
    }

    /// Where the admin listener (`/healthz`, `/readyz`) listens, when `[admin] enabled`.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(AdminServer::local_addr)
    }

    /// The MCP endpoint URL.
    pub fn url(&self) -> String {
        format!("http://{}{}", self.addr, self.path)
    }

    /// The erlmcp `session_info`: protocol version, connection time, last event per stream.
    pub async fn session_info(&self, id: SessionId) -> Result<SessionInfo, SessionError> {
        self.sessions.info(id).await
    }

    /// The session manager's handle: create, inspect and end sessions from Rust (tests).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn sessions(&self) -> &SessionHandle {
        &self.sessions
    }

    /// Changes the tools while the server runs, then tells every session
    /// (`notifications/tools/list_changed` on its standalone stream, stored and resumable).
    /// Returns how many sessions were told.
    pub async fn update_tools(
        &self,
        change: impl FnOnce(&mut ToolRegistry),
    ) -> Result<usize, SessionError> {
        self.server.update_tools(change);
        self.tell_list_changed(ListKind::Tools).await
    }

    /// Changes the resources while the server runs, then tells every session
    /// (`notifications/resources/list_changed`).
    pub async fn update_resources(
        &self,
        change: impl FnOnce(&mut ResourceRegistry),
    ) -> Result<usize, SessionError> {
        self.server.update_resources(change);
        self.tell_list_changed(ListKind::Resources).await
    }

    /// Changes the prompts while the server runs, then tells every session
    /// (`notifications/prompts/list_changed`).
    pub async fn update_prompts(
        &self,
        change: impl FnOnce(&mut PromptRegistry),
    ) -> Result<usize, SessionError> {
        self.server.update_prompts(change);
        self.tell_list_changed(ListKind::Prompts).await
    }

    /// Without SSE there is no stream to carry the notification: nothing is stored.
    async fn tell_list_changed(&self, kind: ListKind) -> Result<usize, SessionError> {
        if !self.streams {
            return Ok(0);
        }
        self.sessions.list_changed(kind).await
    }

    /// Tells every session subscribed to resource `uri` that it changed
    /// (`notifications/resources/updated` on each one's standalone GET stream, stored and
    /// resumable). Returns how many sessions were told.
    pub async fn notify_resource_updated(&self, uri: &str) -> Result<usize, SessionError> {
        self.server
            .news()
            .publish(ServerNews::ResourceUpdated { uri: uri.into() });
        if !self.streams {
            return Ok(0);
        }
        self.sessions.notify_resource_updated(uri).await
    }

    /// Resolves when the tree ends on its own (restart intensity exceeded).
    pub async fn wait(&mut self) -> Exit {
        match self.exit.take() {
            Some(rx) => rx.await.unwrap_or(Exit::Shutdown),
            None => std::future::pending().await,
        }
    }

    /// Stops the tree in order (see the module docs) and waits for it.
    pub async fn shutdown(self) {
        self.draining
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Executions first, while the store can still keep their outcomes: their
        // requests then answer and the listener's drain has nothing long to wait for.
        if let Some(exec) = &self.exec {
            exec.shutdown().await;
        }
        // The listener's graceful wait plus time for each child to stop.
        let wait = self.shutdown_timeout + Duration::from_secs(30);
        let _ = self.root.call(SupervisorMsg::Shutdown, Some(wait)).await;
        let _ = self
            .root
            .get_cell()
            .wait(Some(Duration::from_secs(5)))
            .await;
    }

    /// Fault injection for supervision tests: makes `child` panic.
    #[doc(hidden)]
    pub fn inject_panic(&self, child: Child) -> Result<(), SlotError> {
        match child {
            Child::EventStore(shard) => self.store.inject_panic(shard),
            Child::SessionManager => self.sessions.inject_panic(),
            Child::HttpListener => self
                .listener
                .cast(crate::transport::listener::ListenerMsg::InjectPanic),
        }
    }

    /// The event-store shard that owns `session` (tests crash the right one).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn store_shard_of(&self, session: SessionId) -> usize {
        self.store.shard_of(session)
    }

    /// The event store's handle (tests read each shard's occupancy).
    #[cfg(any(test, feature = "testing"))]
    #[doc(hidden)]
    pub fn store(&self) -> &EventStoreHandle {
        &self.store
    }

    /// The id of the current incarnation of `child`, to observe restarts.
    #[doc(hidden)]
    pub fn child_id(&self, child: Child) -> Option<ractor::ActorId> {
        match child {
            Child::EventStore(shard) => self.store.current_id(shard),
            Child::SessionManager => self.sessions.current_id(),
            Child::HttpListener => self.listener.current().map(|a| a.get_id()),
        }
    }
}

/// A slot whose messages count into their actor's mailbox depth.
fn counted<M: ractor::Message>(
    (writer, slot): (SlotWriter<M>, Slot<M>),
    on_send: fn(),
) -> (SlotWriter<M>, Slot<M>) {
    (writer, slot.counting(on_send))
}
