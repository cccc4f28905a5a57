//! `tasks/stream` (SEP-2694): a task's events as an SSE stream, each a
//! `notifications/tasks/event`, ending with the task's terminal status event and then
//! the request's (empty) result. The events come from the task's log in the store
//! ([`crate::tasks::TaskHandle::follow`]), so a reader cut anywhere resumes with `after`
//! on any replica and gets exactly what followed.
//!
//! A stream that stops without its result (the server shuts down, the store fails, the
//! task's record expires) is a cut like any other: the client resumes.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{AppState, error_response};
use crate::auth::Principal;
use crate::protocol::meta::{RequestMeta, TASKS_EXTENSION};
use crate::protocol::{ErrorObject, Notification, Outgoing, Request, RequestId};
use crate::stream::{SseBody, sse};
use crate::tasks::Followed;
use crate::tasks::events::EVENT_METHOD;
use crate::telemetry::metrics::{STREAMS_OPEN, StreamKind};

/// Frames queued toward the socket: the follower waits while they are full.
const FRAMES: usize = 16;

/// What `tasks/stream` asks for, read once here.
#[derive(Debug)]
struct Params {
    task_id: String,
    after: Option<u64>,
}

impl Params {
    fn read(params: Option<&Value>) -> Result<Self, ErrorObject> {
        let task_id = params
            .and_then(|p| p.get("taskId"))
            .and_then(Value::as_str)
            .ok_or_else(|| ErrorObject::invalid_params("Invalid params: taskId must be a string"))?
            .to_owned();
        let after = match params.and_then(|p| p.get("after")) {
            None | Some(Value::Null) => None,
            Some(value) => Some(value.as_u64().ok_or_else(|| {
                ErrorObject::invalid_params("Invalid params: after must be a non-negative integer")
            })?),
        };
        Ok(Self { task_id, after })
    }
}

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
    let params = match Params::read(request.params.as_ref()) {
        Ok(params) => params,
        Err(error) => return error_response(Some(request.id), error, StatusCode::OK),
    };
    let owner = principal.map(|p| p.owner().to_string());
    let followed = match tasks
        .follow(&params.task_id, owner.as_deref(), params.after)
        .await
    {
        Ok(followed) => followed,
        Err(e) => return error_response(Some(request.id), e.into(), StatusCode::OK),
    };
    let (tx, rx) = mpsc::channel(FRAMES);
    let pump = Pump {
        followed,
        frames: tx,
        task_id: params.task_id,
        id: request.id,
        keepalive: inner.config.sse.keepalive_interval,
        shutdown: inner.shutdown.clone(),
    };
    tokio::spawn(pump.run());
    super::super::sse_response(Body::new(SseBody::detached(rx)))
}

/// Turns what the follower hands over into SSE frames, with keep-alive comments.
struct Pump {
    followed: mpsc::Receiver<Followed>,
    frames: mpsc::Sender<Bytes>,
    task_id: String,
    id: RequestId,
    keepalive: std::time::Duration,
    shutdown: tokio_util::sync::CancellationToken,
}

impl Pump {
    async fn run(mut self) {
        let _open = STREAMS_OPEN.track(StreamKind::Stateless);
        let mut ticks = super::keepalive(self.keepalive);
        loop {
            let frame = tokio::select! {
                next = self.followed.recv() => match next {
                    Some(Followed::Event(event)) => {
                        let note = Outgoing::Notification(Notification {
                            method: EVENT_METHOD.into(),
                            params: Some(event.params(&self.task_id)),
                        });
                        sse::message(None, &note.to_bytes())
                    }
                    Some(Followed::End) => {
                        let answer = Outgoing::Result {
                            id: self.id.clone(),
                            result: json!({ "resultType": "complete" }),
                        };
                        let _ = self.frames.send(sse::message(None, &answer.to_bytes())).await;
                        return;
                    }
                    // Stopped without the end: the client resumes.
                    None => return,
                },
                _ = ticks.tick() => sse::comment("keepalive"),
                () = self.shutdown.cancelled() => return,
                () = self.frames.closed() => return,
            };
            if self.frames.send(frame).await.is_err() {
                return;
            }
        }
    }
}
