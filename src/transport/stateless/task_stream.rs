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
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::task_readers::Reader;
use super::{AppState, error_response};
use crate::auth::Principal;
use crate::protocol::meta::{RequestMeta, TASKS_EXTENSION};
use crate::protocol::methods::TaskStreamParams;
use crate::protocol::{ErrorObject, Outgoing, Request, RequestId};
use crate::rt::budget::{ByteBudget, Reserved};
use crate::stream::{SseBody, sse};
use crate::tasks::Followed;
use crate::tasks::events::{EVENT_METHOD, TaskEvent};
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
    let Some(tasks) = inner.server.tasks() else {
        let error = ErrorObject::method_not_found(&request.method);
        return error_response(Some(request.id), error, StatusCode::NOT_FOUND);
    };
    if !meta.declares_tasks() {
        let error =
            ErrorObject::missing_capability(json!({ "extensions": { TASKS_EXTENSION: {} } }));
        return error_response(Some(request.id), error, StatusCode::BAD_REQUEST);
    }
    let params = match TaskStreamParams::read(&request) {
        Ok(params) => params,
        Err(error) => return error_response(Some(request.id), error, StatusCode::OK),
    };
    let budget = ByteBudget::new(inner.config.sse.stream_buffer_bytes.get());
    let followed = match tasks
        .follow(params.task_id, principal, params.after, budget)
        .await
    {
        Ok(followed) => followed,
        Err(e) => return error_response(Some(request.id), e.into(), StatusCode::OK),
    };
    let readers = inner.task_readers.clone();
    let reader = readers.join(params.task_id).await;
    let (tx, rx) = mpsc::channel(FRAMES);
    let pump = Pump {
        followed,
        frames: tx,
        task_json: Value::String(params.task_id.to_string()).to_string(),
        envelope: event_envelope(),
        id: request.id,
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

/// `notifications/tasks/event` up to its params, for [`push_event`].
pub(in crate::transport) fn event_envelope() -> String {
    format!(r#"{{"jsonrpc":"2.0","method":"{EVENT_METHOD}","params":"#)
}

/// Appends `event` of the task whose id is `task_json` (a JSON string) as one
/// `notifications/tasks/event` message, its stored bytes spliced in as they are.
pub(in crate::transport) fn push_event(
    out: &mut Vec<u8>,
    envelope: &str,
    task_json: &str,
    event: &TaskEvent,
) {
    out.extend_from_slice(envelope.as_bytes());
    event.write_params(task_json, out);
    out.push(b'}');
}

/// Turns what the follower hands over into SSE frames, with keep-alive comments.
struct Pump {
    followed: mpsc::Receiver<Followed>,
    /// Frames with their weight in the byte budget (none for the server's own comments).
    frames: mpsc::Sender<(Bytes, Option<Reserved>)>,
    /// The task id as a JSON string.
    task_json: String,
    /// A `notifications/tasks/event` message up to its params.
    envelope: String,
    id: RequestId,
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
                next = self.followed.recv() => match next {
                    Some(Followed::Events(events, held)) => {
                        (self.frames_of(&events), Some(held))
                    }
                    Some(Followed::End) => {
                        let answer = Outgoing::Result {
                            id: self.id.clone(),
                            result: json!({ "resultType": "complete" }),
                        };
                        let end = sse::message(None, &answer.to_bytes());
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
        let each = self.envelope.len() + 2 * self.task_json.len() + 128;
        let bytes: usize = events.iter().map(|e| e.len() + each).sum();
        let mut out = Vec::with_capacity(bytes);
        for event in events {
            sse::push_message(&mut out, |data| {
                push_event(data, &self.envelope, &self.task_json, event);
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
