//! The client's stdio link: newline-delimited JSON-RPC written to the server's input and
//! read from its output, one request at a time; the server either runs in this process
//! on pipes ([`crate::serve_io`]) or is whatever the reader and writer lead to.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, Lines};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use super::{ClientError, Exchange};
use crate::app::StartError;
use crate::config::Config;
use crate::server::McpServer;
use crate::supervisor::Exit;

type Reader = Box<dyn AsyncRead + Unpin + Send>;
type Writer = Box<dyn AsyncWrite + Unpin + Send>;

/// The two ends the client speaks through.
pub(super) struct Pipes {
    input: Option<Writer>,
    output: Lines<BufReader<Reader>>,
}

impl Pipes {
    pub(super) fn new(
        reader: impl AsyncRead + Unpin + Send + 'static,
        writer: impl AsyncWrite + Unpin + Send + 'static,
    ) -> Self {
        let reader: Reader = Box::new(reader);
        Self {
            input: Some(Box::new(writer)),
            output: BufReader::new(reader).lines(),
        }
    }
}

/// Pipe buffers of the in-process server: big enough that a burst of notifications
/// does not stall it while the client is between reads.
const PIPE_BYTES: usize = 1 << 20;

/// A server over stdio.
pub(super) struct StdioLink {
    pipes: Mutex<Pipes>,
    /// The in-process server, when the client started it.
    served: Option<JoinHandle<Result<Exit, StartError>>>,
    timeout: Duration,
}

impl StdioLink {
    pub(super) fn new(
        pipes: Pipes,
        served: Option<JoinHandle<Result<Exit, StartError>>>,
        timeout: Duration,
    ) -> Self {
        Self {
            pipes: Mutex::new(pipes),
            served,
            timeout,
        }
    }

    /// Starts `server` over stdio on in-memory pipes.
    pub(super) fn serve(config: Config, server: McpServer, timeout: Duration) -> Self {
        let (client_in, server_in) = tokio::io::duplex(PIPE_BYTES);
        let (server_out, client_out) = tokio::io::duplex(PIPE_BYTES);
        let served = tokio::spawn(crate::app::serve_io(
            config,
            server,
            server_in,
            server_out,
            std::future::pending(),
        ));
        Self::new(Pipes::new(client_out, client_in), Some(served), timeout)
    }

    /// Writes one message.
    pub(super) async fn send(&self, method: &str, body: &Value) -> Result<(), ClientError> {
        let mut pipes = self.pipes.lock().await;
        write(&mut pipes, method, body).await
    }

    /// Sends request `id` and reads lines to its answer; what came before it are its
    /// notes.
    pub(super) async fn exchange(
        &self,
        id: i64,
        method: &str,
        body: &Value,
    ) -> Result<Exchange, ClientError> {
        let mut pipes = self.pipes.lock().await;
        write(&mut pipes, method, body).await?;
        let read = async {
            let mut notes = Vec::new();
            loop {
                let line = pipes
                    .output
                    .next_line()
                    .await
                    .map_err(|e| ClientError::Transport {
                        method: method.to_owned(),
                        detail: e.to_string(),
                    })?;
                let Some(line) = line else {
                    return Err(ClientError::Closed {
                        method: method.to_owned(),
                    });
                };
                let message: Value =
                    serde_json::from_str(&line).map_err(|e| ClientError::Malformed {
                        method: method.to_owned(),
                        detail: format!("{e}: {line}"),
                    })?;
                if message.get("method").is_none() && message["id"] == json!(id) {
                    return Ok(Exchange { message, notes });
                }
                notes.push(message);
            }
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .map_err(|_| ClientError::Timeout {
                method: method.to_owned(),
                timeout: self.timeout,
            })?
    }

    /// Closes the server's input; for an in-process server, waits for it to stop.
    pub(super) async fn close(self) -> Result<Option<Exit>, ClientError> {
        let mut pipes = self.pipes.into_inner();
        if let Some(mut input) = pipes.input.take() {
            // Flushing what was written; the server sees the end of its input on drop.
            let _ = input.shutdown().await;
        }
        let Some(served) = self.served else {
            return Ok(None);
        };
        // The server writes until it stops: read its output so that it never blocks.
        let drain = async { while let Ok(Some(_)) = pipes.output.next_line().await {} };
        let method = "close";
        let stopped = async {
            let (_, exit) = tokio::join!(drain, served);
            exit
        };
        let exit = tokio::time::timeout(self.timeout, stopped)
            .await
            .map_err(|_| ClientError::Timeout {
                method: method.to_owned(),
                timeout: self.timeout,
            })?
            .map_err(|e| ClientError::Transport {
                method: method.to_owned(),
                detail: e.to_string(),
            })??;
        Ok(Some(exit))
    }
}

async fn write(pipes: &mut Pipes, method: &str, body: &Value) -> Result<(), ClientError> {
    let Some(input) = pipes.input.as_mut() else {
        return Err(ClientError::Closed {
            method: method.to_owned(),
        });
    };
    let mut line = body.to_string().into_bytes();
    line.push(b'\n');
    let written = async {
        input.write_all(&line).await?;
        input.flush().await
    };
    written.await.map_err(|e| ClientError::Transport {
        method: method.to_owned(),
        detail: e.to_string(),
    })
}
