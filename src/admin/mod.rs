//! The admin listener: what an orchestrator asks of a running server, on a socket of its
//! own (`[admin]`, off by default, loopback by default), apart from the MCP endpoint so
//! that it is never exposed with it.
//!
//! - `GET /healthz`: liveness. 200 while the root supervisor runs; 503 once it stopped
//!   (restart intensity exceeded, or shut down): restart the process.
//! - `GET /readyz`: readiness. 200 when the server can take requests: not draining, the
//!   HTTP listener up, the event store answering, and Redis reachable when configured.
//!   Otherwise 503 with a JSON reason: send traffic elsewhere for now.
//! - `GET /metrics`: Prometheus text ([`metrics`]).
//! - `GET /dashboard`: a live view of the tree, sessions, store and rates ([`dashboard`]).
//! - `POST /fault/panic/{child}`: makes `event_store` (its shard 0), `event_store.N`
//!   (shard N), `session_manager` or `http_listener` panic, so that a soak or a drill sees the supervisor restart it. Only
//!   with `admin.fault_injection = true` (off by default); 404 otherwise. It needs the
//!   header `X-Otpmcp-Fault: 1`, which no browser sends without a CORS preflight (that
//!   this listener never answers), so a web page cannot send it.
//!
//! Every route checks `Host` and `Origin` against `admin.allowed_hosts` and
//! `admin.allowed_origins` (loopback by default), as the MCP endpoint does: a page the
//! operator opens cannot reach the listener through DNS rebinding or read it cross-origin.

mod dashboard;
mod metrics;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::Path;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ractor::{ActorCell, ActorRef, ActorStatus};
use serde_json::json;
use tokio_util::task::AbortOnDropHandle;

use crate::config::Config;
use crate::event_store::EventStoreHandle;
use crate::event_store::redis::RedisLink;
use crate::net::guard::Guard;
use crate::rt::slot::Slot;
use crate::session::SessionHandle;
use crate::supervisor::SupervisorMsg;
use crate::transport::listener::ListenerMsg;
use crate::transport::rejection::Rejection;

/// The header `POST /fault/panic/{child}` needs (its value `1`): a request with a custom
/// header is not a CORS simple request.
pub const FAULT_HEADER: &str = "x-otpmcp-fault";

/// Longest a readiness probe waits for the store or Redis to answer.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// What the probes look at.
#[derive(Clone, Debug)]
pub struct Probes {
    /// The root supervisor.
    pub root: ActorCell,
    /// The current HTTP listener.
    pub listener: Slot<ListenerMsg>,
    /// The event store.
    pub store: EventStoreHandle,
    /// Redis, when the store lives there.
    pub redis: Option<RedisLink>,
    /// Set when shutdown begins.
    pub draining: Arc<AtomicBool>,
    /// The session manager.
    pub sessions: SessionHandle,
    /// The configuration (limits shown beside the figures).
    pub config: Arc<Config>,
    /// The dashboard's recorder, once started.
    recorder: Option<dashboard::Recorder>,
}

impl Probes {
    /// What the admin listener looks at.
    pub fn new(
        root: ActorRef<SupervisorMsg>,
        listener: Slot<ListenerMsg>,
        store: EventStoreHandle,
        redis: Option<RedisLink>,
        draining: Arc<AtomicBool>,
        sessions: SessionHandle,
        config: Arc<Config>,
    ) -> Self {
        let probes = Self {
            root: root.get_cell(),
            listener,
            store,
            redis,
            draining,
            sessions,
            config,
            recorder: None,
        };
        let recorder = dashboard::Recorder::start(probes.clone(), root);
        Self {
            recorder: Some(recorder),
            ..probes
        }
    }
}

/// The running admin listener; stops when dropped.
#[derive(Debug)]
pub struct AdminServer {
    addr: SocketAddr,
    _task: AbortOnDropHandle<()>,
}

