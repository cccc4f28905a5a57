//! The two long-lived 2026-07-28 requests over stdio: `subscriptions/listen` and
//! `tasks/stream`. Each writes its notifications as lines while it lives and ends with its
//! result, as over HTTP; a client ends one early with `notifications/cancelled`.

use bytes::Bytes;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;

use crate::handler::BoxFuture;
use crate::protocol::{ErrorObject, Outgoing};
use crate::server::{Listen, TaskStream};
use crate::tasks::Followed;

/// `subscriptions/listen`: the acknowledgement, then each change asked for, until the
/// server stops (`closing`), which ends it with its result.
pub(super) fn listen(
    mut listen: Listen,
    out: mpsc::Sender<Bytes>,
    closing: CancellationToken,
) -> BoxFuture<'static, Outgoing> {
    Box::pin(async move {
        let ended = |listen: &Listen| Outgoing::Error {
            id: Some(listen.id().clone()),
            error: ErrorObject::internal("the client closed stdout"),
        };
        let Some(mut news) = listen.take_news() else {
            return listen.result();
        };
        if out.send(listen.acknowledgement()).await.is_err() {
            return ended(&listen);
        }
        loop {
            tokio::select! {
                heard = news.recv() => match heard {
                    Ok(heard) => {
                        if let Some(message) = listen.message(&heard.news)
                            && out.send(message).await.is_err()
                        {
                            return ended(&listen);
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::info!(missed, "a stdio listen request fell behind; ending it");
                        return Outgoing::Error {
                            id: Some(listen.id().clone()),
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
        listen.result()
    })
}

/// `tasks/stream` (SEP-2694): the task's events, each a `notifications/tasks/event`
/// line, then the result once the terminal status was written. Stopped early (the server
/// stops, the store fails, the record expires), it answers an error and the client
/// resumes with `after` = the last seq it got.
pub(super) fn task_stream(
    mut stream: TaskStream,
    out: mpsc::Sender<Bytes>,
    closing: CancellationToken,
) -> BoxFuture<'static, Outgoing> {
    Box::pin(async move {
        loop {
            let next = tokio::select! {
                next = stream.followed.recv() => next,
                () = closing.cancelled() => return stream.cut("the server is stopping"),
            };
            match next {
                Some(Followed::Events(events, held)) => {
                    for event in &events {
                        let mut line = Vec::with_capacity(event.len() + stream.overhead());
                        stream.push_event(&mut line, event);
                        if out.send(Bytes::from(line)).await.is_err() {
                            return stream.cut("the client closed stdout");
                        }
                    }
                    // Weighed until handed to the writer, as over HTTP.
                    drop(held);
                }
                Some(Followed::End) => return stream.end(),
                None => return stream.cut("the task's event log stopped (the store failed or the task expired)"),
            }
        }
    })
}
