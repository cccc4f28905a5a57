//! The HTTP edge every listener shares, below MCP's semantics: the accept loop
//! (connection limit, header and write timeouts, TCP_NODELAY), the write-stall guard, the
//! client's address behind trusted proxies, and the DNS-rebinding guard (which only names
//! MCP's headers among those that may come once). The transport gives it a router to serve.

mod accept;
mod forwarded;
pub mod guard;
mod stall;

pub(crate) use accept::{ClientAddr, Limits, serve};
pub(crate) use forwarded::Proxies;
