//! A stdio request's outbox: its notes go straight to stdout (nothing is stored: a stdio
//! connection cannot be resumed), and a session's questions to the client go through the
//! connection, which numbers them and routes the answers back.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::super::outbox::{Announcer, note_payload};
use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::protocol::ErrorObject;
use crate::protocol::methods::{ListKind, ServerRequest};

/// What running requests ask of the connection that owns the client's answers.
#[derive(Debug)]
pub(super) enum Command {
    /// Send `request` to the client and hand its answer to `reply`.
    Ask {
        request: ServerRequest,
        reply: oneshot::Sender<Result<Value, ErrorObject>>,
    },
}

/// Builds the connection's commands: the only maker of [`Command`]s.
#[derive(Debug, Clone)]
pub(super) struct Asker {
    commands: mpsc::Sender<Command>,
    timeout: Duration,
}

impl Asker {
    /// Asks through `commands`, waiting up to `timeout` (`server.client_request_timeout`)
    /// for each answer.
    pub(super) fn new(commands: mpsc::Sender<Command>, timeout: Duration) -> Self {
        Self { commands, timeout }
    }

    /// Sends `request` to the client; resolves with its answer.
    async fn ask(&self, request: ServerRequest) -> Result<Value, ClientRequestError> {
        let gone = || ClientRequestError::Unavailable("the client's input is closed".into());
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Ask { request, reply })
            .await
            .map_err(|_| gone())?;
        match tokio::time::timeout(self.timeout, answer).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(error))) => Err(ClientRequestError::Rejected(error)),
            Ok(Err(_)) => Err(gone()),
            Err(_) => Err(ClientRequestError::Timeout),
        }
    }
}

/// One request's outbox. `asker` is `None` for a 2026-07-28 request, which never waits
/// for the client (its questions end the round with `input_required` instead).
pub(super) struct StdioOutbox {
    pub(super) out: mpsc::Sender<Bytes>,
    pub(super) asker: Option<Asker>,
    pub(super) announce: Announcer,
}

impl Outbox for StdioOutbox {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        Box::pin(async move {
            // Bounded: a handler that writes faster than the client reads waits here.
            self.out
                .send(note_payload(note))
                .await
                .map_err(|_| NotifyError("the client closed stdout".into()))
        })
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        Box::pin(async move {
            match &self.asker {
                Some(asker) => asker.ask(request).await,
                None => Err(ClientRequestError::Unavailable(
                    "this request cannot ask the client anything (only tools/call, prompts/get and resources/read can)".into(),
                )),
            }
        })
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        // Nothing to poll back to: stdio is one connection for the process's life.
        Box::pin(async { false })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.resource_updated(uri))
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        Box::pin(self.announce.list_changed(kind))
    }
}
