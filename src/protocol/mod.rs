//! The MCP types a server author answers with, with no runtime or transport in sight:
//! the typed params and results of each method ([`methods`]), the questions a handler
//! may ask the client ([`client`]), the revisions ([`version`]) and [`ErrorObject`].
//!
//! The JSON-RPC envelope (`envelope.rs`: one message parsed, ours serialized; batches,
//! removed from MCP in 2025-06-18, refused with a clear error), the request as it
//! arrives with its params' readers (`request.rs`), a stateless request's `_meta`
//! (`meta.rs`) and `requestState` (`request_state.rs`) are the runtime's own.

pub mod client;
mod method;
pub mod methods;
pub mod version;

// What only the runtime reads and writes: public to the crate's own tests (`testing`).
internal! {
    mod envelope;
    mod meta;
    mod request;
    mod request_state;
}

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub(crate) use envelope::{Incoming, Outgoing, ParseFailure, parse};
pub(crate) use request::{Notification, Request, Target, trace_carrier};

/// A JSON-RPC request id: a number or a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    /// Numeric id.
    Number(i64),
    /// String id.
    String(String),
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Number(n) => n.fmt(f),
            Self::String(s) => s.fmt(f),
        }
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// Error code.
    pub code: i64,
    /// Human-readable message.
    pub message: String,
    /// Extra data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl ErrorObject {
    /// -32700: the body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// -32600: JSON, but not a valid JSON-RPC message.
    pub const INVALID_REQUEST: i64 = -32600;
    /// -32601: unknown method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// -32602: bad parameters.
    pub const INVALID_PARAMS: i64 = -32602;
    /// -32603: the server failed.
    pub const INTERNAL_ERROR: i64 = -32603;
    /// -32020 (2026-07-28): a standard header is missing or disagrees with the body.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// -32021 (2026-07-28): the request needs a client capability it did not declare.
    pub const MISSING_CAPABILITY: i64 = -32021;
    /// -32022 (2026-07-28): the request names a protocol revision we do not speak.
    pub const UNSUPPORTED_VERSION: i64 = -32022;

    /// An error with `code` and `message`.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    /// -32603 whose `data` is `{"retryable": true}`: the server stopped the work on
    /// purpose (a planned restart), so the client may send it again.
    pub fn retryable(message: impl Into<String>) -> Self {
        let mut error = Self::new(Self::INTERNAL_ERROR, message);
        error.data = Some(serde_json::json!({ "retryable": true }));
        error
    }

    /// -32602 with a message naming the problem.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(Self::INVALID_PARAMS, message)
    }

    /// -32601 for `method`.
    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            Self::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }

    /// -32603.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Self::INTERNAL_ERROR, message)
    }

    /// -32020 with a message naming the header.
    pub fn header_mismatch(message: impl Into<String>) -> Self {
        Self::new(
            Self::HEADER_MISMATCH,
            format!("Header mismatch: {}", message.into()),
        )
    }

    /// -32021 naming what the client must declare, as a capabilities object
    /// (e.g. `{"sampling": {}}`).
    pub fn missing_capability(required: Value) -> Self {
        Self {
            code: Self::MISSING_CAPABILITY,
            message: format!("Missing required client capability: {required}"),
            data: Some(serde_json::json!({ "requiredCapabilities": required })),
        }
    }

    /// -32022 listing what we speak.
    pub fn unsupported_version(requested: &str) -> Self {
        let requested: String = requested.chars().take(64).collect();
        Self {
            code: Self::UNSUPPORTED_VERSION,
            message: format!("Unsupported protocol version: {requested:?}"),
            data: Some(serde_json::json!({
                "supported": version::ProtocolVersion::supported(),
                "requested": requested,
            })),
        }
    }
}
