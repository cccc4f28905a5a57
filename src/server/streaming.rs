//! A reply that streams, whatever carries it: messages as they come, then the answer
//! that ends it, or a cut. `subscriptions/listen` and `tasks/stream` reply this way, and
//! so does a 2026-07-28 handler that sends notes before it answers. The transport only
//! frames what [`Streaming::poll_step`] hands it (the [`Framing`] it gives turns one
//! message into its bytes: an SSE event, a line) and decides what a cut looks like on
//! its wire; which method streams and how is decided here.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::{Call, Listen, McpServer, TaskStream};
use crate::auth::Principal;
use crate::config::Config;
use crate::handler::BoxFuture;
use crate::protocol::meta::RequestMeta;
use crate::protocol::methods::Method;
use crate::protocol::{ErrorObject, Outgoing, RequestId};
use crate::rt::budget::{ByteBudget, Reserved};
use crate::server_news::Heard;
use crate::tasks::{Followed, Reader, TaskReaders};
use crate::telemetry::metrics::{CONNECTIONS_CUT, Cut, StreamKind};

/// Appends one message to a buffer of the transport's frames: `message` writes the
/// JSON-RPC message itself.
pub(crate) type Framing = fn(out: &mut Vec<u8>, message: &mut dyn FnMut(&mut Vec<u8>));

/// What the streams of a server may hold: `[stateless] max_listen_streams`, and for a
/// `tasks/stream`, `[sse] max_connections_per_stream` readers of one task and
/// `stream_buffer_bytes` per reader.
#[derive(Debug, Clone)]
pub(crate) struct StreamLimits {
    max_listen: usize,
    listening: Arc<AtomicUsize>,
    readers: TaskReaders,
    budget_bytes: usize,
}

impl StreamLimits {
    /// The limits `config` sets; the table of task readers is started here (call it
    /// inside the runtime).
    pub(crate) fn from_config(config: &Config) -> Self {
        Self {
            max_listen: config.stateless.max_listen_streams.get(),
            listening: Arc::default(),
            readers: TaskReaders::start(config.sse.max_connections_per_stream.get()),
            budget_bytes: config.sse.stream_buffer_bytes.get(),
        }
    }
}

impl Default for StreamLimits {
    /// The defaults of [`Config`], with no table of task readers (so no bound on them).
    fn default() -> Self {
        let config = Config::default();
        Self {
            max_listen: config.stateless.max_listen_streams.get(),
            listening: Arc::default(),
            readers: TaskReaders::none(),
            budget_bytes: config.sse.stream_buffer_bytes.get(),
        }
    }
}

impl McpServer {
    /// Uses `limits` for its streaming replies (the runtime applies the configuration).
    pub(crate) fn with_stream_limits(mut self, limits: StreamLimits) -> Self {
        self.streams = limits;
        self
    }
}

/// Why a streaming request gets no stream: the error that answers it.
#[derive(Debug)]
pub(crate) enum Refused {
    /// The request is wrong or not allowed.
    Request(Outgoing),
    /// The server is at a limit; the client may try again later.
    Busy(Outgoing),
}

/// One step of a streaming reply.
#[derive(Debug)]
pub(crate) enum Step {
    /// One or more framed messages, with their weight in the reader's byte budget: keep
    /// it until the bytes are handed to the connection.
    Frames(Bytes, Option<Reserved>),
    /// The answer that ends the stream.
    Answer(Outgoing),
    /// The stream stopped without its answer (the server stops, the reader fell behind, a
    /// newer reader took its place): the client asks again, resuming where it was. The
    /// error is for a transport that must answer every request.
    Cut(Outgoing),
}

/// A reply that streams.
pub(crate) struct Streaming {
    source: Source,
    frame: Framing,
    id: RequestId,
    /// Cancelled when the transport stops: a listen ends with its result, a task stream
    /// is cut.
    closing: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    done: bool,
}

enum Source {
    /// A handler running here; its notes come first, then its answer.
    Answering {
        work: Option<BoxFuture<'static, Outgoing>>,
        notes: mpsc::Receiver<Bytes>,
        answer: Option<Outgoing>,
        /// A note taken while the transport waited for a quick answer: sent first.
        first: Option<Bytes>,
    },
    Listen {
        listen: Box<Listen>,
        acknowledged: bool,
        next: Option<Recv>,
        _admitted: Admitted,
    },
    Task {
        stream: Box<TaskStream>,
        reader: Reader,
    },
}

type Recv = BoxFuture<
    'static,
    (
        Result<Heard, broadcast::error::RecvError>,
        broadcast::Receiver<Heard>,
    ),
>;

fn recv(mut rx: broadcast::Receiver<Heard>) -> Recv {
    Box::pin(async move { (rx.recv().await, rx) })
}

