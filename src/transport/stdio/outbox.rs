//! A stdio session's questions to the client: they go through the connection, which
//! numbers them and routes the answers back. (Notes go straight to stdout: nothing is
//! stored, a stdio connection cannot be resumed.)

use std::time::Duration;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::handler::{BoxFuture, ClientRequestError};
use crate::protocol::ErrorObject;
use crate::protocol::methods::ServerRequest;
use crate::server::Asking;

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

    async fn ask_client(&self, request: ServerRequest) -> Result<Value, ClientRequestError> {
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

impl Asking for Asker {
    fn ask(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        Box::pin(self.ask_client(request))
    }
}
