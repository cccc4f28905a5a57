//! Multi round-trip requests (2026-07-28): a stateless request cannot wait for the client,
//! so a handler's question ends the request with an `input_required` result and the
//! client asks again with the answer.
//!
//! The handler does not notice. Its questions go to [`Inputs`], which answers each from
//! what the client has sent (this round's `inputResponses` and the answers of earlier
//! rounds, carried in the signed `requestState`). A question without an answer is noted,
//! and its future never resolves; once the handler has nothing else to do,
//! [`UntilInput`] stops it and the request answers `input_required` with every question
//! noted. The next round runs the handler from the start.
//!
//! A request that may become a task (tasks extension) switches [`Inputs`] to the task
//! when it starts: from then on questions go to the task, answered by `tasks/update`,
//! and [`UntilInput`] hands the handler over to run as the task.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll};

use serde_json::{Map, Value};

use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::protocol::Outgoing;
use crate::protocol::methods::{ListKind, ServerRequest};
use crate::tasks::record::TaskWork;
use crate::tasks::{Creator, NewTask, TaskHandle, TaskOutbox};

/// The answers a request has, and the questions it asked that have none.
pub(super) struct Inputs {
    answers: Map<String, Value>,
    /// Where the request's notes go (its SSE stream), if anywhere.
    notes: Option<Arc<dyn Outbox>>,
    asked: Mutex<Asked>,
    /// What the request needs to become a task, if it may.
    starter: Option<Starter>,
    /// The task's outbox, once the request became one.
    task: OnceLock<TaskOutbox>,
}

/// How a request becomes a task.
pub(super) struct Starter {
    pub(super) tasks: TaskHandle,
    /// What to run again if the task's replica dies (a re-runnable tool), without the
    /// answers, which are added when the task starts.
    pub(super) rerun: Option<TaskWork>,
    /// Who creates the task: who may see it, whose quota it counts against, and the
    /// scopes its tool requires.
    pub(super) creator: Creator,
}

#[derive(Default)]
struct Asked {
    /// Questions asked so far, for keys made from the order of asking.
    count: usize,
    /// Questions without an answer, in the order asked.
    missing: Map<String, Value>,
    /// Answers the handler used: all the next round needs from this one.
    used: Map<String, Value>,
    /// The task, created and not yet handed over.
    created: Option<NewTask>,
}

impl Inputs {
    pub(super) fn new(
        answers: Map<String, Value>,
        notes: Option<Arc<dyn Outbox>>,
        starter: Option<Starter>,
    ) -> Self {
        Self {
            answers,
            notes,
            asked: Mutex::new(Asked::default()),
            starter,
            task: OnceLock::new(),
        }
    }

    /// The questions without an answer, as `inputRequests`.
    pub(super) fn missing(&self) -> Map<String, Value> {
        self.lock().missing.clone()
    }

    /// The answers the handler used, for the next round's `requestState`.
    pub(super) fn used(&self) -> Map<String, Value> {
        self.lock().used.clone()
    }

    fn needs_input(&self) -> bool {
        !self.lock().missing.is_empty()
    }

    /// The task the request became, once (then the handler is the task's).
    fn take_task(&self) -> Option<NewTask> {
        self.lock().created.take()
    }

    // A plain mutex: held for a map operation, never across an await, and only by the one
    // request's handler (no contention to measure).
    fn lock(&self) -> std::sync::MutexGuard<'_, Asked> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer to `request`, if the client has given one; otherwise, before the
    /// request is a task, notes the question.
    fn answer(&self, request: &ServerRequest) -> Option<Value> {
        let mut asked = self.lock();
        asked.count += 1;
        let key = request.key.clone().unwrap_or_else(|| {
            let kind = request.method.split('/').next().unwrap_or("input");
            format!("{kind}-{}", asked.count)
        });
        if let Some(answer) = self.answers.get(&key) {
            asked.used.insert(key, answer.clone());
            return Some(answer.clone());
        }
        if self.task.get().is_none() {
            let mut question = Map::new();
            question.insert("method".into(), Value::String(request.method.clone()));
            if let Some(params) = &request.params {
                question.insert("params".into(), params.clone());
            }
            asked.missing.insert(key, Value::Object(question));
        }
        None
    }

