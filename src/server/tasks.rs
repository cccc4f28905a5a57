//! The tasks extension in the method table: which `tools/call` becomes a task, what
//! `tools/list` says of it, and `tasks/get`, `tasks/update`, `tasks/cancel`. The tasks
//! themselves (records, runners, leases) are [`crate::tasks`]'s.

use std::sync::{Arc, Weak};

use serde_json::{Map, Value, json};

use super::McpServer;
use super::inputs::{Inputs, Starter};
use crate::auth::{HandedPrincipal, Principal};
use crate::handler::{BoxFuture, RequestContext};
use crate::ids::TaskId;
use crate::protocol::meta::{RequestMeta, TASKS_EXTENSION};
use crate::protocol::methods::{Method, TaskSupport};
use crate::protocol::{ErrorObject, Outgoing, Request, RequestId};
use crate::tasks::record::TaskWork;
use crate::tasks::{Creator, Rerun, TaskError, TaskHandle, TaskOutbox, TaskSignal};

/// How a `tools/call` may become a task.
pub(super) struct TaskPlan {
    pub(super) starter: Starter,
    /// The handler calls `start_task` itself; otherwise the task starts with it.
    pub(super) started_by_handler: bool,
}

impl McpServer {
    /// Runs tasks with `tasks` (the runtime installs it).
    pub fn with_tasks(mut self, tasks: TaskHandle) -> Self {
        self.tasks = Some(tasks);
        self
    }

    /// The tasks this server runs, once the runtime installed them.
    pub fn tasks(&self) -> Option<&TaskHandle> {
        self.tasks.as_ref()
    }

    /// Lets `tasks` run lost tasks again with this server's tools.
    pub fn serve_reruns(self: &Arc<Self>) {
        if let Some(tasks) = &self.tasks {
            tasks.set_rerun(Arc::new(Rerunner(Arc::downgrade(self))));
        }
    }

    /// Whether a stateless `tools/call` may become a task: only when the request declared
    /// the extension, for a tool that may run as one. A tool that must, called without
    /// the extension, is -32021. `client`: the caller's address, whose quota the task
    /// counts against without `[auth]`.
    pub(super) fn task_plan(
        &self,
        request: &Request,
        meta: &RequestMeta,
        principal: Option<&Arc<Principal>>,
        client: Option<std::net::IpAddr>,
    ) -> Result<Option<TaskPlan>, ErrorObject> {
        let Some(routing) = request.name().and_then(|n| self.tool_routing(n)) else {
            return Ok(None);
        };
        let options = routing.tasks;
        match (options.support, meta.declares_tasks(), &self.tasks) {
            (TaskSupport::Never, _, _) | (TaskSupport::Optional, false, _) => Ok(None),
            (TaskSupport::Required, false, _) => Err(ErrorObject::missing_capability(
                json!({ "extensions": { TASKS_EXTENSION: {} } }),
            )),
            (_, true, None) => Ok(None),
            (_, true, Some(tasks)) => {
                let rerun = options.rerunnable.then(|| TaskWork {
                    params: request.rerun_params(),
                    capabilities: Value::clone(&meta.client_capabilities),
                    answers: Map::new(),
                    principal: principal.map(|p| HandedPrincipal::from(p.as_ref())),
                });
                let owner = principal.map(|p| p.owner().to_string());
                // The principal's quota; without `[auth]`, the client's address (a
                // stateless request has no session; over stdio there is one client).
                let quota = match (&owner, client) {
                    (Some(owner), _) => format!("owner:{owner}"),
                    (None, Some(ip)) => format!("addr:{ip}"),
                    (None, None) => "local".to_owned(),
                };
                Ok(Some(TaskPlan {
                    starter: Starter {
                        tasks: tasks.clone(),
                        rerun,
                        creator: Creator {
                            owner,
                            quota,
                            scopes: self.required_scopes(request).to_vec(),
                        },
                    },
                    started_by_handler: options.started_by_handler,
                }))
            }
        }
    }

