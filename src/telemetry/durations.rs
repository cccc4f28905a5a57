//! The two MCP duration histograms of the semantic conventions,
//! `mcp.server.operation.duration` and `mcp.server.session.duration`, and the label sets
//! that key their series. [`super::operation`] observes the first, [`super::session_ended`]
//! the second; [`super::prometheus`] reads them, and `otlp` exports the same
//! observations under the same labels.

use std::sync::{Arc, LazyLock};

use super::series::Series;

/// The conventions' value for anything outside a bounded set.
pub const OTHER: &str = "_OTHER";

/// What an operation is about, beyond its method.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// Nothing low-cardinality to name.
    None,
    /// A registered tool (`tools/call`).
    Tool(Arc<str>),
    /// A registered prompt (`prompts/get`).
    Prompt(Arc<str>),
}

/// What carried a message: the conventions' `network.*` attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Carrier {
    /// HTTP/1.1 over TCP.
    Http,
    /// The stdio transport's pipes.
    Stdio,
}

impl Carrier {
    /// `network.transport`.
    pub fn transport(self) -> &'static str {
        match self {
            Self::Http => "tcp",
            Self::Stdio => "pipe",
        }
    }

    /// `network.protocol.name` and `.version`; stdio has none.
    pub fn protocol(self) -> Option<(&'static str, &'static str)> {
        match self {
            Self::Http => Some(("http", "1.1")),
            Self::Stdio => None,
        }
    }
}

/// The labels of one series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperationLabels {
    /// `mcp.method.name`.
    pub method: &'static str,
    /// `network.*`.
    pub carrier: Carrier,
    /// `gen_ai.tool.name` or `gen_ai.prompt.name`.
    pub target: Target,
    /// `mcp.protocol.version`.
    pub version: &'static str,
    /// `error.type`, when it failed.
    pub error: Option<Arc<str>>,
    /// `rpc.response.status_code`, when it failed with a JSON-RPC error.
    pub code: Option<i64>,
}

/// The series of `mcp.server.operation.duration`.
pub static OPERATIONS: LazyLock<Series<OperationLabels>> = LazyLock::new(Series::default);

/// `mcp.server.session.duration`, by protocol version.
pub static SESSION_DURATION: LazyLock<Series<&'static str>> = LazyLock::new(Series::default);
