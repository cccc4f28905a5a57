//! Sessions: the session manager actor creates them on `initialize`, validates and touches
//! them on every request, numbers their POST streams, expires idle ones and terminates them
//! on DELETE — telling the event store to forget them each time a session ends.
//!
//! - [`manager`]: the actor and its messages; `manager_state`: its running state, which
//!   `admission`, `changes` and `replicas` work on;
//! - [`handle`]: [`SessionHandle`], the only code that builds [`SessionMsg`]s;
//! - [`hold`]: [`SessionHold`], an open request or stream, counted without messages;
//! - [`table`] and [`record`]: the session table and its records (pure data, lent by the
//!   supervisor); `party`: who a per-client or per-principal cap counts;
//! - `changes` (subscriptions, log level, cancellation, DELETE) and `replicas` (loading,
//!   renewing, numbering): what the manager does for sessions shared with other replicas;
//! - [`directory`]: where those sessions live in Redis;
//! - [`replica_news`]: what replicas tell each other about sessions.

mod admission;
mod changes;
pub mod directory;
pub mod effect;
pub mod handle;
pub mod hold;
pub mod manager;
mod manager_state;
mod party;
pub mod record;
pub mod replica_news;
mod replicas;
pub mod table;

use std::time::{Duration, SystemTime};

use serde_json::Value;

pub use crate::ids::SessionId;
pub use directory::Directory;
pub use effect::{LocalSession, SessionEffect};
pub use handle::SessionHandle;
pub use hold::SessionHold;
pub use manager::{SessionArgs, SessionManager, SessionMsg};
pub use record::{ClientOutcome, NewSession};
pub use replica_news::SessionNews;
pub use table::{SessionTable, TouchError};

use crate::ids::StreamNo;
use crate::protocol::version::ProtocolVersion;
use crate::rt::slot::SlotError;

/// Why a session request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Unknown, expired or terminated.
    #[error("session not found")]
    NotFound,
    /// `max_sessions` are alive already, all of them busy.
    #[error("too many sessions")]
    Full,
    /// This client address has `max_sessions_per_client` sessions, all of them busy.
    #[error("too many sessions from this client address")]
    ClientFull,
    /// This principal has `auth.max_sessions_per_principal` sessions, all of them busy.
    #[error("too many sessions of this principal")]
    PrincipalFull,
    /// `max_open_per_session` requests and streams are open already.
    #[error("too many requests and streams open in this session")]
    Busy,
    /// A running request of the session already uses this id.
    #[error("a running request of this session already uses this id")]
    DuplicateRequest,
    /// The session manager could not be reached.
    #[error(transparent)]
    Unreachable(#[from] SlotError),
    /// The shared session directory (Redis) could not be reached.
    #[error("the shared session store is unavailable")]
    Shared,
}

impl From<TouchError> for SessionError {
    fn from(e: TouchError) -> Self {
        match e {
            TouchError::NotFound => Self::NotFound,
            TouchError::Busy => Self::Busy,
            TouchError::DuplicateRequest => Self::DuplicateRequest,
        }
    }
}

/// What a request learns about its session.
#[derive(Debug, Clone)]
pub struct Touched {
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// Cancelled when the session ends (DELETE, expiry, shutdown).
    pub cancel: tokio_util::sync::CancellationToken,
    /// The POST stream allocated for this request, when asked for.
    pub stream: Option<StreamNo>,
    /// The session's log level when the request started.
    pub log_level: std::sync::Arc<crate::protocol::methods::LogThreshold>,
    /// What the client said it supports at `initialize`.
    pub client_capabilities: std::sync::Arc<serde_json::Value>,
}

/// Observable state of one session (the erlmcp `get_session_info`).
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session.
    pub id: SessionId,
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// When it initialized.
    pub connected_at: SystemTime,
    /// How long ago that was.
    pub connected_for: Duration,
    /// How long since its last request.
    pub idle_for: Duration,
    /// Requests and streams open now.
    pub open: u32,
    /// Last event position of each stream that still has a record in the store.
    pub last_event: Vec<(StreamNo, u64)>,
}
