//! The stdio transport: MCP as newline-delimited JSON-RPC on stdin and stdout, the form
//! desktop and IDE clients use when they start a server as a subprocess.
//!
//! One client, one connection, both eras, the same handlers and runtime as HTTP:
//! - a 2025-11-25 client's `initialize` opens the connection's session: its log level,
//!   subscriptions and list-change notifications live here, and a handler's questions
//!   (elicitation, sampling, roots) go to the client as requests whose answers come back
//!   on stdin;
//! - a request naming revision 2026-07-28 in `params._meta` is served as over HTTP
//!   statelessly (`server/discover`, `input_required` rounds, tasks, `tasks/stream`,
//!   `subscriptions/listen`).
//!
//! Nothing is stored for the connection (it cannot be resumed), so a note goes straight to
//! stdout. A [`Connection`] owns the state: running requests, questions awaiting answers,
//! the session; requests run in tasks of their own and reach it by [`Command`]s. Logs go
//! to stderr. End of input is a graceful stop: running requests get
//! `server.shutdown_timeout`, then the caller stops the tree.

mod lines;
mod outbox;

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a note's handler is told when stdout is gone.
const STDOUT_CLOSED: &str = "the client closed stdout";
use crate::config::Config;
use crate::handler::BoxFuture;
use crate::protocol::envelope::parse;
use crate::protocol::meta::{self, RequestMeta};
use crate::protocol::{ErrorObject, Outgoing, Request, RequestId};
use crate::server::{
    Announcer, Arrival, Asking, Call, Exchange, McpServer, Opening, PipeOutbox, Refused, Step,
    Streaming, Told, guarded,
};
use crate::server_news::Heard;
use crate::session::{LocalSession, SessionHandle};
use crate::telemetry::durations::Carrier;
use crate::telemetry::operation::{Operation, Outcome};
use lines::Line;
pub(crate) use lines::standard_streams;
use outbox::{Asker, Command};

/// Lines read ahead of dispatch.
const LINES_AHEAD: usize = 16;

/// What the stdio transport serves with.
#[derive(Debug)]
pub(crate) struct StdioParts {
    /// The method table.
    pub(crate) server: Arc<McpServer>,
    /// Limits: `server.max_body_bytes` per line, `server.max_open_per_session` requests
    /// and questions at once, `server.client_request_timeout`, `server.shutdown_timeout`.
    pub(crate) config: Arc<Config>,
    /// Sessions of other transports, told of changes a handler announces.
    pub(crate) sessions: SessionHandle,
}

/// Serves MCP on `input` and `output` until input ends or `stop` resolves, then gives
/// running requests up to `server.shutdown_timeout` and returns once everything they
/// wrote is flushed.
pub(crate) async fn serve(
    parts: StdioParts,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
    stop: impl std::future::Future<Output = ()>,
) {
    let config = parts.config.clone();
    let (out, outgoing) = mpsc::channel(config.sse.stream_buffer.get());
    let finished = CancellationToken::new();
    let writer = tokio::spawn(lines::write_lines(output, outgoing, finished.clone()));
    let (line_tx, lines) = mpsc::channel(LINES_AHEAD);
    // Not awaited: a read of stdin cannot be cancelled, and the process exits after.
    let reader = tokio::spawn(lines::read_lines(
        input,
        config.server.max_body_bytes,
        line_tx,
    ));
    let (command_tx, commands) = mpsc::channel(config.server.max_open_per_session.get() as usize);
    let announce = parts.server.announcer(parts.sessions);
    let mut connection = Connection {
        news: Some(parts.server.news().subscribe()),
        server: parts.server,
        asker: Arc::new(Asker::new(
            command_tx,
            config.server.client_request_timeout.get(),
        )),
        config,
        announce,
        out,
        session: None,
        running: HashMap::new(),
        asked: HashMap::new(),
        next_ask: 0,
        work: JoinSet::new(),
        closing: CancellationToken::new(),
        stop_all: CancellationToken::new(),
    };
    connection.run(lines, commands, stop).await;
    reader.abort();
    drop(connection);
    finished.cancel();
    match writer.await {
        Ok(Err(e)) => tracing::debug!(error = %e, "stdout closed"),
        Err(e) => tracing::error!(error = %e, "the stdout writer failed"),
        Ok(Ok(())) => {}
    }
}

