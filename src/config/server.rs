//! `[server]`: the MCP listener, its security checks and its limits.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, human_duration, nz};

/// `[server]`: the listener, security checks and session limits.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on. The default is loopback, so a local server is not reachable
    /// from the network unless you ask for it.
    pub bind: SocketAddr,
    /// Reject requests whose `Host` is not in `allowed_hosts` and whose `Origin` is not in
    /// `allowed_origins` (DNS-rebinding protection). Turning it off lets any web page a
    /// user visits drive a local server.
    pub dns_rebinding_protection: bool,
    /// Host names (port ignored) accepted in `Host`.
    pub allowed_hosts: Vec<String>,
    /// Origins (scheme://host, port ignored) accepted in `Origin`; requests without an
    /// Origin (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// Largest accepted POST body in bytes (413 above).
    pub max_body_bytes: usize,
    /// Most sessions alive at once; `initialize` beyond it gets 503. Without a cap, a
    /// client looping on `initialize` grows memory without bound.
    pub max_sessions: NonZeroUsize,
    /// Most sessions one client address may have on this replica; 0 means no cap. At it,
    /// `initialize` from that address ends the address's own least recently used idle
    /// session, or gets 429 with `Retry-After` when all of them are busy, so one address
    /// cannot take the table from everyone else. Clients behind one NAT or proxy share an
    /// address: size it for them.
    pub max_sessions_per_client: u32,
    /// Most requests in progress plus streams open per session; beyond it a request gets
    /// 429. Without it, one client can start unbounded work that outlives its connections.
    pub max_open_per_session: NonZeroU32,
    /// A session with no request and no open stream or running request for this long is
    /// ended and its events forgotten. Without it, abandoned sessions and their events
    /// stay in memory until `max_sessions` refuses new clients.
    pub session_timeout: NonZeroDuration,
    /// A connection whose client has read nothing for this long while we have data to
    /// send is dropped, with everything buffered for it. Without it, a client that stops
    /// reading pins its buffered frames for as long as it likes.
    pub write_timeout: NonZeroDuration,
    /// How long a handler waits for the client to answer a request the server sent it
    /// (sampling, elicitation, roots). Without it, a client that never answers keeps the
    /// handler, and its session, busy forever.
    pub client_request_timeout: NonZeroDuration,
    /// How long shutdown waits for open connections to finish.
    #[serde(with = "human_duration")]
    pub shutdown_timeout: Duration,
    /// How long a connection may take to send a request's head: from when the server
    /// waits for one (a new connection, or an idle keep-alive one) to its last header.
    /// Past it the connection is closed: silent, slowloris and idle connections do not
    /// hold a file descriptor for ever.
    pub header_timeout: NonZeroDuration,
    /// How long a request's body may take to arrive; past it, 408.
    pub body_timeout: NonZeroDuration,
    /// Longest `progressToken` a request may carry, in bytes (it is copied into every
    /// progress notification); past it, -32602.
    pub max_progress_token_bytes: usize,
    /// Most connections open at once. Past it a new connection is answered 503 with
    /// `Retry-After` and closed, so file descriptors stay for the ones served.
    pub max_connections: NonZeroUsize,
    /// The reverse proxies and load balancers in front of this server (addresses or
    /// CIDRs). A request whose TCP peer is one of them counts as coming from the address
    /// the proxy reports in `client_address_header`: the right-most address there that
    /// is not itself a trusted proxy. Every per-address limit uses that address. Empty:
    /// the TCP peer is the client.
    #[serde(with = "cidrs")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The header a trusted proxy reports the client's address in: `x-forwarded-for`
    /// or `forwarded` (RFC 7239). Only one is read, the one the proxy sets (appending
    /// to what the client sent): a client can write either header itself.
    pub client_address_header: ClientAddressHeader,
}

/// Where a trusted proxy puts the client's address (`server.client_address_header`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum ClientAddressHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2`.
    #[default]
    #[serde(rename = "x-forwarded-for")]
    XForwardedFor,
    /// `Forwarded: for=client, for=proxy1` (RFC 7239).
    #[serde(rename = "forwarded")]
    Forwarded,
}

/// A list of networks written as addresses (`10.0.0.7`, a single host) or CIDRs
/// (`10.0.0.0/8`), written back as CIDRs.
mod cidrs {
    use std::net::IpAddr;

    use ipnet::IpNet;
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

    pub(super) fn serialize<S: Serializer>(nets: &[IpNet], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(nets.iter().map(ToString::to_string))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpNet>, D::Error> {
        Vec::<String>::deserialize(d)?
            .iter()
            .map(|text| {
                let text = text.trim();
                text.parse::<IpNet>()
                    .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
                    .map_err(|_| D::Error::custom(format!("{text:?} is not an address or a CIDR")))
            })
            .collect()
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            dns_rebinding_protection: true,
            allowed_hosts: loopback_hosts(),
            allowed_origins: loopback_origins(),
            max_body_bytes: 4 * 1024 * 1024,
            max_sessions: nz!(10_000),
            max_sessions_per_client: 0,
            max_open_per_session: nz!(64),
            session_timeout: NonZeroDuration::from_secs(30 * 60),
            write_timeout: NonZeroDuration::from_secs(30),
            client_request_timeout: NonZeroDuration::from_secs(300),
            shutdown_timeout: Duration::from_secs(10),
            header_timeout: NonZeroDuration::from_secs(10),
            body_timeout: NonZeroDuration::from_secs(30),
            max_connections: nz!(4096),
            max_progress_token_bytes: 256,
            trusted_proxies: Vec::new(),
            client_address_header: ClientAddressHeader::XForwardedFor,
        }
    }
}

/// The loopback names, the default `allowed_hosts` of both listeners.
pub(super) fn loopback_hosts() -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"].map(String::from).into()
}

/// http and https on each loopback name, the default `allowed_origins` of both listeners.
pub(super) fn loopback_origins() -> Vec<String> {
    ["http", "https"]
        .iter()
        .flat_map(|scheme| {
            loopback_hosts()
                .into_iter()
                .map(move |host| format!("{scheme}://{host}"))
        })
        .collect()
}
