//! `[server]`: the MCP listener, its security checks and its limits.

use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, NonZeroDuration, human_duration, nz};

/// The MCP listener: its address, its DNS-rebinding checks, and the limits on sessions,
/// connections and requests.
///
/// Over stdio (`otpmcp stdio`) no socket is opened, so `bind`, the Host and Origin checks
/// and the connection and header limits do not apply; `max_body_bytes` is then the longest
/// line, `max_open_per_session` caps the requests running at once, and `shutdown_timeout`
/// is what running requests get once stdin closes.
///
/// Two limits are fixed: `initialize` refuses `capabilities` plus `clientInfo` over 64 KiB
/// (they are kept for the session's life), and the built-in `stream_events` tool refuses
/// `count × interval_ms` over 10 minutes.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address and port to listen on; port 0 picks a free one. The default is loopback, so
    /// a local server is not reachable from the network unless you ask for it: on a public
    /// address, add the names clients use to `allowed_hosts`. An address that cannot be
    /// bound exits 1.
    pub bind: SocketAddr,
    /// Refuse (403) a request whose `Host` is not in `allowed_hosts` or whose `Origin` is
    /// not in `allowed_origins`. Turned off, any web page the user visits can drive a local
    /// server.
    pub dns_rebinding_protection: bool,
    /// Host names accepted in `Host`, port ignored, case-insensitive. Empty: any Host.
    pub allowed_hosts: Vec<String>,
    /// Origins (`scheme://host`, port ignored) accepted in `Origin`; requests without one
    /// (non-browser clients) pass. Empty: every request with an `Origin`, so every browser,
    /// is refused.
    pub allowed_origins: Vec<String>,
    /// Largest POST body, checked against `Content-Length` and while reading; larger gets
    /// 413.
    pub max_body_bytes: usize,
    /// Most sessions alive at once. At the cap, `initialize` ends the least recently used
    /// idle session (its client gets 404 next and initializes again); only when every
    /// session is busy does it get 503 with `Retry-After`.
    pub max_sessions: NonZeroUsize,
    /// Most sessions one client address (the TCP peer, or what a trusted proxy reports:
    /// `trusted_proxies`) may hold on this replica; 0: no cap. At it, `initialize` from
    /// that address ends the address's own least recently used idle session, or gets 429
    /// when all are busy. Clients behind one NAT share an address: size it for them.
    pub max_sessions_per_client: u32,
    /// Most requests in progress plus open streams per session (a POST counts until its
    /// handler finishes, even after its connection closed), and most requests to the client
    /// (sampling, elicitation, roots) awaiting an answer. One more gets 429, or
    /// `ClientRequestError::Unavailable` in the handler.
    pub max_open_per_session: NonZeroU32,
    /// A session with no request, no running request and no open stream for this long is
    /// ended and its events forgotten (an open GET stream keeps it alive). Expiry is
    /// checked every quarter of it or every `sse.cleanup_interval`, whichever is shorter.
    /// With Redis, it is also the TTL of the session's keys, renewed while any replica uses
    /// it: a replica that finds it idle drops only its own copy.
    pub session_timeout: NonZeroDuration,
    /// A connection whose client has read nothing for this long while data waits to be
    /// written is dropped, with everything buffered for it; the client resumes with
    /// `Last-Event-ID`. The clock runs only while a write is pending, so idle and
    /// slow-but-reading clients are not affected.
    pub write_timeout: NonZeroDuration,
    /// How long a handler waits for the client to answer a request the server sent it
    /// (sampling, elicitation, roots); then it gets `ClientRequestError::Timeout`, and a
    /// later answer is accepted and ignored.
    pub client_request_timeout: NonZeroDuration,
    /// The drain on SIGTERM: the socket stops listening, new requests on open connections
    /// get 503, and running requests get this long to finish. Then open streams close with
    /// a `retry:` hint and what still runs is cancelled (with Redis, another replica
    /// answers it). `0s`: close at once.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub shutdown_timeout: Duration,
    /// How long a connection may take to send a request head, whenever the server waits for
    /// one (a new connection, or an idle keep-alive one); past it the connection is closed,
    /// so silent and slowloris connections do not hold a file descriptor.
    pub header_timeout: NonZeroDuration,
    /// How long a POST body may take to arrive in full; past it, 408.
    pub body_timeout: NonZeroDuration,
    /// Longest string `progressToken` a request may carry (it is copied into every progress
    /// notification); past it, -32602 naming this key.
    pub max_progress_token_bytes: usize,
    /// Most connections open at once; one more is answered 503 with `Retry-After` and
    /// closed (`otpmcp_connections_refused_total`). Keep it below the process's
    /// file-descriptor limit.
    pub max_connections: NonZeroUsize,
    /// The reverse proxies in front of this server, as addresses (`10.0.0.7`) or CIDRs
    /// (`10.0.0.0/8`). A request from one of them counts as coming from the address it
    /// reports in `client_address_header`: from the right, the first that is not itself a
    /// trusted proxy. The per-address limits (`max_sessions_per_client`,
    /// `auth.max_failures_per_client`) use it. Empty: the TCP peer is the client, so behind
    /// nginx every client is nginx. Naming a host that is not your proxy lets whoever runs
    /// it choose their address.
    #[serde(with = "cidrs")]
    #[schemars(with = "Vec<String>")]
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The header a trusted proxy reports the client's address in. Only this one is read:
    /// set it to the one your proxy appends to (nginx: `X-Forwarded-For
    /// $proxy_add_x_forwarded_for`), since a client can write either itself.
    pub client_address_header: ClientAddressHeader,
}

/// Where a trusted proxy puts the client's address (`server.client_address_header`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
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
