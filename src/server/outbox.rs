//! Outboxes that store nothing: a request's notes go live down a bounded pipe to its
//! client ([`PipeOutbox`]: a stateless response stream, stdout), and what a handler
//! announces reaches sessions and listen streams ([`Announcer`]). A session's stored
//! stream has an outbox of its own in the transport.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::protocol::methods::{ListKind, ServerRequest, log_notification, progress_notification};
use crate::protocol::{Notification, Outgoing};
use crate::server_news::{NewsHub, ServerNews};
use crate::session::SessionHandle;

/// Tells sessions and listen streams what changed: the same for a session's request and
/// a stateless one.
#[derive(Debug, Clone)]
pub(crate) struct Announcer {
    news: NewsHub,
    sessions: SessionHandle,
}

impl super::McpServer {
    /// What tells this server's listen streams and `sessions` of changes.
    pub(crate) fn announcer(&self, sessions: SessionHandle) -> Announcer {
        Announcer {
            news: self.news().clone(),
            sessions,
        }
    }
}

impl Announcer {
    /// Resource `uri` changed: listeners that named it, and subscribed sessions.
    pub(crate) async fn resource_updated(&self, uri: String) -> Result<usize, NotifyError> {
        self.news
            .publish(ServerNews::ResourceUpdated { uri: uri.clone() });
        self.sessions
            .notify_resource_updated(&uri)
            .await
            .map_err(|e| NotifyError(e.to_string()))
    }

    /// List `kind` changed: listeners that asked, and the sessions offered it.
    pub(crate) async fn list_changed(&self, kind: ListKind) -> Result<usize, NotifyError> {
        self.news.publish(ServerNews::ListChanged { list: kind });
        self.sessions
            .list_changed(kind)
            .await
            .map_err(|e| NotifyError(e.to_string()))
    }
}

/// A note as the JSON-RPC notification it becomes.
pub(crate) fn note_payload(note: Note) -> bytes::Bytes {
    let notification = match note {
        Note::Progress {
            token,
            progress,
            total,
            message,
        } => progress_notification(token, progress, total, message),
        Note::Log {
            level,
            logger,
            data,
        } => log_notification(level, logger.as_deref(), data),
        Note::Custom { method, params } => Notification {
            method,
            params: Some(params),
        },
    };
    Outgoing::Notification(notification).to_bytes()
}

/// Carries a request's questions to the client, where its connection can (stdio's
/// session).
pub(crate) trait Asking: Send + Sync {
    /// Sends `request` to the client; resolves with its answer.
    fn ask(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>>;
}

/// Where the notes of a request answered live go: down a bounded pipe to its client.
pub(crate) struct PipeOutbox {
    pub(crate) notes: mpsc::Sender<Bytes>,
    /// Who carries its questions; `None`: it cannot ask (a 2026-07-28 request's
    /// questions end its round with `input_required` instead).
    pub(crate) asker: Option<Arc<dyn Asking>>,
    /// What a closed pipe means, for the handler's error.
    pub(crate) closed: &'static str,
    pub(crate) announce: Announcer,
}

impl Outbox for PipeOutbox {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        Box::pin(async move {
            // Bounded: a handler that sends faster than the client reads waits here.
            self.notes
                .send(note_payload(note))
                .await
                .map_err(|_| NotifyError(self.closed.into()))
        })
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        match &self.asker {
            Some(asker) => asker.ask(request),
            None => Box::pin(async {
                Err(ClientRequestError::Unavailable(
                    "this request cannot ask the client anything (only tools/call, prompts/get and resources/read can)".into(),
                ))
            }),
        }
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.list_changed(kind))
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        // Nothing to poll back to.
        Box::pin(async { false })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.resource_updated(uri))
    }
}
