//! Multi round-trip requests (2026-07-28): a stateless request cannot wait for the client,
//! so a handler's question ends the request with an `input_required` result and the
//! client asks again with the answer.
//!
//! The handler does not notice. Its questions go to [`Inputs`], which answers each from
//! what the client has sent (this round's `inputResponses` and the answers of earlier
//! rounds, carried in the signed `requestState`). A question without an answer is noted,
//! and its future never resolves; once the handler has nothing else to do,
//! [`until_input_needed`] stops it and the request answers `input_required` with every
//! question noted. The next round runs the handler from the start.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use serde_json::{Map, Value};

use crate::handler::{BoxFuture, ClientRequestError, Note, NotifyError, Outbox};
use crate::protocol::methods::{ListKind, ServerRequest};

/// The answers a request has, and the questions it asked that have none.
pub(super) struct Inputs {
    answers: Map<String, Value>,
    /// Where the request's notes go (its SSE stream), if anywhere.
    notes: Option<Arc<dyn Outbox>>,
    asked: Mutex<Asked>,
}

#[derive(Default)]
struct Asked {
    /// Questions asked so far, for keys made from the order of asking.
    count: usize,
    /// Questions without an answer, in the order asked.
    missing: Map<String, Value>,
    /// Answers the handler used: all the next round needs from this one.
    used: Map<String, Value>,
}

impl Inputs {
    pub(super) fn new(answers: Map<String, Value>, notes: Option<Arc<dyn Outbox>>) -> Self {
        Self {
            answers,
            notes,
            asked: Mutex::new(Asked::default()),
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

    // A plain mutex: held for a map lookup, never across an await, and only by the one
    // request's handler (no contention to measure).
    fn lock(&self) -> std::sync::MutexGuard<'_, Asked> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The answer to `request`, if the client has given one; otherwise notes the question.
    fn answer(&self, request: ServerRequest) -> Option<Value> {
        let mut asked = self.lock();
        asked.count += 1;
        let key = request.key.unwrap_or_else(|| {
            let kind = request.method.split('/').next().unwrap_or("input");
            format!("{kind}-{}", asked.count)
        });
        if let Some(answer) = self.answers.get(&key) {
            asked.used.insert(key, answer.clone());
            return Some(answer.clone());
        }
        let mut question = Map::new();
        question.insert("method".into(), Value::String(request.method));
        if let Some(params) = request.params {
            question.insert("params".into(), params);
        }
        asked.missing.insert(key, Value::Object(question));
        None
    }
}

impl Outbox for Inputs {
    fn notify(&self, note: Note) -> BoxFuture<'_, Result<(), NotifyError>> {
        match &self.notes {
            Some(notes) => notes.notify(note),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn request(&self, request: ServerRequest) -> BoxFuture<'_, Result<Value, ClientRequestError>> {
        match self.answer(request) {
            Some(answer) => Box::pin(async move { Ok(answer) }),
            // Never resolves: the request ends with `input_required` instead.
            None => Box::pin(std::future::pending()),
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
}

/// How a request with inputs ended.
pub(super) enum Ended<T> {
    /// The handler finished.
    Done(T),
    /// The handler waits for answers the client has not given.
    NeedsInput,
}

/// Runs `work` until it finishes or waits with a question unanswered.
pub(super) fn until_input_needed<F: Future>(
    work: F,
    inputs: Arc<Inputs>,
) -> impl Future<Output = Ended<F::Output>> {
    UntilInput {
        work: Box::pin(work),
        inputs,
    }
}

struct UntilInput<F: Future> {
    work: Pin<Box<F>>,
    inputs: Arc<Inputs>,
}

impl<F: Future> Future for UntilInput<F> {
    type Output = Ended<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.work.as_mut().poll(cx) {
            Poll::Ready(out) => Poll::Ready(Ended::Done(out)),
            // Pending with a question unanswered: nothing the handler does can answer it,
            // so waiting longer only delays the client's answer.
            Poll::Pending if self.inputs.needs_input() => Poll::Ready(Ended::NeedsInput),
            Poll::Pending => Poll::Pending,
        }
    }
}
