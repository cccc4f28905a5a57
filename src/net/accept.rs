//! The accept loop: each connection served by hyper's HTTP/1 server, with what
//! `axum::serve` does not set.
//!
//! - TCP_NODELAY: SSE frames are small writes; with Nagle on, each waits for the peer's
//!   delayed ACK (~40 ms).
//! - `server.header_timeout`: hyper's header read timeout, which runs whenever the
//!   connection waits for a request head: a new connection that sends nothing, a head
//!   sent a byte at a time, an idle keep-alive connection. Past it the connection closes.
//! - `server.write_timeout`: [`StallGuard`] fails a write that made no progress.
//! - `server.max_connections`: past it a new connection is answered 503 and closed, so
//!   the ones being served keep their file descriptors.
//!
//! Shutdown stops accepting and lets the open connections finish (hyper's graceful
//! shutdown); the listener actor decides how long to wait.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tower_service::Service;

use super::forwarded::Proxies;
use super::stall::StallGuard;
use crate::config::ServerConfig;
use crate::telemetry::metrics::CONNECTIONS_REFUSED;

/// How long the loop waits after a failed `accept` (out of file descriptors, say) before
/// trying again, so that it does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// hyper's own buffer per connection, for reading a request head and for the frames it
/// takes from a body before the socket accepts them. Its default (about 400 KiB) would
/// come on top of `sse.stream_buffer_bytes` for every client that stops reading; a head
/// larger than this is refused (431).
const WRITE_BUFFER: usize = 64 * 1024;

/// What a connection past `max_connections` is told before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nretry-after: 1\r\n\
content-type: text/plain\r\ncontent-length: 34\r\nconnection: close\r\n\r\n\
too many connections; retry later\n";

/// The client's address, as a request extension: the connection's peer, or the address a
/// trusted proxy reports for it (`server.trusted_proxies`). Every per-address limit
/// counts by it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientAddr(pub(crate) IpAddr);

/// The limits the loop applies, from `[server]`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    header_timeout: Duration,
    write_timeout: Duration,
    max_connections: usize,
}

impl Limits {
    pub(crate) fn from_config(server: &ServerConfig) -> Self {
        Self {
            header_timeout: server.header_timeout.get(),
            write_timeout: server.write_timeout.get(),
            max_connections: server.max_connections.get(),
        }
    }
}

/// Serves `app` on `listener` until `stop` fires, then waits for the open connections.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    proxies: Arc<Proxies>,
    mut stop: oneshot::Receiver<()>,
) {
    let graceful = GracefulShutdown::new();
    let open = Arc::new(AtomicUsize::new(0));
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!(error = %e, "could not set TCP_NODELAY");
        }
        let Some(slot) = Slot::take(&open, limits.max_connections) else {
            refuse(tcp);
            continue;
        };
        let io = TokioIo::new(StallGuard::new(tcp, limits.write_timeout));
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .max_buf_size(WRITE_BUFFER);
        let app = app.clone();
        let proxies = proxies.clone();
        let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
            let client = proxies.client(peer.ip(), request.headers());
            request.extensions_mut().insert(ClientAddr(client));
            // A clone per request, as hyper-util's adapter does: the router is an `Arc`.
            app.clone().call(request)
        });
        let conn = builder.serve_connection(io, service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
    graceful.shutdown().await;
}

/// One of the `max_connections` places, given back when the connection ends.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| Self(open.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Answers a connection past the cap with 503 and closes it. A new socket's send buffer
/// is empty, so the answer goes out in one non-blocking write; if it cannot, the close
/// alone tells the client.
fn refuse(tcp: TcpStream) {
    CONNECTIONS_REFUSED.inc();
    let _ = tcp.try_write(REFUSAL);
}
