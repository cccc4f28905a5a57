//! A session's record: what `initialize` said, what is open, what it subscribed to. Pure
//! data, kept in the session table.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Instant, SystemTime};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::hold::{HoldCounter, HoldEntry};
use crate::ids::STREAM_BITS;
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, RequestId};

/// What `initialize` told us about the client.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// The client's `capabilities` object (shared with every request of the session).
    pub client_capabilities: std::sync::Arc<Value>,
    /// The client's `clientInfo` object.
    pub client_info: Value,
    /// The lists whose capability the server announced at `initialize`; only these get
    /// `list_changed` notifications.
    pub lists: Vec<crate::protocol::methods::ListKind>,
    /// The address the client connected from, for `server.max_sessions_per_client`.
    /// `None` for a session loaded from another replica: the cap counts the sessions
    /// created here.
    pub client: Option<std::net::IpAddr>,
    /// The principal whose token created it (`[auth]`): only that principal's requests
    /// reach it; any other gets what an unknown session gets. `None` without `[auth]`.
    pub owner: Option<crate::auth::Owner>,
}

/// A client's answer to a request the server sent it.
pub type ClientOutcome = Result<Value, ErrorObject>;

/// One session.
#[derive(Debug)]
pub struct SessionRecord {
    /// What the client sent at `initialize`.
    pub init: NewSession,
    /// Wall-clock time of `initialize`.
    pub connected_at: SystemTime,
    /// Monotonic time of `initialize`.
    pub started: Instant,
    /// Last request or stream activity.
    pub last_seen: Instant,
    /// Counts the requests and streams in progress (see [`super::hold`]); a session is
    /// never expired while any is open.
    pub holds: Arc<HoldCounter>,
    /// Number of the last POST stream opened (0: none).
    pub last_stream: u64,
    /// `last_stream` must stay below this: the end of the block of numbers reserved for
    /// this replica's copy of the session.
    pub stream_limit: u64,
    /// The start of that block, also part of our ids for requests to the client, so a
    /// copy loaded again never reuses one.
    pub request_block: u64,
    /// Cancelled when the session ends: its running requests stop.
    pub cancel: CancellationToken,
    /// Running requests by JSON-RPC id, for `notifications/cancelled`: each token is a
    /// child of `cancel`, beside the request's hold (an entry whose hold is gone is a
    /// finished request). Pruned as it reaches `max_open_per_session`, so it stays within
    /// that many entries plus one.
    pub requests: HashMap<RequestId, (CancellationToken, Weak<HoldEntry>)>,
    /// Requests we sent the client (sampling, elicitation, roots) awaiting its answer, by
    /// our id for them. Bounded like holds.
    pub pending: HashMap<RequestId, oneshot::Sender<ClientOutcome>>,
    /// Number of the last request we sent the client.
    pub last_client_request: u64,
    /// Least severe log level the client wants (`logging/setLevel`); `None`: all.
    pub log_level: std::sync::Arc<crate::protocol::methods::LogThreshold>,
    /// Resource URIs the client subscribed to (`resources/subscribe`).
    pub subscriptions: super::effect::Subscriptions,
    /// Last time its TTL in the shared directory was renewed.
    pub refreshed: Instant,
}

impl SessionRecord {
    /// A session entering this replica's table at `now`, idle, with nothing open.
    pub(super) fn new(
        init: NewSession,
        connected_at: SystemTime,
        cancel: CancellationToken,
        now: Instant,
    ) -> Self {
        Self {
            init,
            connected_at,
            started: now,
            last_seen: now,
            holds: Arc::default(),
            last_stream: 0,
            stream_limit: 1 << STREAM_BITS,
            request_block: 0,
            cancel,
            requests: HashMap::new(),
            pending: HashMap::new(),
            last_client_request: 0,
            log_level: Default::default(),
            subscriptions: Default::default(),
            refreshed: now,
        }
    }
}