impl AdminServer {
    /// Serves the probes on `socket` (bound by the caller, so a bad address fails start-up).
    pub fn start(socket: std::net::TcpListener, probes: Probes) -> std::io::Result<Self> {
        socket.set_nonblocking(true)?;
        let addr = socket.local_addr()?;
        let listener = tokio::net::TcpListener::from_std(socket)?;
        let mut router = Router::new();
        if probes.config.admin.fault_injection {
            router = router.route("/fault/panic/{child}", post(inject_panic));
        }
        let router = router
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .route("/metrics", get(metrics::metrics))
            .route("/dashboard", get(dashboard::page))
            .route("/dashboard/events", get(dashboard::events));
        let admin = &probes.config.admin;
        let guard = Guard::from_lists(true, &admin.allowed_hosts, &admin.allowed_origins);
        let router = router
            .layer(middleware::from_fn_with_state(guard, guarded))
            .with_state(probes);
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, router).await {
                tracing::error!(error = %e, "the admin listener stopped");
            }
        }));
        tracing::info!(%addr, "admin listener (healthz, readyz, metrics, dashboard)");
        Ok(Self { addr, _task: task })
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn json(status: StatusCode, body: serde_json::Value) -> Response {
    let mut response = (status, body.to_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn healthz(State(probes): State<Probes>) -> Response {
    match probes.root.get_status() {
        ActorStatus::Running => json(StatusCode::OK, json!({"status": "alive"})),
        status => json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"status": "stopped", "reason": format!("the root supervisor is {status:?}")}),
        ),
    }
}

async fn readyz(State(probes): State<Probes>) -> Response {
    match unready(&probes).await {
        None => json(StatusCode::OK, json!({"ready": true})),
        Some(reason) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"ready": false, "reason": reason}),
        ),
    }
}

/// Refuses a request whose `Host` or `Origin` is not allowed, on every route.
async fn guarded(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    match guard.check(request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refused) => Rejection::from(refused).into_response(),
    }
}

/// Makes a child of the root supervisor panic (`admin.fault_injection`).
async fn inject_panic(
    State(probes): State<Probes>,
    Path(child): Path<String>,
    headers: HeaderMap,
) -> Response {
    if headers
        .get(FAULT_HEADER)
        .is_none_or(|v| v.as_bytes() != b"1")
    {
        return json(
            StatusCode::FORBIDDEN,
            json!({"error": format!("send the header `{FAULT_HEADER}: 1` (a browser cannot)")}),
        );
    }
    let shard = child
        .strip_prefix("event_store.")
        .and_then(|n| n.parse::<usize>().ok())
        .filter(|n| *n < probes.store.shards());
    let sent = match (child.as_str(), shard) {
        (_, Some(shard)) => probes.store.inject_panic(shard),
        ("event_store", _) => probes.store.inject_panic(0),
        ("session_manager", _) => probes.sessions.inject_panic(),
        ("http_listener", _) => probes.listener.cast(ListenerMsg::InjectPanic),
        _ => {
            return json(
                StatusCode::NOT_FOUND,
                json!({"error": "no such child: event_store (shard 0), event_store.N (shard N), session_manager or http_listener"}),
            );
        }
    };
    match sent {
        Ok(()) => {
            tracing::warn!(child, "fault injection: a panic was sent");
            json(StatusCode::ACCEPTED, json!({"panic": child}))
        }
        Err(e) => json(
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"error": e.to_string()}),
        ),
    }
}

/// Why the server cannot take requests now, if it cannot.
async fn unready(probes: &Probes) -> Option<&'static str> {
    if probes.draining.load(Ordering::SeqCst) {
        return Some("draining: the server is shutting down");
    }
    if probes.root.get_status() != ActorStatus::Running {
        return Some("the supervision tree has stopped");
    }
    if probes.listener.current().is_none() {
        return Some("the HTTP listener is restarting");
    }
    if !matches!(
        tokio::time::timeout(PROBE_TIMEOUT, probes.store.ping()).await,
        Ok(Ok(()))
    ) {
        return Some("the event store does not answer");
    }
    if let Some(link) = &probes.redis {
        let mut conn = link.commands();
        let cmd = redis::cmd("PING");
        let ping = cmd.query_async::<String>(&mut conn);
        let answered = tokio::time::timeout(PROBE_TIMEOUT, ping).await;
        if !link.breaker.allows() || !matches!(answered, Ok(Ok(_))) {
            return Some("redis is unreachable");
        }
    }
    None
}
