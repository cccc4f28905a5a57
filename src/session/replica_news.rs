//! What replicas tell each other about sessions, on the bus channels (`P:bus:all`, and
//! `P:bus:<r>` for one replica): the session manager builds this news, the directory
//! publishes it, and the cluster's router hands what it hears back through
//! [`super::SessionHandle::remote`].

use crate::ids::SessionId;
use crate::protocol::methods::LoggingLevel;
use crate::protocol::{ErrorObject, RequestId};

/// A message between replicas about a session.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SessionNews {
    /// The session was terminated (DELETE) on some replica.
    SessionEnded {
        /// The session.
        session: SessionId,
    },
    /// The client cancelled a request (`notifications/cancelled`) through a replica that
    /// is not running it.
    Cancel {
        /// The replica that heard it.
        origin: u64,
        /// The session.
        session: SessionId,
        /// The client's id of the request.
        request: RequestId,
    },
    /// `logging/setLevel` or a resource subscription changed on some replica: replicas
    /// holding a copy of the session update it.
    SessionChanged {
        /// The replica where it changed.
        origin: u64,
        /// The session.
        session: SessionId,
        /// The new log level.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_level: Option<LoggingLevel>,
        /// A resource subscribed to...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subscribed: Option<String>,
        /// ...or unsubscribed from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unsubscribed: Option<String>,
    },
    /// The client answered, through another replica, a request this replica sent it.
    Answer {
        /// The session.
        session: SessionId,
        /// Our id of the request.
        request: RequestId,
        /// The result...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        /// ...or the client's error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorObject>,
    },
}

impl SessionNews {
    /// The replica the news comes from, when that matters: a replica ignores its own
    /// broadcasts (it applied them already).
    pub fn origin(&self) -> Option<u64> {
        match self {
            Self::Cancel { origin, .. } | Self::SessionChanged { origin, .. } => Some(*origin),
            Self::SessionEnded { .. } | Self::Answer { .. } => None,
        }
    }
}
