//! The handler API: what a tool implementation sees. No HTTP, no JSON-RPC envelopes, no
//! event store: a tool gets its arguments and a [`RequestContext`] through which it reports
//! progress; where those reports go (a resumable SSE stream, or nowhere) is the runtime's
//! business.

pub mod builtin;
pub mod tools;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::protocol::Notification;
use crate::protocol::methods::progress_notification;

pub use tools::{Tool, ToolError, ToolRegistry};

/// A boxed, sendable future: the return type of object-safe async methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A notification could not be delivered (the stream or the store is gone).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("notification not delivered: {0}")]
pub struct NotifyError(pub String);

/// Where a request's notifications go. The runtime implements it (storing each
/// notification on the request's stream); handlers only call it through the context.
pub trait Notify: Send + Sync {
    /// Delivers one notification related to the current request; resolves once it is
    /// stored (so a burst of notifications is paced by the store).
    fn notify(&self, notification: Notification) -> BoxFuture<'_, Result<(), NotifyError>>;
}

/// What a handler knows about the request it serves.
#[derive(Clone, Default)]
pub struct RequestContext {
    progress_token: Option<Value>,
    notifier: Option<Arc<dyn Notify>>,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext")
            .field("progress_token", &self.progress_token)
            .field("has_stream", &self.notifier.is_some())
            .finish()
    }
}

impl RequestContext {
    /// A context whose notifications go to `notifier`.
    pub fn new(progress_token: Option<Value>, notifier: Option<Arc<dyn Notify>>) -> Self {
        Self {
            progress_token,
            notifier,
        }
    }

    /// True when the client asked for progress (sent a `progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some()
    }

    /// Reports progress. Does nothing when the client sent no `progressToken` or the
    /// response is not streamed.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> Result<(), NotifyError> {
        let (Some(token), Some(notifier)) = (&self.progress_token, &self.notifier) else {
            return Ok(());
        };
        notifier
            .notify(progress_notification(
                token.clone(),
                progress,
                total,
                message,
            ))
            .await
    }
}
