//! Streamable HTTP transport (MCP 2025-11-25, also serving 2025-06-18 and 2025-03-26
//! clients): one endpoint, one verb per file. This layer knows HTTP; it reaches sessions
//! and the store only through their handles, and hands requests to [`McpServer`].

pub mod auth;
pub mod delete;
mod endpoint;
pub mod extract;
pub mod get;
mod handover;
pub mod inflight;
pub mod listener;
mod outbox;
pub mod post;
pub mod rejection;
mod session_request;
pub mod stateless;
pub(crate) mod stdio;
pub mod streamed;
mod trace;

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get as route;
use ractor::ActorCell;

use crate::config::Config;
use crate::event_store::{EventStoreHandle, StreamKey};
use crate::net::guard::Guard;
use crate::protocol::version::ProtocolVersion;
use crate::rt::running::Running;
use crate::rt::slot::Slot;
use crate::server::McpServer;
use crate::session::{SessionHandle, SessionHold};
use crate::stream::{Open, OpenError, Opening, StreamSettings};
use endpoint::sse_response;
use listener::ListenerMsg;
use rejection::Rejection;

pub use inflight::{InFlight, InFlightError};
pub use listener::{Handovers, HttpListener, ListenerArgs};

/// What every request handler needs; cheap to clone.
#[derive(Clone, Debug)]
pub struct AppState {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Arc<Config>,
    guard: Guard,
    sessions: SessionHandle,
    store: EventStoreHandle,
    server: Arc<McpServer>,
    listener: Slot<ListenerMsg>,
    settings: StreamSettings,
    /// Where running requests are registered (Redis only: the cluster's leases).
    inflight: Option<Arc<dyn InFlight>>,
    /// `[auth]`'s token checks; `None`: every request is anonymous.
    gate: Option<Arc<crate::auth::Gate>>,
    /// Set when shutdown begins: no new streams, and any that started meanwhile close.
    closing: std::sync::atomic::AtomicBool,
    /// Cancelled when shutdown begins: stateless listen streams end with their result.
    shutdown: tokio_util::sync::CancellationToken,
    /// The address the listener is bound to (`server.address` and `server.port`).
    local: Option<std::net::SocketAddr>,
    /// Requests whose handler runs in a task of its own (an SSE-streamed POST), which a
    /// drain waits for.
    running: Arc<Running>,
}

/// What [`AppState::new`] is built from.
#[derive(Debug)]
pub struct Parts {
    /// Configuration.
    pub config: Arc<Config>,
    /// The session manager's handle.
    pub sessions: SessionHandle,
    /// The event store's handle.
    pub store: EventStoreHandle,
    /// The MCP method table.
    pub server: Arc<McpServer>,
    /// The listener's own slot, parent of the stream actors.
    pub listener: Slot<ListenerMsg>,
    /// Where running requests are registered (Redis only).
    pub inflight: Option<Arc<dyn InFlight>>,
    /// `[auth]`'s token checks, when enabled.
    pub gate: Option<Arc<crate::auth::Gate>>,
    /// The address the listener is bound to.
    pub local: Option<std::net::SocketAddr>,
}

impl AppState {
    /// State for the router.
    pub fn new(parts: Parts) -> Self {
        let Parts {
            config,
            sessions,
            store,
            server,
            listener,
            inflight,
            gate,
            local,
        } = parts;
        let sse = &config.sse;
        let settings = StreamSettings {
            keepalive: sse.keepalive_interval.get(),
            idle_timeout: sse.stream_timeout.get(),
            retry: sse.retry_timeout,
            with_ids: sse.enable_replay,
            priming: true,
            close_idle: true,
            buffer_bytes: sse.stream_buffer_bytes.get(),
        };
        Self {
            inner: Arc::new(Inner {
                guard: Guard::new(&config.server),
                config,
                sessions,
                store,
                server,
                listener,
                settings,
                inflight,
                gate,
                closing: std::sync::atomic::AtomicBool::new(false),
                shutdown: tokio_util::sync::CancellationToken::new(),
                local,
                running: Arc::default(),
            }),
        }
    }

    /// What tells sessions and listen streams of changes.
    fn announcer(&self) -> crate::server::Announcer {
        self.inner.server.announcer(self.inner.sessions.clone())
    }

    /// Marks the start of shutdown (see [`AppState::open_stream`]).
    pub fn begin_closing(&self) {
        self.inner
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.shutdown.cancel();
    }