    /// The outbox of a task run again from its record: the answers it had gathered
    /// before it became a task, then the task's own questions.
    pub(super) fn rerun(answers: Map<String, Value>, task: TaskOutbox) -> Self {
        let inputs = Self::new(answers, None, None);
        let _ = inputs.task.set(task);
        inputs
    }

    /// Makes the request a task, if it may become one and is not one yet.
    pub(super) async fn start_task(&self) -> Result<bool, ClientRequestError> {
        if self.task.get().is_some() {
            return Ok(true);
        }
        let Some(starter) = &self.starter else {
            return Ok(false);
        };
        let rerun = starter.rerun.clone().map(|mut work| {
            work.answers = self.lock().used.clone();
            work
        });
        let task = starter
            .tasks
            .create(rerun, starter.creator.clone())
            .await
            .map_err(|e| ClientRequestError::Unavailable(e.to_string()))?;
        let _ = self.task.set(task.outbox(self.notes.clone()));
        self.lock().created = Some(task);
        Ok(true)
    }
}

impl Outbox for Inputs {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        match (&self.notes, self.task.get()) {
            // A task's notes are its events (`tasks/stream`).
            (_, Some(task)) => task.notify(note),
            (None, None) => Box::pin(async { Ok(()) }),
            (Some(notes), None) => notes.notify(note),
        }
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        match (self.answer(&request), self.task.get()) {
            (Some(answer), _) => Box::pin(async move { Ok(answer) }),
            // A task asks its client through `tasks/update`.
            (None, Some(task)) => task.request(request),
            // Never resolves: the request ends with `input_required` instead.
            (None, None) => Box::pin(std::future::pending()),
        }
    }

    fn close_connection(&self) -> BoxFuture<'_, bool> {
        Box::pin(async { false })
    }

    fn resource_updated(&self, uri: String) -> BoxFuture<'_, Result<usize, NotifyError>> {
        match &self.notes {
            Some(notes) => notes.resource_updated(uri),
            None => Box::pin(async { Ok(0) }),
        }
    }

    fn list_changed(&self, kind: ListKind) -> BoxFuture<'_, Result<usize, NotifyError>> {
        match &self.notes {
            Some(notes) => notes.list_changed(kind),
            None => Box::pin(async { Ok(0) }),
        }
    }

    fn start_task(&self) -> BoxFuture<'_, Result<bool, ClientRequestError>> {
        Box::pin(Inputs::start_task(self))
    }
}

/// How a request with inputs ended.
pub(super) enum Ended {
    /// The handler finished.
    Done(Outgoing),
    /// The handler waits for answers the client has not given.
    NeedsInput,
    /// The request became a task; the handler goes on as it.
    Task(Box<NewTask>, BoxFuture<'static, Outgoing>),
}

/// Runs a handler until it finishes, waits with a question unanswered, or becomes a task.
pub(super) struct UntilInput {
    work: Option<BoxFuture<'static, Outgoing>>,
    inputs: Arc<Inputs>,
}

impl UntilInput {
    pub(super) fn new(work: BoxFuture<'static, Outgoing>, inputs: Arc<Inputs>) -> Self {
        Self {
            work: Some(work),
            inputs,
        }
    }
}

impl Future for UntilInput {
    type Output = Ended;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Ended> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Pending;
        };
        let polled = work.as_mut().poll(cx);
        if let Some(task) = self.inputs.take_task() {
            let work: BoxFuture<'static, Outgoing> = match polled {
                Poll::Ready(answer) => Box::pin(async move { answer }),
                Poll::Pending => match self.work.take() {
                    Some(work) => work,
                    None => return Poll::Pending,
                },
            };
            return Poll::Ready(Ended::Task(Box::new(task), work));
        }
        match polled {
            Poll::Ready(answer) => Poll::Ready(Ended::Done(answer)),
            // Pending with a question unanswered: nothing the handler does can answer it,
            // so waiting longer only delays the client's answer.
            Poll::Pending if self.inputs.needs_input() => Poll::Ready(Ended::NeedsInput),
            Poll::Pending => Poll::Pending,
        }
    }
}