/// One open listen stream, counted while it lives.
struct Admitted(Arc<AtomicUsize>);

impl Admitted {
    /// Counts one more stream, unless `max` are open.
    fn admit(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let before = open.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(open.clone()))
    }
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Call {
    /// Opens the stream that answers this 2026-07-28 request (one whose reply
    /// [`Call::streams`]) for `principal`, framing its messages with `frame`; it stops
    /// when `closing` is cancelled.
    pub(crate) async fn open_stream(
        self,
        meta: &RequestMeta,
        principal: Option<&Principal>,
        frame: Framing,
        closing: CancellationToken,
    ) -> Result<Streaming, Refused> {
        let (server, request) = self.into_parts();
        let refused = |error| Outgoing::Error {
            id: Some(request.id.clone()),
            error,
        };
        let limits = &server.streams;
        let source = match request.kind {
            Method::Listen => {
                let mut listen = server
                    .listen(&request, meta, principal)
                    .map_err(|e| Refused::Request(refused(e)))?;
                let Some(admitted) = Admitted::admit(&limits.listening, limits.max_listen) else {
                    return Err(Refused::Busy(refused(ErrorObject::internal(
                        "too many listen streams are open on this server (stateless.max_listen_streams); try again later",
                    ))));
                };
                Source::Listen {
                    next: listen.take_news().map(recv),
                    listen: Box::new(listen),
                    acknowledged: false,
                    _admitted: admitted,
                }
            }
            Method::TasksStream => {
                let budget = ByteBudget::new(limits.budget_bytes);
                let stream = server
                    .task_stream(&request, meta, principal, budget)
                    .await
                    .map_err(|e| Refused::Request(refused(e)))?;
                let reader = limits.readers.join(stream.task_id()).await;
                Source::Task {
                    stream: Box::new(stream),
                    reader,
                }
            }
            _ => {
                return Err(Refused::Request(refused(ErrorObject::internal(
                    "this method answers without a stream",
                ))));
            }
        };
        Ok(Streaming {
            source,
            frame,
            id: request.id,
            closing: Some(Box::pin(closing.cancelled_owned())),
            done: false,
        })
    }
}

impl Streaming {
    /// A handler's reply: the notes it sends (on `notes`) as they come, then its answer.
    /// `work` runs inside the stream, so dropping it drops the handler.
    pub(crate) fn answering(
        id: RequestId,
        work: BoxFuture<'static, Outgoing>,
        notes: mpsc::Receiver<Bytes>,
        frame: Framing,
    ) -> Self {
        Self {
            source: Source::Answering {
                work: Some(work),
                notes,
                answer: None,
                first: None,
            },
            frame,
            id,
            closing: None,
            done: false,
        }
    }

    /// What `otpmcp_streams_open` counts it as.
    pub(crate) fn kind(&self) -> StreamKind {
        match self.source {
            Source::Listen { .. } => StreamKind::Listen,
            Source::Answering { .. } | Source::Task { .. } => StreamKind::Stateless,
        }
    }

    /// The error a transport answers when it can no longer deliver the stream (`why`).
    pub(crate) fn lost(&self, why: &str) -> Outgoing {
        Outgoing::Error {
            id: Some(self.id.clone()),
            error: ErrorObject::internal(why.to_owned()),
        }
    }

    /// Runs a handler's reply here until it answers, sends a note, or `grace` passes: its
    /// answer, if it came first with no note before it (the common case, which a
    /// transport may send without a stream). Otherwise, and for every other kind of
    /// stream, `None`: the reply streams.
    pub(crate) async fn answer_within(&mut self, grace: Duration) -> Option<Outgoing> {
        let Source::Answering {
            work: Some(work),
            notes,
            first,
            ..
        } = &mut self.source
        else {
            return None;
        };
        // Most handlers answer on the first poll: no timer for them.
        let answer = match std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await {
            Poll::Ready(answer) => answer,
            Poll::Pending => tokio::select! {
                biased;
                answer = work.as_mut() => answer,
                note = notes.recv() => {
                    *first = note;
                    return None;
                }
                () = tokio::time::sleep(grace) => return None,
            },
        };
        let quiet = notes.is_empty();
        if let Source::Answering {
            work, answer: kept, ..
        } = &mut self.source
        {
            *work = None;
            if !quiet {
                *kept = Some(answer);
                return None;
            }
        }
        self.done = true;
        Some(answer)
    }