/// The connection's state, owned by the loop in [`Connection::run`].
struct Connection {
    server: Arc<McpServer>,
    config: Arc<Config>,
    announce: Announcer,
    /// Toward stdout (bounded: a client that does not read stalls the writers).
    out: mpsc::Sender<Bytes>,
    asker: Arc<dyn Asking>,
    /// The session a 2025-11-25 client's `initialize` opened.
    session: Option<LocalSession>,
    /// Requests running, by id, each with its cancellation.
    running: HashMap<RequestId, CancellationToken>,
    /// Questions to the client awaiting its answer.
    asked: HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>,
    next_ask: u64,
    work: JoinSet<RequestId>,
    news: Option<broadcast::Receiver<Heard>>,
    /// Cancelled when the stop begins: long-lived requests end with their result.
    closing: CancellationToken,
    /// Cancelled when the grace ends: whatever still runs is dropped.
    stop_all: CancellationToken,
}

/// What woke the loop.
enum Event {
    Line(Option<Line>),
    Stop,
    Command(Command),
    Finished(Result<RequestId, tokio::task::JoinError>),
    News(Result<Heard, broadcast::error::RecvError>),
    OutputClosed,
}

impl Connection {
    async fn run(
        &mut self,
        mut lines: mpsc::Receiver<Line>,
        mut commands: mpsc::Receiver<Command>,
        stop: impl std::future::Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        loop {
            let event = tokio::select! {
                line = lines.recv() => Event::Line(line),
                () = &mut stop => Event::Stop,
                Some(command) = commands.recv() => Event::Command(command),
                Some(done) = self.work.join_next() => Event::Finished(done),
                heard = next_news(&mut self.news) => Event::News(heard),
                () = self.out.closed() => Event::OutputClosed,
            };
            match event {
                Event::Line(Some(Line::Message(bytes))) => self.on_message(&bytes).await,
                Event::Line(Some(Line::TooLong)) => {
                    let error = ErrorObject::new(
                        ErrorObject::INVALID_REQUEST,
                        format!(
                            "Invalid request: the line is longer than server.max_body_bytes ({} bytes)",
                            self.config.server.max_body_bytes
                        ),
                    );
                    self.send(Outgoing::Error { id: None, error }).await;
                }
                Event::Line(None) | Event::Stop | Event::OutputClosed => break,
                Event::Command(command) => self.on_command(command).await,
                Event::Finished(done) => self.finished(done),
                Event::News(heard) => self.on_news(heard).await,
            }
        }
        self.drain(commands).await;
    }

    /// Ends the connection: long-lived requests end now, the others get up to
    /// `server.shutdown_timeout`. No answer to a question can come any more.
    async fn drain(&mut self, mut commands: mpsc::Receiver<Command>) {
        self.closing.cancel();
        self.asked.clear();
        let grace = tokio::time::sleep(self.config.server.shutdown_timeout);
        tokio::pin!(grace);
        loop {
            tokio::select! {
                done = self.work.join_next() => match done {
                    Some(done) => self.finished(done),
                    None => break,
                },
                // Dropping the reply tells the handler the client cannot answer.
                Some(Command::Ask { .. }) = commands.recv() => {}
                () = &mut grace => {
                    tracing::warn!(requests = self.running.len(), "stdio: requests still running at the end of server.shutdown_timeout; dropping them");
                    break;
                }
            }
        }
        self.stop_all.cancel();
        self.work.shutdown().await;
    }

    async fn send(&self, message: Outgoing) {
        // A closed stdout ends the loop; nothing to do here.
        let _ = self.out.send(message.to_bytes()).await;
    }

    async fn answer(
        &self,
        id: RequestId,
        result: Result<Value, ErrorObject>,
        op: Option<Operation>,
    ) {
        let answer = match result {
            Ok(result) => Outgoing::Result { id, result },
            Err(error) => Outgoing::Error {
                id: Some(id),
                error,
            },
        };
        if let Some(op) = op {
            op.answered(&answer);
        }
        self.send(answer).await;
    }

