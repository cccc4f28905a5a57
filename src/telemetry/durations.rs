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

/// The labels of one series.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OperationLabels {
    /// `mcp.method.name`.
    pub method: &'static str,
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
