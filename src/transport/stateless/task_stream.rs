//! `tasks/stream` (SEP-2694): a task's events as an SSE stream, each a
//! `notifications/tasks/event`, ending with the task's terminal status event and then
//! the request's (empty) result. The events come from the task's log in the store
//! ([`crate::tasks::TaskHandle::follow`]), so a reader cut anywhere resumes with `after`
//! on any replica and gets exactly what followed.
//!
//! A stream that stops without its result (the server shuts down, the store fails, the
//! task's record expires, the reader fell so far behind that the log's caps evicted its
//! next event) is a cut like any other: it ends with a `retry:` hint, as a GET stream the
//! server closes does, and the client resumes with `after` = the last seq it got.
//!
//! Slow readers are bounded as GET streams are: what the connection holds is weighed in
//! its byte budget (`sse.stream_buffer_bytes`) from the follower to the socket, replay is
//! read a page at a time as the reader takes it, and a reader that reads nothing is cut
//! after `server.write_timeout` ([`crate::transport::stall`]).

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::task_readers::Reader;
use super::AppState;
use crate::auth::Principal;
use crate::protocol::meta::RequestMeta;
use crate::protocol::Request;
use crate::server::TaskStream;
use crate::rt::budget::{ByteBudget, Reserved};
use crate::stream::{SseBody, sse};
use crate::tasks::Followed;
use crate::tasks::events::TaskEvent;
use crate::telemetry::metrics::{CONNECTIONS_CUT, Cut, STREAMS_OPEN, StreamKind};

/// Frames queued toward the socket, within the byte budget: the follower waits while
/// they are full.
const FRAMES: usize = 16;

/// Serves `tasks/stream`: an error as JSON, or the stream.
pub(super) async fn serve(
    state: &AppState,
    request: Request,
    meta: &RequestMeta,
    principal: Option<&Principal>,
) -> Response {
    let inner = &state.inner;
    let budget = ByteBudget::new(inner.config.sse.stream_buffer_bytes.get());
    let stream = match inner
        .server
        .task_stream(&request, meta, principal, budget)
        .await
    {
        Ok(stream) => stream,
        Err(error) => return super::refused(request.id, error),
    };
    let readers = inner.task_readers.clone();
    let reader = readers.join(stream.task_id()).await;
    let (tx, rx) = mpsc::channel(FRAMES);
    let pump = Pump {
        frames: tx,
        stream,
        keepalive: inner.config.sse.keepalive_interval.get(),
        retry: inner.config.sse.retry_timeout,
        shutdown: inner.shutdown.clone(),
    };
    tokio::spawn(async move {
        let reader = pump.run(reader).await;
        readers.leave(reader).await;
    });
    super::super::sse_response(Body::new(SseBody::weighed(rx)))
}

/// Turns what the follower hands over into SSE frames, with keep-alive comments.
struct Pump {
    /// Frames with their weight in the byte budget (none for the server's own comments).
    frames: mpsc::Sender<(Bytes, Option<Reserved>)>,
    stream: TaskStream,
    keepalive: std::time::Duration,
    /// `sse.retry_timeout`: the `retry:` hint of a stream cut on purpose.
    retry: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Pump {
    /// Runs until the stream ends; gives `reader` back for the table.
    async fn run(mut self, mut reader: Reader) -> Reader {
        self.follow(&mut reader).await;
        reader
    }

    async fn follow(&mut self, reader: &mut Reader) {
        let _open = STREAMS_OPEN.track(StreamKind::Stateless);
        let mut ticks = super::keepalive(self.keepalive);
        loop {
            let frame = tokio::select! {
                next = self.stream.followed.recv() => match next {
                    Some(Followed::Events(events, held)) => {
                        (self.frames_of(&events), Some(held))
                    }
                    Some(Followed::End) => {
                        let end = sse::message(None, &self.stream.end().to_bytes());
                        let _ = self.frames.send((end, None)).await;
                        return;
                    }
                    // Stopped without the end: the client resumes.
                    None => return self.cut(),
                },
                _ = ticks.tick() => (sse::comment("keepalive"), None),
                () = self.shutdown.cancelled() => return self.cut(),
                // A newer connection to this task, past `sse.max_connections_per_stream`.
                () = reader.cut() => {
                    CONNECTIONS_CUT.inc(Cut::Superseded);
                    return self.cut();
                }
                () = self.frames.closed() => return,
            };
            if self.frames.send(frame).await.is_err() {
                return;
            }
        }
    }

    /// One `notifications/tasks/event` frame per event, in one buffer (a replayed page is
    /// one write), with the stored bytes spliced in as they are.
    fn frames_of(&self, events: &[TaskEvent]) -> Bytes {
        let each = self.stream.overhead();
        let bytes: usize = events.iter().map(|e| e.len() + each).sum();
        let mut out = Vec::with_capacity(bytes);
        for event in events {
            sse::push_message(&mut out, |data| {
                self.stream.push_event(data, event);
            });
        }
        Bytes::from(out)
    }

    /// Ends the stream without its result, telling the client when to resume.
    fn cut(&self) {
        // Best effort: a full queue means the client is not reading anyway.
        let _ = self.frames.try_send((sse::retry(self.retry), None));
    }
}
