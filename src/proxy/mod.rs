//! `otpmcp proxy`: a record/replay proxy for any Streamable HTTP MCP server.
//!
//! - `--upstream URL --record FILE`: serves MCP on its own address and forwards every
//!   POST, GET and DELETE to the server at URL, SSE passed through as it arrives
//!   ([`record`]), writing a JSON Lines recording ([`artifact`]).
//! - `--replay FILE`: serves the recording as an MCP server ([`replay`]): the same
//!   answers, the same bytes on the wire, resumable anywhere with `Last-Event-ID`.
//!
//! Both modes refuse a foreign `Host` or `Origin` first ([`access`]), as the MCP endpoint
//! does. See docs/proxy.md.

pub mod access;
pub mod artifact;
pub mod record;
pub mod replay;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::Router;
use http::HeaderMap;

pub use access::Access;

/// Largest request body, response body (not streamed) or SSE block handled.
pub const MAX_BODY: usize = 64 << 20;

/// Headers passed on and recorded, besides every `mcp-*` one: what MCP's transport uses,
/// and `origin`, so that the upstream's own DNS-rebinding check sees the browser's page.
const KEPT: [&str; 10] = [
    "accept",
    "origin",
    "content-type",
    "authorization",
    "last-event-id",
    "cache-control",
    "www-authenticate",
    "retry-after",
    "x-accel-buffering",
    "cookie",
];

/// The headers of `headers` a proxy passes on: `KEPT` and `mcp-*` (session id,
/// protocol version, routing headers), not hop-by-hop or host headers.
pub fn kept_headers(
    headers: &HeaderMap,
) -> impl Iterator<Item = (&http::HeaderName, &http::HeaderValue)> {
    headers.iter().filter(|(name, _)| {
        let name = name.as_str();
        KEPT.contains(&name) || name.starts_with("mcp-")
    })
}

/// Whether an answer is an SSE stream.
pub fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"))
}

/// What `otpmcp proxy` was asked to do.
#[derive(Debug, Clone)]
pub enum Mode {
    /// Forward to an upstream, recording.
    Record(RecordTo),
    /// Serve `file`.
    Replay {
        /// The recording.
        file: PathBuf,
        /// Keep the recorded spacing of SSE blocks.
        timing: bool,
    },
}

/// Where recording forwards to, where it records and what it leaves out.
#[derive(Debug, Clone, Default)]
pub struct RecordTo {
    /// The MCP endpoint, e.g. `http://127.0.0.1:8080/mcp`.
    pub upstream: String,
    /// Where the recording goes.
    pub file: PathBuf,
    /// Headers written as `[redacted]` (lower case).
    pub redact: Vec<String>,
    /// Query parameters written as `[redacted]` (lower case), besides every
    /// credential-like one (`api_key`, `access_token`, `token`, `key`, `secret`,
    /// `password`, `signature`, …), which always are.
    pub redact_params: Vec<String>,
    /// Replace an existing regular file at `file` (never a symbolic link).
    pub overwrite: bool,
    /// Write `Mcp-Session-Id` values as they were, not as `[session-N]`.
    pub keep_session_ids: bool,
}

/// Headers redacted by default.
pub const REDACTED: [&str; 4] = [
    "authorization",
    "cookie",
    "proxy-authorization",
    "x-api-key",
];

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// `--upstream` is not an http:// URL.
    #[error("--upstream {0:?} is not an http:// URL")]
    Upstream(String),
    /// The recording could not be written or read.
    #[error(transparent)]
    Artifact(#[from] artifact::ArtifactError),
    /// An `--allowed-host` or `--allowed-origin` that cannot match.
    #[error(transparent)]
    Access(#[from] access::AccessError),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A proxy bound and ready to serve.
pub struct Proxy {
    listener: tokio::net::TcpListener,
    router: Router,
    /// The MCP URL clients use.
    pub url: String,
}

impl Proxy {
    /// Binds `bind` and prepares `mode`, refusing requests that `access` does not allow.
    pub async fn bind(mode: Mode, bind: SocketAddr, access: &Access) -> Result<Self, ProxyError> {
        let guard = access.guard()?;
        let (router, path) = match mode {
            Mode::Record(RecordTo {
                upstream,
                file,
                redact,
                redact_params,
                overwrite,
                keep_session_ids,
            }) => {
                let uri: http::Uri = upstream
                    .parse()
                    .ok()
                    .filter(|u: &http::Uri| u.scheme_str() == Some("http"))
                    .ok_or_else(|| ProxyError::Upstream(upstream.clone()))?;
                let path = uri.path().to_owned();
                let recorder = artifact::Recorder::create(
                    &file,
                    &record::redact_path(&upstream, &redact_params),
                    overwrite,
                )?;
                let state = Arc::new(record::Recording::new(
                    uri,
                    recorder,
                    redact,
                    redact_params,
                    keep_session_ids,
                    guard,
                ));
                (
                    Router::new().fallback(record::forward).with_state(state),
                    path,
                )
            }
            Mode::Replay { file, timing } => {
                let (_, entries) = artifact::read(&file)?;
                let path = entries
                    .iter()
                    .find_map(|e| match e {
                        artifact::Entry::Request { path, .. } => Some(path.clone()),
                        _ => None,
                    })
                    .unwrap_or_else(|| "/mcp".into());
                let state = Arc::new(replay::Replay::new(entries, timing, guard));
                tracing::info!(exchanges = state.exchanges(), "replaying");
                (
                    Router::new().fallback(replay::answer).with_state(state),
                    path,
                )
            }
        };
        let listener = tokio::net::TcpListener::bind(bind)
            .await
            .map_err(|source| ProxyError::Bind { addr: bind, source })?;
        let addr = listener
            .local_addr()
            .map_err(|source| ProxyError::Bind { addr: bind, source })?;
        let path = path.split('?').next().unwrap_or("/mcp").to_owned();
        Ok(Self {
            listener,
            router,
            url: format!("http://{addr}{path}"),
        })
    }

    /// Serves until `stop` resolves.
    pub async fn serve(self, stop: impl std::future::Future<Output = ()> + Send + 'static) {
        use axum::serve::ListenerExt as _;
        // TCP_NODELAY: each SSE block goes out when written, as the upstream sent it.
        let listener = self.listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        if let Err(e) = axum::serve(listener, self.router)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "the proxy stopped");
        }
    }
}
