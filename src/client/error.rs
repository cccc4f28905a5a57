//! [`ClientError`]: why a client call failed.

use std::time::Duration;

use serde_json::Value;

use super::watch;
use super::wire::Unreachable;
use crate::app::StartError;

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A bad URL, one a token would leak over, or no TLS client: nothing was sent.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
    /// The server could not be reached, or its answer broke off.
    #[error("{method}: {detail}")]
    Transport {
        /// The request's method.
        method: String,
        /// What happened.
        detail: String,
    },
    /// No answer within the client's timeout.
    #[error("{method}: no answer within {timeout:?}")]
    Timeout {
        /// The request's method.
        method: String,
        /// The timeout.
        timeout: Duration,
    },
    /// An HTTP error without a JSON-RPC error in its body.
    #[error("{method}: HTTP {status}: {body}")]
    Http {
        /// The request's method.
        method: String,
        /// The HTTP status.
        status: u16,
        /// The body, as text.
        body: String,
    },
    /// The server answered with a JSON-RPC error.
    #[error("{method}: error {code}: {message}")]
    Rpc {
        /// The request's method.
        method: String,
        /// The error's code (-32602 invalid params, -32020 header mismatch, …).
        code: i64,
        /// Its message.
        message: String,
        /// Its data.
        data: Option<Value>,
    },
    /// The answer ended without a response to the request.
    #[error("{method}: the answer ended without a response")]
    NoResponse {
        /// The request's method.
        method: String,
    },
    /// The answer was not what the method returns.
    #[error("{method}: unexpected answer: {detail}")]
    Malformed {
        /// The request's method.
        method: String,
        /// What was wrong.
        detail: String,
    },
    /// `initialize` over HTTP did not give a session id.
    #[error("initialize: the answer has no Mcp-Session-Id")]
    NoSession,
    /// The call needs what this client's revision lacks (tasks need 2026-07-28).
    #[error("{0}")]
    Unsupported(&'static str),
    /// A tool call that was meant to become a task did not.
    #[error("{tool}: the call did not become a task: {answer}")]
    NotATask {
        /// The tool.
        tool: String,
        /// Its answer.
        answer: Value,
    },
    /// The stdio server's output ended.
    #[error("{method}: the server's output ended")]
    Closed {
        /// The request's method.
        method: String,
    },
    /// The in-process stdio server did not start or stopped with an error.
    #[error("the stdio server: {0}")]
    Start(#[from] StartError),
    /// Following a task's events could not start.
    #[error(transparent)]
    Watch(#[from] watch::WatchError),
}

impl ClientError {
    /// The JSON-RPC error code, for [`ClientError::Rpc`].
    pub fn code(&self) -> Option<i64> {
        match self {
            Self::Rpc { code, .. } => Some(*code),
            _ => None,
        }
    }
}
