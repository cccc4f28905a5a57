//! The tasks extension (2026-07-28) from the client's side: a `tools/call` that becomes a
//! task, `tasks/get` polled to the end, `tasks/cancel`, and the task's events through
//! `tasks/stream`, followed by [`Watch`] over HTTP (resumed when a stream is cut).

use std::time::Duration;

use serde_json::{Value, json};

use super::watch::{Ending, Watch};
use super::{Client, ClientError, Era, Link, Task, TaskEvents, ToolResult, parse};
use crate::protocol::meta::TASKS_EXTENSION;
use crate::tasks::events::EVENT_METHOD;

/// The id of the task `answer` (a `tools/call` result) names.
pub(super) fn task_id(tool: &str, answer: &Value) -> Result<String, ClientError> {
    match (answer["resultType"].as_str(), answer["taskId"].as_str()) {
        (Some("task"), Some(id)) => Ok(id.to_owned()),
        _ => Err(ClientError::NotATask {
            tool: tool.to_owned(),
            answer: answer.clone(),
        }),
    }
}

/// How long between two polls when the task does not say.
const DEFAULT_POLL: Duration = Duration::from_millis(100);

impl Client {
    fn tasks_era(&self) -> Result<(), ClientError> {
        match self.era {
            Era::Stateless => Ok(()),
            Era::Sessions => Err(ClientError::Unsupported(
                "tasks are 2026-07-28's: connect with .stateless()",
            )),
        }
    }

    /// The client's capabilities with the tasks extension, which every tasks request
    /// declares.
    fn with_tasks(&self) -> Value {
        let mut capabilities = self.capabilities.clone();
        capabilities["extensions"][TASKS_EXTENSION] = json!({});
        capabilities
    }

    /// A tasks request.
    async fn task_request(&self, method: &str, id: &str) -> Result<super::Response, ClientError> {
        self.tasks_era()?;
        let capabilities = self.with_tasks();
        self.request_with(method, json!({ "taskId": id }), Some(&capabilities))
            .await
    }

    /// Calls tool `name` declaring the tasks extension, so that a tool that may run as a
    /// task does: the task's id ([`ClientError::NotATask`] if the server answered at once).
    pub async fn start_task(&self, name: &str, arguments: Value) -> Result<String, ClientError> {
        self.tasks_era()?;
        let capabilities = self.with_tasks();
        let params = json!({"name": name, "arguments": arguments});
        let answer = self
            .request_with("tools/call", params, Some(&capabilities))
            .await?;
        task_id(name, &answer.result)
    }

    /// `tasks/get`: the task as it is now.
    pub async fn task(&self, id: &str) -> Result<Task, ClientError> {
        let method = "tasks/get";
        parse(method, self.task_request(method, id).await?.result)
    }

    /// Polls `tasks/get` (at the task's `pollIntervalMs`) until the task is completed,
    /// failed or cancelled, for at most the client's timeout.
    pub async fn wait_task(&self, id: &str) -> Result<Task, ClientError> {
        let poll = async {
            loop {
                let task = self.task(id).await?;
                if task.is_terminal() {
                    return Ok(task);
                }
                // Pacing the polls the protocol offers, as the server asked.
                let pause = task
                    .poll_interval_ms
                    .map_or(DEFAULT_POLL, Duration::from_millis);
                tokio::time::sleep(pause.min(Duration::from_secs(1))).await;
            }
        };
        tokio::time::timeout(self.timeout, poll)
            .await
            .map_err(|_| ClientError::Timeout {
                method: "tasks/get".into(),
                timeout: self.timeout,
            })?
    }

    /// Waits for task `id` to end: its tool's result once completed; a failure is
    /// [`ClientError::Rpc`] with the task's error, a cancellation
    /// [`ClientError::Malformed`] saying so.
    pub async fn task_result(&self, id: &str) -> Result<ToolResult, ClientError> {
        let task = self.wait_task(id).await?;
        let method = "tasks/get";
        match (task.result, task.error) {
            (Some(result), _) => Ok(result),
            (None, Some(error)) => Err(ClientError::Rpc {
                method: method.into(),
                code: error.code,
                message: error.message,
                data: error.data,
            }),
            (None, None) => Err(ClientError::Malformed {
                method: method.into(),
                detail: format!("task {id} ended {} without a result", task.status),
            }),
        }
    }

    /// `tasks/cancel`.
    pub async fn cancel_task(&self, id: &str) -> Result<(), ClientError> {
        self.task_request("tasks/cancel", id).await?;
        Ok(())
    }

    /// Task `id`'s events from `tasks/stream`, each once, in order, to the task's end.
    /// Over HTTP the stream is followed as `otpmcp tasks watch` follows it (resumed
    /// after the last event whenever it is cut); over stdio it is one request.
    pub async fn task_events(&self, id: &str) -> Result<TaskEvents, ClientError> {
        self.tasks_era()?;
        match &self.link {
            Link::Http(link) => {
                let (url, token) = link.endpoint();
                let watch = Watch {
                    urls: vec![url.to_owned()],
                    task_id: id.to_owned(),
                    token: token.map(str::to_owned),
                    json: true,
                    retry_for: link.timeout(),
                    idle_timeout: link.timeout(),
                };
                let mut events = Vec::new();
                let ending = watch.follow(|event| events.push(event.clone())).await?;
                Ok(TaskEvents { events, ending })
            }
            Link::Stdio(_) => {
                let method = "tasks/stream";
                let answer = self.task_request(method, id).await?;
                let events: Vec<Value> = answer
                    .notifications
                    .into_iter()
                    .filter(|n| n["method"] == EVENT_METHOD)
                    .map(|mut n| n["params"].take())
                    .collect();
                let status = events
                    .iter()
                    .rev()
                    .find(|e| e["type"] == crate::tasks::events::STATUS)
                    .and_then(|e| e["payload"]["status"].as_str());
                let ending = match status {
                    Some("completed") => Ending::Completed,
                    Some("failed") => Ending::Failed,
                    Some("cancelled") => Ending::Cancelled,
                    _ => {
                        return Err(ClientError::Malformed {
                            method: method.into(),
                            detail: "the stream ended without the task's end".into(),
                        });
                    }
                };
                Ok(TaskEvents { events, ending })
            }
        }
    }
}
