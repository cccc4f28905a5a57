//! `[admin]`: the admin listener (`/healthz`, `/readyz`, `/metrics`, `/dashboard`).

use std::net::SocketAddr;
use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, nz};
use super::server::{loopback_hosts, loopback_origins};

/// The admin listener, on a socket of its own apart from the MCP endpoint, without
/// authentication: `GET /healthz` (200 while the root supervisor runs), `GET /readyz` (200
/// when not draining and the listener, the store and Redis answer), `GET /metrics`
/// (Prometheus) and `GET /dashboard` ([operations.md](operations.md)).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve it. Off, nothing listens beyond the MCP endpoint.
    pub enabled: bool,
    /// Where. Loopback by default; another address needs `allow_remote`, else it exits 2.
    /// An address that cannot be bound exits 1.
    pub bind: SocketAddr,
    /// Let `bind` be an address other than loopback (a pod IP, `0.0.0.0`), with a warning
    /// at start-up; add the names your probes use to `allowed_hosts`. Bind beyond loopback
    /// only on a network you trust.
    pub allow_remote: bool,
    /// Host names (port ignored) accepted in `Host` on every admin route, so a page that
    /// rebinds its DNS name to this address cannot read it; another gets 403. Empty: any.
    pub allowed_hosts: Vec<String>,
    /// Origins (port ignored) accepted in `Origin`; requests without one (probes,
    /// Prometheus, curl) pass.
    pub allowed_origins: Vec<String>,
    /// How often the dashboard's recorder takes a snapshot (tree, sessions, store), whether
    /// or not a page is open.
    pub dashboard_interval: NonZeroDuration,
    /// Snapshots kept, so a dashboard that (re)connects gets those after its
    /// `Last-Event-ID`, or all of them.
    pub dashboard_history: NonZeroUsize,
    /// Serve `POST /fault/panic/{child}` (`event_store`, `session_manager`,
    /// `http_listener`), which makes the actor panic for the supervisor to restart, as
    /// `scripts/soak` does. It needs the header `X-Otpmcp-Fault: 1`. Anyone who reaches the
    /// listener can then crash actors; 404 when off.
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
