//! A streamed request's outbox: stores its notifications and requests on its stream, and
//! waits for the client's answers, which arrive by POST through the session manager.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::SetOnce;

use crate::event_store::EventStoreHandle;
use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::ids::StreamKey;
use crate::news::{NewsHub, ServerNews};
use crate::protocol::methods::{ListKind, ServerRequest, log_notification, progress_notification};
use crate::protocol::{Outgoing, Request};
use crate::session::SessionHandle;

/// Opened once the request's stream has a connection following it. The handler's first
/// poll runs before that (most handlers answer at once, and then no connection is needed
/// at all); a handler that uses its outbox meanwhile waits here, so nothing it sends can
/// reach the store ahead of the connection's subscription.
pub(super) type StreamReady = Arc<SetOnce<()>>;

/// Where a streamed request's messages go.
pub(super) struct StreamOutbox {
    pub(super) store: EventStoreHandle,
    pub(super) sessions: SessionHandle,
    pub(super) key: StreamKey,
    /// `server.client_request_timeout`.
    pub(super) timeout: Duration,
    /// The client polls (2025-11-25), so its connection may be closed early.
    pub(super) polls: bool,
    pub(super) ready: StreamReady,
    /// Where resource updates reach `subscriptions/listen` streams too.
    pub(super) news: NewsHub,
}

impl StreamOutbox {
    async fn opened(&self) {
        self.ready.wait().await;
    }
}

impl Outbox for StreamOutbox {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        Box::pin(async move {
            self.opened().await;
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
            };
            let payload = Outgoing::Notification(notification).to_bytes();
            self.store
                .append(self.key, payload, false)
                .await
                .map(|_| ())
                .map_err(|e| NotifyError(e.to_string()))
        })
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        Box::pin(async move {
            self.opened().await;
            let unavailable =
                |e: &dyn std::fmt::Display| ClientRequestError::Unavailable(e.to_string());
            let (id, answer) = self
                .sessions
                .open_client_request(self.key.session)
                .await
                .map_err(|e| unavailable(&e))?;
            let payload = Outgoing::Request(Request {
                id,
                method: request.method,
                params: request.params,
            })
            .to_bytes();
            self.store
                .append(self.key, payload, false)
                .await
                .map_err(|e| unavailable(&e))?;
            match tokio::time::timeout(self.timeout, answer).await {
                Ok(Ok(Ok(result))) => Ok(result),
                Ok(Ok(Err(error))) => Err(ClientRequestError::Rejected(error)),
                Ok(Err(_)) => Err(ClientRequestError::Unavailable("the session ended".into())),
                Err(_) => Err(ClientRequestError::Timeout),
            }
        })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(async move {
            self.news
                .publish(ServerNews::ResourceUpdated { uri: uri.clone() });
            self.sessions
                .notify_resource_updated(&uri)
                .await
                .map_err(|e| NotifyError(e.to_string()))
        })
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(async move {
            self.news.publish(ServerNews::ListChanged { list: kind });
            self.sessions
                .list_changed(kind)
                .await
                .map_err(|e| NotifyError(e.to_string()))
        })
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            if !self.polls {
                return false;
            }
            self.opened().await;
            self.store.disconnect(self.key).await.unwrap_or(false)
        })
    }
}