    /// Puts `execution.taskSupport` on each tool of a stateless `tools/list` result, saying
    /// what a call with the same capabilities gets (see [`listed_task_support`]).
    pub(super) fn show_task_support(&self, result: &mut Value, meta: &RequestMeta) {
        let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
            return;
        };
        let declares = meta.declares_tasks();
        for entry in tools {
            let Some(tool) = entry.as_object_mut() else {
                continue;
            };
            let support = tool
                .get("name")
                .and_then(Value::as_str)
                .and_then(|name| self.tool_routing(name))
                .map(|routing| routing.tasks.support)
                .unwrap_or_default();
            let shown = listed_task_support(support, declares, self.tasks.is_some());
            tool.insert("execution".into(), json!({ "taskSupport": shown }));
        }
    }

    /// `tasks/get`, `tasks/update`, `tasks/cancel` (the extension was declared: checked
    /// before). An update to a task running on this replica is acknowledged once its
    /// effect is stored; a cancel, or an update relayed to another replica, once
    /// delivered (its effect shows in `tasks/get` when the task's runner has made it).
    pub(super) async fn task_method(
        &self,
        request: &Request,
        principal: Option<&Arc<Principal>>,
    ) -> Result<Value, ErrorObject> {
        let Some(tasks) = &self.tasks else {
            return Err(ErrorObject::method_not_found("tasks/*"));
        };
        let text = request.task_id().ok_or_else(|| {
            ErrorObject::invalid_params("Invalid params: taskId must be a string")
        })?;
        // A malformed id is an unknown task, answered where the store would have said so
        // (after `inputResponses`' check).
        let id = text.parse::<TaskId>().map_err(TaskError::from);
        // Another principal's task, or one whose tool's scopes the token no longer holds,
        // is not found, like an unknown one (checked where the record is read).
        let principal = principal.map(|p| &**p);
        match request.kind {
            Method::TasksGet => Ok(tasks.get(id?, principal).await?.wire()),
            Method::TasksUpdate => {
                let Some(Value::Object(answers)) = request.input_responses() else {
                    return Err(ErrorObject::invalid_params(
                        "Invalid params: inputResponses must be an object",
                    ));
                };
                let answers = answers.clone();
                tasks
                    .signal(id?, principal, TaskSignal::Respond { answers })
                    .await?;
                Ok(json!({}))
            }
            _ => {
                tasks.signal(id?, principal, TaskSignal::Cancel).await?;
                Ok(json!({}))
            }
        }
    }
}

/// The `execution.taskSupport` a stateless `tools/list` shows (2025-11-25's field, spelled
/// as there; hosts read it on 2026-07-28 too): what a `tools/call` declaring the same
/// capabilities gets. An `Optional` tool, to a client that declares the extension, is
/// `required`, since each of its calls becomes a task: a host that takes its task path
/// only for `required` tools (Copilot CLI) then takes it, and one that handles any
/// answer (Claude Code) is unaffected. `declares`: the listing request declared the
/// extension; `runs_tasks`: this server runs tasks.
pub(super) fn listed_task_support(
    support: TaskSupport,
    declares: bool,
    runs_tasks: bool,
) -> &'static str {
    match support {
        TaskSupport::Never => "forbidden",
        TaskSupport::Optional if !runs_tasks => "forbidden",
        TaskSupport::Optional if declares => "required",
        TaskSupport::Optional => "optional",
        TaskSupport::Required => "required",
    }
}

/// Builds a lost task's handler again from its record.
struct Rerunner(Weak<McpServer>);

impl Rerun for Rerunner {
    fn rerun(&self, work: &TaskWork, outbox: TaskOutbox) -> BoxFuture<'static, Outgoing> {
        let server = self.0.upgrade();
        let request = Request::new(
            RequestId::String("task".into()),
            "tools/call",
            Some(work.params.clone()),
        );
        let inputs = Arc::new(Inputs::rerun(work.answers.clone(), outbox));
        // Progress is recorded as the task's events whether or not the call asked.
        let ctx = RequestContext::new(Some(Value::from("task")), Some(inputs))
            .with_principal(work.principal.clone().map(|p| Arc::new(p.into_principal())))
            .with_client_capabilities(Arc::new(work.capabilities.clone()))
            .with_request_log_level(None);
        Box::pin(async move {
            match server {
                Some(server) => server.handle(request, ctx).await,
                None => Outgoing::Error {
                    id: None,
                    error: ErrorObject::internal("the server is shutting down"),
                },
            }
        })
    }
}
