//! The two long-lived 2026-07-28 requests over stdio: `subscriptions/listen` and
//! `tasks/stream`. Each writes its notifications as lines while it lives and ends with its
//! result, as over HTTP; a client ends one early with `notifications/cancelled`.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use super::super::stateless::{Filter, event_envelope, listen_result, push_event};
use crate::handler::BoxFuture;
use crate::protocol::meta::{RequestMeta, TASKS_EXTENSION};
use crate::protocol::methods::TaskStreamParams;
use crate::protocol::{ErrorObject, Outgoing, Request, RequestId};
use crate::server::McpServer;
use crate::rt::budget::ByteBudget;
use crate::tasks::Followed;

/// `subscriptions/listen`: the acknowledgement, then each change asked for, until the
/// server stops (`closing`), which ends it with its result. Subscribed to the server's
/// news before this returns, so nothing after the request was read can be missed.
pub(super) fn listen(
    server: &McpServer,
    request: &Request,
    meta: &RequestMeta,
    out: mpsc::Sender<Bytes>,
    closing: CancellationToken,
) -> Result<BoxFuture<'static, Outgoing>, ErrorObject> {
    let filter = Filter::read(server, request, meta, None)?;
    let mut news = server.news().subscribe();
    let id = request.id.clone();
    let tag = serde_json::to_value(&id).unwrap_or(Value::Null);
    let server_info = server.info_json();
    Ok(Box::pin(async move {
        let ended = |id: RequestId| Outgoing::Error {
            id: Some(id),
            error: ErrorObject::internal("the client closed stdout"),
        };
        if out.send(filter.acknowledgement(&tag)).await.is_err() {
            return ended(id);
        }
        loop {
            tokio::select! {
                heard = news.recv() => match heard {
                    Ok(heard) => {
                        if let Some(message) = filter.message(&heard.news, &tag)
                            && out.send(message).await.is_err()
                        {
                            return ended(id);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::info!(missed, "a stdio listen request fell behind; ending it");
                        return Outgoing::Error {
                            id: Some(id),
                            error: ErrorObject::internal(format!(
                                "{missed} changes were missed (stateless.listen_backlog); listen again and re-read what you depend on"
                            )),
                        };
                    }
                    Err(broadcast::error::RecvError::Closed) => break,
                },
                () = closing.cancelled() => break,
            }
        }
        Outgoing::Result {
            id,
            result: listen_result(&tag, &server_info),
        }
    }))
}

/// `tasks/stream` (SEP-2694): the task's events from `after`, each a
/// `notifications/tasks/event` line, then the (empty) result once the terminal status was
/// written. Stopped early (the server stops, the store fails, the record expires), it
/// answers an error and the client resumes with `after` = the last seq it got.
pub(super) fn task_stream(
    server: Arc<McpServer>,
    request: Request,
    meta: &RequestMeta,
    out: mpsc::Sender<Bytes>,
    budget_bytes: usize,
    closing: CancellationToken,
) -> BoxFuture<'static, Outgoing> {
    let declared = meta.declares_tasks();
    Box::pin(async move {
        let id = request.id.clone();
        let fail = |error| Outgoing::Error {
            id: Some(request.id.clone()),
            error,
        };
        let Some(tasks) = server.tasks() else {
            return fail(ErrorObject::method_not_found(&request.method));
        };
        if !declared {
            return fail(ErrorObject::missing_capability(
                json!({ "extensions": { TASKS_EXTENSION: {} } }),
            ));
        }
        let params = match TaskStreamParams::read(&request) {
            Ok(params) => params,
            Err(error) => return fail(error),
        };
        let budget = ByteBudget::new(budget_bytes);
        let mut followed = match tasks.follow(params.task_id, None, params.after, budget).await
        {
            Ok(followed) => followed,
            Err(e) => return fail(e.into()),
        };
        let envelope = event_envelope();
        let task_json = Value::String(params.task_id.to_string()).to_string();
        let cut = |why: &str| {
            fail(ErrorObject::internal(format!(
                "{why}; send tasks/stream again with after = the last seq received"
            )))
        };
        loop {
            let next = tokio::select! {
                next = followed.recv() => next,
                () = closing.cancelled() => return cut("the server is stopping"),
            };
            match next {
                Some(Followed::Events(events, held)) => {
                    for event in &events {
                        let mut line = Vec::with_capacity(event.len() + envelope.len() + 64);
                        push_event(&mut line, &envelope, &task_json, event);
                        if out.send(Bytes::from(line)).await.is_err() {
                            return cut("the client closed stdout");
                        }
                    }
                    // Weighed until handed to the writer, as over HTTP.
                    drop(held);
                }
                Some(Followed::End) => {
                    return Outgoing::Result {
                        id,
                        result: json!({ "resultType": "complete" }),
                    };
                }
                None => return cut("the task's event log stopped (the store failed or the task expired)"),
            }
        }
    })
}
