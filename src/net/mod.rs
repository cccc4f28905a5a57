//! TCP connections for the HTTP transport, knowing nothing of MCP: the accept loop
//! (connection limit, header and write timeouts, TCP_NODELAY), the write-stall guard, and
//! the client's address behind trusted proxies. The transport gives it a router to serve.

mod accept;
mod forwarded;
mod stall;

pub(crate) use accept::{ClientAddr, Limits, serve};
pub(crate) use forwarded::Proxies;
