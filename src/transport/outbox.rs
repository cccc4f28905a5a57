//! The outbox of a session's streamed request ([`StreamOutbox`]): it stores its
//! notifications and requests on its stream and waits for the client's answers, which
//! arrive by POST through the session manager. (A request whose notes go live down a
//! pipe uses the server's [`PipeOutbox`], which stores nothing.)

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::SetOnce;

use crate::event_store::{EventStoreHandle, StreamWriter};
use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::ids::StreamKey;
use crate::protocol::methods::{ListKind, ServerRequest};
use crate::protocol::{Outgoing, Request};
use crate::server::{Announcer, note_payload};
use crate::session::SessionHandle;

/// Opened once the request's stream has a connection following it. The handler's first
/// poll runs before that (most handlers answer at once, and then no connection is needed
/// at all); a handler that uses its outbox meanwhile waits here, so nothing it sends can
/// reach the store ahead of the connection's subscription.
pub(super) type StreamReady = Arc<SetOnce<()>>;

/// Where a streamed request's messages go.
pub(super) struct StreamOutbox {
    pub(super) store: EventStoreHandle,
    /// The request's stream, with a few appends in flight: a handler streaming
    /// notifications does not wait for each to be stored (on Redis, a round trip each).
    pub(super) writer: tokio::sync::Mutex<StreamWriter>,
    pub(super) sessions: SessionHandle,
    pub(super) key: StreamKey,
    /// `server.client_request_timeout`.
    pub(super) timeout: Duration,
    /// The client polls (2025-11-25), so its connection may be closed early.
    pub(super) polls: bool,
    pub(super) ready: StreamReady,
    pub(super) announce: Announcer,
}

impl StreamOutbox {
    async fn opened(&self) {
        self.ready.wait().await;
    }

    /// Waits until everything the handler sent is stored: before the response, which
    /// must follow it on the stream. Returns the last position stored, for the response's
    /// append (see [`crate::event_store::NewEvent::after`]).
    pub(super) async fn flush(&self) -> u64 {
        let mut writer = self.writer.lock().await;
        if let Err(e) = writer.flush().await {
            tracing::debug!(error = %e, "a notification of this request was not stored");
        }
        writer.stored()
    }
}

impl Outbox for StreamOutbox {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        Box::pin(async move {
            self.opened().await;
            self.writer
                .lock()
                .await
                .write(note_payload(note))
                .await
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
            let payload =
                Outgoing::Request(Request::new(id, request.method, request.params)).to_bytes();
            {
                let mut writer = self.writer.lock().await;
                writer.write(payload).await.map_err(|e| unavailable(&e))?;
                writer.flush().await.map_err(|e| unavailable(&e))?;
            }
            match tokio::time::timeout(self.timeout, answer).await {
                Ok(Ok(Ok(result))) => Ok(result),
                Ok(Ok(Err(error))) => Err(ClientRequestError::Rejected(error)),
                Ok(Err(_)) => Err(ClientRequestError::Unavailable("the session ended".into())),
                Err(_) => Err(ClientRequestError::Timeout),
            }
        })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.resource_updated(uri))
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.list_changed(kind))
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            if !self.polls {
                return false;
            }
            self.opened().await;
            // The connection writes what was stored before it closes.
            self.flush().await;
            self.store.disconnect(self.key).await.unwrap_or(false)
        })
    }
}
