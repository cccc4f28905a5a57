//! `tasks/stream` (SEP-2694), whatever carries it: the checks before a task is followed,
//! and each of its events as one `notifications/tasks/event` message, its stored bytes
//! spliced in as they are. The transport frames the messages and decides when the stream
//! is cut (shutdown, a slow reader).

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::McpServer;
use crate::auth::Principal;
use crate::ids::TaskId;
use crate::protocol::meta::{RequestMeta, TASKS_EXTENSION};
use crate::protocol::methods::TaskStreamParams;
use crate::protocol::{ErrorObject, Outgoing, Request, RequestId};
use crate::rt::budget::ByteBudget;
use crate::tasks::Followed;
use crate::tasks::events::{EVENT_METHOD, TaskEvent};

/// A task being followed for a `tasks/stream` request.
pub(crate) struct TaskStream {
    /// What the task's log hands over, in order; closed without [`Followed::End`] when
    /// the stream stopped early (the client resumes with `after`).
    pub(crate) followed: mpsc::Receiver<Followed>,
    task_id: TaskId,
    /// The task id as a JSON string.
    task_json: String,
    /// A `notifications/tasks/event` message up to its params.
    envelope: String,
    id: RequestId,
}

impl McpServer {
    /// Follows the task `request` names for `principal`, holding at most `budget` bytes
    /// for the reader; or the error that answers the request.
    pub(crate) async fn task_stream(
        &self,
        request: &Request,
        meta: &RequestMeta,
        principal: Option<&Principal>,
        budget: ByteBudget,
    ) -> Result<TaskStream, ErrorObject> {
        let Some(tasks) = self.tasks() else {
            return Err(ErrorObject::method_not_found(&request.method));
        };
        if !meta.declares_tasks() {
            return Err(ErrorObject::missing_capability(
                json!({ "extensions": { TASKS_EXTENSION: {} } }),
            ));
        }
        let params = TaskStreamParams::read(request)?;
        let followed = tasks
            .follow(params.task_id, principal, params.after, budget)
            .await
            .map_err(ErrorObject::from)?;
        Ok(TaskStream {
            followed,
            task_json: Value::String(params.task_id.to_string()).to_string(),
            task_id: params.task_id,
            envelope: format!(r#"{{"jsonrpc":"2.0","method":"{EVENT_METHOD}","params":"#),
            id: request.id.clone(),
        })
    }
}

impl TaskStream {
    /// The task followed.
    pub(crate) fn task_id(&self) -> TaskId {
        self.task_id
    }

    /// About how many bytes [`TaskStream::push_event`] adds beside the event itself.
    pub(crate) fn overhead(&self) -> usize {
        self.envelope.len() + 2 * self.task_json.len() + 128
    }

    /// Appends `event` as one `notifications/tasks/event` message.
    pub(crate) fn push_event(&self, out: &mut Vec<u8>, event: &TaskEvent) {
        out.extend_from_slice(self.envelope.as_bytes());
        event.write_params(&self.task_json, out);
        out.push(b'}');
    }

    /// The request's result, once the task's terminal event was sent.
    pub(crate) fn end(&self) -> Outgoing {
        Outgoing::Result {
            id: self.id.clone(),
            result: json!({ "resultType": "complete" }),
        }
    }

    /// The error that ends a stream stopped early: `why`, and how to resume.
    pub(crate) fn cut(&self, why: &str) -> Outgoing {
        Outgoing::Error {
            id: Some(self.id.clone()),
            error: ErrorObject::internal(format!(
                "{why}; send tasks/stream again with after = the last seq received"
            )),
        }
    }
}
