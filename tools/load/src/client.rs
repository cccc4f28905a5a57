//! Raw HTTP/1.1 connections to the server under test. One connection carries one
//! request at a time, so every in-flight slot of a workload owns a connection: no pool,
//! no locking, and the generator stays cheaper than the server it drives.

use std::net::{SocketAddr, ToSocketAddrs};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use crate::Result;

/// Where the server under test listens.
#[derive(Debug, Clone)]
pub(crate) struct Target {
    /// The resolved socket address.
    pub(crate) addr: SocketAddr,
    /// `host[:port]` as written in the URL, for the `Host` header (servers check it
    /// against DNS rebinding).
    pub(crate) authority: String,
    /// The MCP endpoint's path, e.g. `/mcp`.
    pub(crate) path: String,
}

impl Target {
    /// Parses `http://host[:port][/path]`.
    pub(crate) fn parse(url: &str) -> Result<Target> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: only http:// URLs are supported"))?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        if authority.is_empty() {
            return Err(format!("{url:?}: no host").into());
        }
        let has_port = authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
        let host_port = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let addr = host_port
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| format!("{url:?}: host has no address"))?;
        Ok(Target {
            addr,
            authority: authority.to_owned(),
            path: path.to_owned(),
        })
    }
}

/// One HTTP/1.1 connection. Dropping it closes the socket at once (the connection task
/// is aborted), which is how the resume workload "disconnects".
pub(crate) struct Conn {
    sender: SendRequest<Full<Bytes>>,
    task: JoinHandle<()>,
}

impl Conn {
    /// Connects with TCP_NODELAY, as any latency-minded client would.
    pub(crate) async fn open(target: &Target) -> Result<Conn> {
        let stream = TcpStream::connect(target.addr).await?;
        stream.set_nodelay(true)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await?;
        let task = tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Conn { sender, task })
    }

    /// Sends a request once the previous response's body has been read to its end.
    pub(crate) async fn send(&mut self, req: Request<Full<Bytes>>) -> Result<Response<Incoming>> {
        self.sender.ready().await?;
        Ok(self.sender.send_request(req).await?)
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.task.abort();
    }
}
