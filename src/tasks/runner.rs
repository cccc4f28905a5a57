//! One running task: a process that owns the task's record and its handler. It stores
//! every change of status before anyone can see it, hands the client's answers
//! (`tasks/update`) to the questions the handler waits on, and ends the handler on
//! `tasks/cancel` or when the task's time runs out.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};

use super::record::{TaskRecord, TaskStatus, now_ms};
use super::{TaskHandle, events};
use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::protocol::methods::{ListKind, ServerRequest};
use crate::protocol::{ErrorObject, Outgoing};

/// Most questions and signals queued for one task: the handler waits when its runner is
/// behind, and a client flooding `tasks/update` waits, then is told the task is busy.
pub(super) const MAILBOX: usize = 64;

/// What a running task hears.
#[derive(Debug)]
pub enum TaskMsg {
    /// The handler asks the client something.
    Ask {
        /// The question's key, if the handler named one.
        key: Option<String>,
        /// The question.
        request: ServerRequest,
        /// Where the answer goes.
        reply: oneshot::Sender<Value>,
    },
    /// The client's answers (`tasks/update`), by question key; `applied` is told once
    /// their effect is stored, so the acknowledgement comes after `tasks/get` shows it.
    Respond {
        /// By question key.
        answers: Map<String, Value>,
        /// Told when the record with the answers applied is stored (or nothing changed).
        applied: oneshot::Sender<()>,
    },
    /// The client cancelled the task (`tasks/cancel`).
    Cancel,
    /// The handler's note, for the task's log. Through the runner, in the order of the
    /// handler's questions, so that the log keeps the order the task made them in.
    Note(Note),
}

/// A task's outbox: questions become the task's `inputRequests`, answered by
/// `tasks/update`; notes go to the runner, which writes them to the task's log
/// (`tasks/stream`); list and resource announcements go where the request's own outbox
/// sent them.
pub struct TaskOutbox {
    mailbox: mpsc::Sender<TaskMsg>,
    announce: Option<Arc<dyn Outbox>>,
}

impl TaskOutbox {
    pub(super) fn new(mailbox: mpsc::Sender<TaskMsg>, announce: Option<Arc<dyn Outbox>>) -> Self {
        Self { mailbox, announce }
    }
}

impl Outbox for TaskOutbox {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        Box::pin(async move {
            // Paced by the runner's mailbox, and so by the store.
            self.mailbox
                .send(TaskMsg::Note(note))
                .await
                .map_err(|_| NotifyError("the task has ended".into()))
        })
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            let key = request.key.clone();
            self.mailbox
                .send(TaskMsg::Ask {
                    key,
                    request,
                    reply,
                })
                .await
                .map_err(|_| ClientRequestError::Unavailable("the task has ended".into()))?;
            answer
                .await
                .map_err(|_| ClientRequestError::Unavailable("the task has ended".into()))
        })
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        match &self.announce {
            Some(outbox) => outbox.resource_updated(uri),
            None => Box::pin(async { Ok(0) }),
        }
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        match &self.announce {
            Some(outbox) => outbox.list_changed(kind),
            None => Box::pin(async { Ok(0) }),
        }
    }
}

/// Runs `work` as task `record` until it ends, is cancelled or runs out of time.
pub(super) async fn run(
    tasks: TaskHandle,
    mut record: TaskRecord,
    mut mailbox: mpsc::Receiver<TaskMsg>,
    mut work: BoxFuture<'static, Outgoing>,
) {
    let id = record.id;
    // The notes, a few appends in flight; each status waits for the notes before it.
    let mut log = tasks.log_writer(id);
    let mut waiting: HashMap<String, oneshot::Sender<Value>> = HashMap::new();
    let mut asked = 0usize;
    let deadline = tokio::time::Instant::now() + record.remaining(now_ms());
    let timeout = tokio::time::sleep_until(deadline);
    tokio::pin!(timeout);
    let mut keep_log = tokio::time::interval_at(
        tokio::time::Instant::now() + events::LOG_KEEPALIVE,
        events::LOG_KEEPALIVE,
    );
    loop {
        tokio::select! {
            biased;
            msg = mailbox.recv() => match msg {
                Some(TaskMsg::Ask { key, request, reply }) => {
                    asked += 1;
                    let key = key.unwrap_or_else(|| {
                        let kind = request.method.split('/').next().unwrap_or("input");
                        format!("{kind}-{asked}")
                    });
                    let mut question = Map::new();
                    question.insert("method".into(), Value::String(request.method));
                    question.insert("params".into(), request.params.unwrap_or_else(|| json!({})));
                    record.input_requests.insert(key.clone(), Value::Object(question));
                    waiting.insert(key, reply);
                    record.set(TaskStatus::InputRequired, None);
                    tasks.save_after(&mut log, &record).await;
                }
                Some(TaskMsg::Respond { answers, applied }) => {
                    let mut changed = false;
                    for (key, answer) in answers {
                        // Keys not asked (or answered already) are ignored, as the spec
                        // asks.
                        if let Some(reply) = waiting.remove(&key) {
                            record.input_requests.remove(&key);
                            let _ = reply.send(answer);
                            changed = true;
                        }
                    }
                    if changed {
                        if waiting.is_empty() {
                            record.set(TaskStatus::Working, None);
                        } else {
                            record.updated_ms = now_ms();
                        }
                        tasks.save_after(&mut log, &record).await;
                    }
                    let _ = applied.send(());
                }
                Some(TaskMsg::Note(note)) => tasks.write_note(&mut log, id, events::of_note(note)).await,
                Some(TaskMsg::Cancel) => {
                    // Dropping the handler's future is its cancellation.
                    record.input_requests.clear();
                    record.set(TaskStatus::Cancelled, Some("cancelled by the client".into()));
                    tasks.save_after(&mut log, &record).await;
                    break;
                }
                // Every sender is gone: only the registry holds one while the task runs,
                // so this is shutdown. The task stays registered as running here: once
                // this replica has let its lease go, another one runs it again (a planned
                // stop, not a lost attempt) or ends it.
                None => {
                    let _ = log.flush().await;
                    return;
                }
            },
            answer = &mut work => {
                // Notes the handler queued in the poll that ended it go first.
                while let Ok(msg) = mailbox.try_recv() {
                    if let TaskMsg::Note(note) = msg {
                        tasks.write_note(&mut log, id, events::of_note(note)).await;
                    }
                }
                record.input_requests.clear();
                match answer {
                    Outgoing::Result { mut result, .. } => {
                        if let Some(object) = result.as_object_mut() {
                            object.insert("resultType".into(), Value::from("complete"));
                        }
                        record.result = Some(result);
                        record.set(TaskStatus::Completed, None);
                    }
                    Outgoing::Error { error, .. } => {
                        let message = error.message.clone();
                        record.error = Some(error);
                        record.set(TaskStatus::Failed, Some(message));
                    }
                    _ => {
                        record.error = Some(ErrorObject::internal("the handler gave no answer"));
                        record.set(TaskStatus::Failed, None);
                    }
                }
                tasks.save_after(&mut log, &record).await;
                break;
            }
            _ = keep_log.tick() => tasks.keep_log(id).await,
            () = &mut timeout => {
                // Out of time: the record is gone from the store with it.
                tracing::info!(task_id = %id, "a task ran out of time (tasks.ttl) and was stopped");
                break;
            }
        }
    }
    tasks.forget_log_after(id, record.remaining(now_ms()));
    tasks.finished(id).await;
}