    async fn on_message(&mut self, bytes: &[u8]) {
        let message = match parse(bytes) {
            Ok(message) => message,
            Err(failure) => {
                let answer = Outgoing::Error {
                    id: failure.id,
                    error: failure.error,
                };
                return self.send(answer).await;
            }
        };
        let mut exchange = self.server.exchange(message);
        let op = exchange.operation(Arrival {
            version: None,
            carrier: Carrier::Stdio,
            local: None,
            context: || None,
        });
        match exchange {
            Exchange::Call(call) => self.on_request(call, op).await,
            Exchange::Told(told) => {
                if let Told::Cancel(id, _) = told
                    && let Some(cancel) = self.running.get(&id)
                {
                    cancel.cancel();
                }
                if let Some(op) = op {
                    op.finish(Outcome::Ok);
                }
            }
            Exchange::Answer { id, outcome } => match self.asked.remove(&id) {
                Some(reply) => {
                    let _ = reply.send(outcome);
                }
                None => tracing::debug!(%id, "stdio: an answer to no question of ours"),
            },
        }
    }

    async fn on_request(&mut self, call: Call, op: Option<Operation>) {
        if meta::names_version(call.request()) {
            return self.stateless(call, op).await;
        }
        let id = call.id().clone();
        match (call.opening(), &self.session) {
            (Opening::Opens, None) => {
                let answer = call.initialize().map(|(result, new)| {
                    self.session = Some(LocalSession::open(new.client_capabilities, new.lists));
                    result
                });
                self.answer(id, answer, op).await
            }
            (Opening::Opens, Some(_)) => {
                let error = ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    "Invalid request: the session is already initialized",
                );
                self.answer(id, Err(error), op).await
            }
            (Opening::Free, _) | (_, Some(_)) => self.session_request(call, op).await,
            (Opening::Within, None) => {
                let error = ErrorObject::new(
                    ErrorObject::INVALID_REQUEST,
                    "Invalid request: send initialize first, or name protocol revision 2026-07-28 in params._meta",
                );
                self.answer(id, Err(error), op).await
            }
        }
    }

    /// A request of the session `initialize` opened (or a `ping`).
    async fn session_request(&mut self, call: Call, op: Option<Operation>) {
        // Applied before the handler answers, as over HTTP.
        if let (Some(effect), Some(session)) = (call.effect(), &mut self.session)
            && let Err(full) = session.apply(effect.clone())
        {
            let error = ErrorObject::invalid_params(format!("Invalid params: {full}"));
            return self.answer(call.id().clone(), Err(error), op).await;
        }
        let outbox = PipeOutbox {
            notes: self.out.clone(),
            asker: Some(self.asker.clone()),
            closed: STDOUT_CLOSED,
            announce: self.announce.clone(),
        };
        let mut ctx = call.context(Some(Arc::new(outbox)));
        if let Some(session) = &self.session {
            ctx = ctx
                .with_client_capabilities(session.capabilities.clone())
                .with_log_level(session.log.clone());
        }
        let id = call.id().clone();
        self.spawn(id, Box::pin(call.run(ctx)), op).await;
    }

    /// A 2026-07-28 request: its `_meta` says who the client is and what it can do.
    async fn stateless(&mut self, call: Call, op: Option<Operation>) {
        let meta = match RequestMeta::read(call.request())
            .and_then(|meta| meta.check_revision().map(|()| meta))
        {
            Ok(meta) => meta,
            Err(error) => return self.answer(call.id().clone(), Err(error), op).await,
        };
        let id = call.id().clone();
        let out = self.out.clone();
        let work: BoxFuture<'static, Outgoing> = if call.streams() {
            let closing = self.closing.clone();
            Box::pin(async move {
                match call.open_stream(&meta, None, line, closing).await {
                    Ok(streaming) => drive(streaming, out).await,
                    Err(Refused::Request(answer) | Refused::Busy(answer)) => answer,
                }
            })
        } else {
            let outbox = PipeOutbox {
                notes: out,
                asker: None,
                closed: STDOUT_CLOSED,
                announce: self.announce.clone(),
            };
            let ctx = call
                .context(Some(Arc::new(outbox)))
                .with_client_capabilities(meta.client_capabilities.clone())
                .with_request_log_level(meta.log_level);
            Box::pin(async move { call.run_stateless(&meta, ctx).await })
        };
        self.spawn(id, work, op).await;
    }

    /// Runs request `id`'s `work` in a task of its own, a panic contained, cancelled by
    /// the client's `notifications/cancelled` (then nothing is answered, as the spec asks)
    /// or at the end of the stop's grace. At most `server.max_open_per_session` at once.
    async fn spawn(
        &mut self,
        id: RequestId,
        work: BoxFuture<'static, Outgoing>,
        op: Option<Operation>,
    ) {
        let refuse = |message: String| Err(ErrorObject::new(ErrorObject::INVALID_REQUEST, message));
        if self.running.contains_key(&id) {
            let error = refuse(format!(
                "Invalid request: request id {id} is already in use"
            ));
            return self.answer(id, error, op).await;
        }
        let max = self.config.server.max_open_per_session.get() as usize;
        if self.running.len() >= max {
            let error = refuse(format!(
                "Invalid request: {max} requests are already running (server.max_open_per_session)"
            ));
            return self.answer(id, error, op).await;
        }
        let cancel = self.stop_all.child_token();
        self.running.insert(id.clone(), cancel.clone());
        let out = self.out.clone();
        self.work.spawn(async move {
            let answer = tokio::select! {
                answer = guarded(id.clone(), work) => Some(answer),
                () = cancel.cancelled() => None,
            };
            // Dropped unanswered, the operation ends as cancelled.
            if let Some(answer) = answer {
                if let Some(op) = op {
                    op.answered(&answer);
                }
                let _ = out.send(answer.to_bytes()).await;
            }
            id
        });
    }

    async fn on_command(&mut self, command: Command) {
        match command {
            Command::Ask { request, reply } => {
                // Questions whose handler gave up (timed out, cancelled) are forgotten.
                self.asked.retain(|_, reply| !reply.is_closed());
                if self.asked.len() >= self.config.server.max_open_per_session.get() as usize {
                    let _ = reply.send(Err(ErrorObject::internal(
                        "too many questions to the client are unanswered (server.max_open_per_session)",
                    )));
                    return;
                }
                let id = RequestId::String(format!("otpmcp-stdio-{}", self.next_ask));
                self.next_ask += 1;
                self.asked.insert(id.clone(), reply);
                self.send(Outgoing::Request(Request::new(
                    id,
                    request.method,
                    request.params,
                )))
                .await;
            }
        }
    }

    fn finished(&mut self, done: Result<RequestId, tokio::task::JoinError>) {
        match done {
            Ok(id) => {
                self.running.remove(&id);
            }
            // Panics are caught inside; an abort happens only at the end.
            Err(e) => tracing::error!(error = %e, "stdio: a request's task failed"),
        }
    }

    /// Tells the session of list changes and updates of the resources it subscribed to.
    async fn on_news(&mut self, heard: Result<Heard, broadcast::error::RecvError>) {
        let heard = match heard {
            Ok(heard) => heard,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::info!(missed, "stdio: server news fell behind");
                return;
            }
            Err(broadcast::error::RecvError::Closed) => {
                self.news = None;
                return;
            }
        };
        let Some(session) = &self.session else {
            return;
        };
        if let Some(notification) = session.told(&heard.news) {
            self.send(Outgoing::Notification(notification)).await;
        }
    }
}