    fn is_closing(&self) -> bool {
        self.inner.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The principal of a request from `client`: `None` without `[auth]`; with it, the
    /// verified bearer token's, or the refusal.
    async fn authenticate(
        &self,
        query: Option<&str>,
        headers: &axum::http::HeaderMap,
        client: Option<std::net::IpAddr>,
    ) -> Result<Option<Arc<crate::auth::Principal>>, Rejection> {
        match &self.inner.gate {
            None => Ok(None),
            // Boxed: the token check (with its key fetch) is a large future, and only
            // `[auth]` pays for it; inline it would grow every verb's handler future.
            Some(gate) => match Box::pin(gate.authenticate(query, headers, client)).await {
                Ok(principal) => Ok(Some(principal)),
                Err(refused) => Err(auth::rejection(refused, gate.config())),
            },
        }
    }

    /// Refuses new work once the drain has begun.
    fn admit(&self) -> Result<(), Rejection> {
        if self.is_closing() {
            return Err(Rejection::Draining);
        }
        Ok(())
    }

    /// Resolves once every request running in a task of its own has ended.
    pub async fn requests_finished(&self) {
        self.inner.running.finished().await;
    }

    /// The stream actors' parent: the current listener incarnation.
    fn stream_parent(&self) -> Result<ActorCell, Rejection> {
        self.inner
            .listener
            .current()
            .map(|l| l.get_cell())
            .ok_or_else(|| Rejection::Unavailable("the HTTP listener is restarting".into()))
    }

    /// Starts a stream actor for `key` and returns the SSE response that it feeds.
    async fn open_stream(
        &self,
        key: StreamKey,
        version: ProtocolVersion,
        opening: Opening,
        hold: Option<SessionHold>,
        span: tracing::Span,
    ) -> Result<Response, StreamOpenError> {
        self.admit()?;
        let open = Open {
            parent: self.stream_parent()?,
            key,
            opening,
            settings: self.inner.settings,
            polls_back: version >= ProtocolVersion::V2025_11_25,
            frames: self.inner.config.sse.stream_buffer.get(),
            store: self.inner.store.clone(),
            span,
            hold,
        };
        // Boxed: spawning an actor is a large future, and inline it would grow every
        // request's handler future, which axum boxes by copying (issue 41's profile).
        let body = Box::pin(open.spawn(|| self.is_closing())).await?;
        Ok(sse_response(axum::body::Body::new(body)))
    }
}

/// Why a stream could not be opened.
#[derive(Debug)]
enum StreamOpenError {
    /// The stream's own refusal.
    Stream(OpenError),
    /// Something HTTP should report as is.
    Rejected(Rejection),
}

impl From<Rejection> for StreamOpenError {
    fn from(r: Rejection) -> Self {
        Self::Rejected(r)
    }
}

impl From<OpenError> for StreamOpenError {
    fn from(e: OpenError) -> Self {
        Self::Stream(e)
    }
}

impl StreamOpenError {
    /// The HTTP answer. The store not knowing the session of a stream being *created*
    /// means the session has ended (404: the client starts a new one); a stream being
    /// *resumed* that the store does not know has expired (410).
    fn into_rejection(self, creating: bool) -> Rejection {
        use crate::event_store::StoreError;
        match self {
            Self::Rejected(r) => r,
            Self::Stream(OpenError::Store(e @ StoreError::Backend(_))) => {
                Rejection::Unavailable(e.to_string())
            }
            Self::Stream(OpenError::Store(_)) if creating => Rejection::UnknownSession,
            Self::Stream(OpenError::Store(_)) => Rejection::StreamGone,
            Self::Stream(e @ (OpenError::Unreachable(_) | OpenError::Spawn(_))) => {
                Rejection::Unavailable(e.to_string())
            }
        }
    }
}

/// The HTTP answer to a session refusal.
pub(crate) fn session_rejection(e: crate::session::SessionError) -> Rejection {
    use crate::session::SessionError;
    use crate::telemetry::metrics::{Refusal, SESSIONS_REFUSED};
    SESSIONS_REFUSED.inc(match e {
        SessionError::NotFound => Refusal::Unknown,
        SessionError::Full => Refusal::Full,
        SessionError::ClientFull => Refusal::ClientFull,
        SessionError::PrincipalFull => Refusal::PrincipalFull,
        SessionError::Busy => Refusal::Busy,
        SessionError::DuplicateRequest => Refusal::DuplicateRequest,
        SessionError::Unreachable(_) | SessionError::Shared => Refusal::Unavailable,
    });
    match e {
        SessionError::NotFound => Rejection::UnknownSession,
        SessionError::Full => Rejection::TooManySessions,
        SessionError::ClientFull => Rejection::TooManyClientSessions,
        SessionError::PrincipalFull => Rejection::TooManyPrincipalSessions,
        SessionError::Busy => Rejection::TooBusy,
        SessionError::DuplicateRequest => Rejection::DuplicateRequestId,
        SessionError::Unreachable(e) => Rejection::Unavailable(e.to_string()),
        SessionError::Shared => Rejection::Unavailable(e.to_string()),
    }
}

/// The router serving the MCP endpoint at `sse.path`.
pub fn router(state: AppState) -> Router {
    let path = state.inner.config.sse.path.clone();
    let mut router = Router::new().route(
        &path,
        route(get::handle).post(post::handle).delete(delete::handle),
    );
    if let Some(gate) = &state.inner.gate {
        // RFC 9728: at the well-known path, and with the resource's path appended.
        let config = Arc::new(gate.config().clone());
        let metadata = move || {
            let config = config.clone();
            async move { auth::metadata(&config) }
        };
        let suffixed = gate.config().metadata_path();
        router = router.route(crate::config::WELL_KNOWN_RESOURCE, route(metadata.clone()));
        if suffixed != crate::config::WELL_KNOWN_RESOURCE {
            router = router.route(&suffixed, route(metadata));
        }
    }
    router.with_state(state)
}

/// Records a rejection on the current span and turns it into a response.
fn reject(rejection: Rejection) -> Response {
    trace::record_rejection(&rejection);
    tracing::info!(status = rejection.status().as_u16(), error = %rejection, "request rejected");
    rejection.into_response()
}
