//! [`Outbox`]: where a request's outgoing messages go, which the runtime implements, and
//! the [`Note`]s a handler sends through it.

use serde_json::Value;

use super::{BoxFuture, ClientRequestError, NotifyError};
use crate::protocol::methods::{ListKind, LoggingLevel, ServerRequest};

/// What a handler tells the client while it works. The runtime turns it into the MCP
/// notification (`notifications/progress`, `notifications/message`) on the request's
/// stream; the handler never builds a JSON-RPC message.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// Progress toward the answer, for the request's progress token.
    Progress {
        /// The client's `progressToken`.
        token: Value,
        /// Work done so far.
        progress: f64,
        /// Work in all, if known.
        total: Option<f64>,
        /// What is happening.
        message: Option<String>,
    },
    /// A log message at `level` (already checked against the session's threshold).
    Log {
        /// Its severity.
        level: LoggingLevel,
        /// The logger's name.
        logger: Option<String>,
        /// Any JSON.
        data: Value,
    },
    /// A notification of the server's own (not one MCP defines), e.g. an execution's
    /// output; clients that do not know `method` ignore it.
    Custom {
        /// Its method, e.g. `notifications/otpmcp/execution_output`.
        method: String,
        /// Its params.
        params: Value,
    },
}

/// Where a request's outgoing messages go. The runtime implements it (storing each
/// message on the request's stream and routing the client's answers back); handlers only
/// call it through the context.
pub trait Outbox: Send + Sync {
    /// Delivers one note about the current request; resolves once it is stored (so a
    /// burst of notes is paced by the store).
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>>;

    /// Sends a request to the client and resolves with its answer.
    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>>;

    /// Ends the client's connection to this request's stream early; the request goes on
    /// and the client polls back. Resolves to whether a connection was closed (never for
    /// clients older than 2025-11-25, which do not poll).
    fn close_connection(&self) -> BoxFuture<'_, bool>;

    /// Tells every session subscribed to `uri` that the resource changed; resolves to how
    /// many sessions were told.
    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>>;

    /// Tells every session and listener that list `kind` changed; resolves to how many
    /// sessions were told.
    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>>;

    /// Turns the request into a task now, if it can become one (a stateless request that
    /// declared the tasks extension, for a tool that may run as a task); resolves to
    /// whether it is one. The default: it cannot.
    fn start_task(&self) -> BoxFuture<'_, Result<bool, ClientRequestError>> {
        Box::pin(async { Ok(false) })
    }
}