/// One message as a line (how the server frames a message for stdio): the writer
/// ends each buffer with a newline, so messages in one buffer are joined by one.
fn line(out: &mut Vec<u8>, message: &mut dyn FnMut(&mut Vec<u8>)) {
    if !out.is_empty() {
        out.push(b'\n');
    }
    message(out);
}

/// Writes what a streaming reply sends as lines; its answer (or the error of a cut) is
/// the request's answer. A client ends it early with `notifications/cancelled`.
async fn drive(mut streaming: Streaming, out: mpsc::Sender<Bytes>) -> Outgoing {
    loop {
        match std::future::poll_fn(|cx| streaming.poll_step(cx)).await {
            Some(Step::Frames(bytes, held)) => {
                if out.send(bytes).await.is_err() {
                    return streaming.lost(STDOUT_CLOSED);
                }
                // Weighed until handed to the writer, as over HTTP.
                drop(held);
            }
            Some(Step::Answer(answer) | Step::Cut(answer)) => return answer,
            None => return streaming.lost("the stream ended without an answer"),
        }
    }
}

/// The next news, or never once the hub is gone.
async fn next_news(
    news: &mut Option<broadcast::Receiver<Heard>>,
) -> Result<Heard, broadcast::error::RecvError> {
    match news {
        Some(news) => news.recv().await,
        None => std::future::pending().await,
    }
}