    /// The next step; `None` once the answer or the cut was handed over.
    pub(crate) fn poll_step(&mut self, cx: &mut Context<'_>) -> Poll<Option<Step>> {
        if self.done {
            return Poll::Ready(None);
        }
        // The acknowledgement comes first, whatever else happened.
        if let Source::Listen {
            acknowledged: false,
            ..
        } = self.source
        {
            return self.poll_source(cx).map(Some);
        }
        let step = match self.closing.as_mut().map(|c| c.as_mut().poll(cx)) {
            Some(Poll::Ready(())) => {
                self.closing = None;
                Poll::Ready(self.closed())
            }
            _ => self.poll_source(cx),
        };
        if let Poll::Ready(Step::Answer(_) | Step::Cut(_)) = &step {
            self.done = true;
        }
        step.map(Some)
    }

    /// The step when the transport stops.
    fn closed(&mut self) -> Step {
        match &self.source {
            Source::Listen { listen, .. } => Step::Answer(listen.result()),
            Source::Task { stream, .. } => Step::Cut(stream.cut("the server is stopping")),
            // Not reached: a handler's reply is not given `closing`.
            Source::Answering { .. } => Step::Cut(self.lost("the server is stopping")),
        }
    }

    fn poll_source(&mut self, cx: &mut Context<'_>) -> Poll<Step> {
        let frame = self.frame;
        let framed = |message: &[u8]| {
            let mut out = Vec::with_capacity(message.len() + 64);
            frame(&mut out, &mut |o| o.extend_from_slice(message));
            Step::Frames(Bytes::from(out), None)
        };
        match &mut self.source {
            Source::Answering {
                work,
                notes,
                answer,
                first,
            } => {
                if let Some(note) = first.take() {
                    return Poll::Ready(framed(&note));
                }
                // Notes first: everything the handler sent before its answer precedes it.
                if let Poll::Ready(Some(note)) = notes.poll_recv(cx) {
                    return Poll::Ready(framed(&note));
                }
                if let Some(running) = work
                    && let Poll::Ready(given) = running.as_mut().poll(cx)
                {
                    *work = None;
                    *answer = Some(given);
                }
                if work.is_some() {
                    return Poll::Pending;
                }
                // The handler is done: what it sent is queued; drain it, then answer.
                if let Ok(note) = notes.try_recv() {
                    return Poll::Ready(framed(&note));
                }
                Poll::Ready(match answer.take() {
                    Some(answer) => Step::Answer(answer),
                    None => Step::Cut(Outgoing::Error {
                        id: Some(self.id.clone()),
                        error: ErrorObject::internal("the handler gave no answer"),
                    }),
                })
            }
            Source::Listen {
                listen,
                acknowledged,
                next,
                ..
            } => {
                if !*acknowledged {
                    *acknowledged = true;
                    return Poll::Ready(framed(&listen.acknowledgement()));
                }
                while let Some(waiting) = next.as_mut() {
                    let Poll::Ready((heard, rx)) = waiting.as_mut().poll(cx) else {
                        return Poll::Pending;
                    };
                    *next = Some(recv(rx));
                    match heard {
                        Ok(heard) => {
                            if let Some(message) = listen.message(&heard.news) {
                                return Poll::Ready(framed(&message));
                            }
                        }
                        Err(broadcast::error::RecvError::Lagged(missed)) => {
                            // Changes were lost: the client listens again and re-reads
                            // what it cares about.
                            tracing::info!(missed, "a listen stream fell behind; ending it");
                            return Poll::Ready(Step::Cut(Outgoing::Error {
                                id: Some(listen.id().clone()),
                                error: ErrorObject::internal(format!(
                                    "{missed} changes were missed (stateless.listen_backlog); listen again and re-read what you depend on"
                                )),
                            }));
                        }
                        Err(broadcast::error::RecvError::Closed) => break,
                    }
                }
                Poll::Ready(Step::Answer(listen.result()))
            }
            Source::Task { stream, reader } => {
                if reader.poll_cut(cx).is_ready() {
                    CONNECTIONS_CUT.inc(Cut::Superseded);
                    return Poll::Ready(Step::Cut(
                        stream.cut("a newer reader of this task took this one's place"),
                    ));
                }
                let Poll::Ready(next) = stream.followed.poll_recv(cx) else {
                    return Poll::Pending;
                };
                Poll::Ready(match next {
                    Some(Followed::Events(events, held)) => {
                        // A page of events is one buffer: one write.
                        let each = stream.overhead();
                        let bytes = events.iter().map(|e| e.len() + each).sum();
                        let mut out = Vec::with_capacity(bytes);
                        for event in &events {
                            frame(&mut out, &mut |o| stream.push_event(o, event));
                        }
                        Step::Frames(Bytes::from(out), Some(held))
                    }
                    Some(Followed::End) => Step::Answer(stream.end()),
                    None => Step::Cut(stream.cut(
                        "the task's event log stopped (the store failed or the task expired)",
                    )),
                })
            }
        }
    }
}
