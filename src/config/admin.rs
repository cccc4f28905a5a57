//! `[admin]`: the admin listener (`/healthz`, `/readyz`, `/metrics`, `/dashboard`).

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, nz};
use super::server::{loopback_hosts, loopback_origins};

/// `[admin]`: the admin listener, on a socket of its own.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve it. Off, nothing listens beyond the MCP endpoint.
    pub enabled: bool,
    /// Where. The default is loopback, so the probes are not reachable from the network
    /// unless you ask for it (`allow_remote`).
    pub bind: SocketAddr,
    /// Let `bind` be an address other than loopback. Off, such a `bind` is refused at
    /// start-up, since the listener has no authentication of its own.
    pub allow_remote: bool,
    /// Host names (port ignored) accepted in `Host`, as `server.allowed_hosts`; empty:
    /// any.
    pub allowed_hosts: Vec<String>,
    /// Origins (scheme://host, port ignored) accepted in `Origin`; requests without one
    /// (probes, Prometheus) pass.
    pub allowed_origins: Vec<String>,
    /// How often `/dashboard` gets a new snapshot.
    pub dashboard_interval: NonZeroDuration,
    /// Snapshots kept for a dashboard that (re)connects: it gets those after its
    /// `Last-Event-ID`, or all of them.
    pub dashboard_history: NonZeroUsize,
    /// Serve `POST /fault/panic/{child}`, which makes an actor panic, for soaks and
    /// drills. Anyone who reaches the admin listener can then crash actors.
    pub fault_injection: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bind: SocketAddr::from(([127, 0, 0, 1], 9464)),
            allow_remote: false,
            allowed_hosts: loopback_hosts(),
            allowed_origins: loopback_origins(),
            dashboard_interval: NonZeroDuration::from_secs(1),
            dashboard_history: nz!(300),
            fault_injection: false,
        }
    }
}
