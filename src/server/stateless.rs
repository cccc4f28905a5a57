//! The method table for stateless (2026-07-28) requests: the same handlers as a session's
//! requests, with what this revision adds around them — `server/discover`, `resultType`
//! and caching hints on every result, -32601 for the session era's methods, -32602 for a
//! missing resource, and multi round-trip inputs (see [`super::inputs`]).

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::McpServer;
use super::inputs::{Ended, Inputs, UntilInput};
use crate::config::StatelessConfig;
use crate::handler::RequestContext;
use crate::protocol::meta::{RequestMeta, SERVER_INFO, TASKS_EXTENSION};
use crate::protocol::methods::{ListKind, Method};
use crate::protocol::request_state::{StateKey, params_digest};
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, Outgoing, Request};

/// What stateless requests need from config.
#[derive(Debug, Clone)]
pub struct StatelessSettings {
    key: StateKey,
    state_ttl: Duration,
    cache_ttl_ms: u64,
    cache_scope: String,
}

impl Default for StatelessSettings {
    fn default() -> Self {
        Self::from_config(&StatelessConfig::default())
    }
}

impl StatelessSettings {
    /// Settings from `[stateless]`; an empty `request_state_key` gets a random one.
    pub fn from_config(config: &StatelessConfig) -> Self {
        let key = if config.request_state_key.is_empty() {
            let mut secret = [0u8; 32];
            if getrandom::fill(&mut secret).is_err() {
                tracing::error!("no system randomness: requestState is signed with a fixed key");
            }
            StateKey::new(&secret)
        } else {
            StateKey::new(config.request_state_key.expose().as_bytes())
        };
        Self {
            key,
            state_ttl: config.request_state_ttl.get(),
            cache_ttl_ms: u64::try_from(config.cache_ttl.as_millis()).unwrap_or(u64::MAX),
            cache_scope: config.cache_scope.clone(),
        }
    }
}

impl McpServer {
    /// Uses `settings` for stateless requests (the runtime applies `[stateless]`).
    pub fn with_stateless_settings(mut self, settings: StatelessSettings) -> Self {
        self.stateless = Arc::new(settings);
        self
    }

    /// Answers one stateless request whose `_meta` was read as `meta`. `ctx` carries the
    /// request's outbox (its SSE stream) and the client's capabilities from `meta`.
    pub async fn handle_stateless(
        self: &Arc<Self>,
        request: Request,
        meta: &RequestMeta,
        ctx: RequestContext,
    ) -> Outgoing {
        let method = request.kind;
        let id = request.id.clone();
        let answer = match self.refuse(method, &request, meta) {
            Some(error) => Err(error),
            None if method == Method::Discover => Ok(self.discover()),
            None if matches!(
                method,
                Method::TasksGet | Method::TasksUpdate | Method::TasksCancel
            ) =>
            {
                self.task_method(&request, ctx.principal()).await
            }
            None if method.may_ask_for_input() => {
                self.with_inputs(method, request, meta, ctx).await
            }
            None if method == Method::ToolsList => match self.handle(request, ctx).await {
                Outgoing::Result { mut result, .. } => {
                    self.show_task_support(&mut result, meta);
                    Ok(result)
                }
                Outgoing::Error { error, .. } => Err(error),
                other => return other,
            },
            None => match self.handle(request, ctx).await {
                Outgoing::Result { result, .. } => Ok(result),
                Outgoing::Error { error, .. } => Err(error),
                other => return other,
            },
        };
        match answer {
            Ok(result) => Outgoing::Result {
                id,
                result: self.finish(method, result),
            },
            Err(error) => Outgoing::Error {
                id: Some(id),
                error: stateless_error(error),
            },
        }
    }

    /// Why `method` cannot be served statelessly, if it cannot.
    fn refuse(&self, method: Method, request: &Request, meta: &RequestMeta) -> Option<ErrorObject> {
        let removed = |why: &str| {
            Some(ErrorObject::new(
                ErrorObject::METHOD_NOT_FOUND,
                format!("Method not found: {} ({why})", request.method),
            ))
        };
        match method {
            m if m.is_session_only() => removed("not part of protocol revision 2026-07-28"),
            Method::ResourcesList | Method::ResourceTemplatesList | Method::ResourcesRead
                if !self.offers(ListKind::Resources) =>
            {
                removed("this server offers no resources")
            }
            Method::PromptsList | Method::PromptsGet if self.prompts.get().is_empty() => {
                removed("this server offers no prompts")
            }
            Method::TasksGet | Method::TasksUpdate | Method::TasksCancel
                if !meta.declares_tasks() =>
            {
                Some(ErrorObject::missing_capability(
                    json!({ "extensions": { TASKS_EXTENSION: {} } }),
                ))
            }
            _ => None,
        }
    }

    /// `server/discover`.
    fn discover(&self) -> Value {
        let mut capabilities = self.capabilities();
        // Log messages are per request now (`logLevel`); list changes and resource updates
        // reach `subscriptions/listen` streams. Tasks when the runtime runs them.
        if self.tasks.is_some() {
            // SEP-2694: `tasks/stream` announced as the tasks' `eventStreams`.
            capabilities["extensions"][TASKS_EXTENSION] = json!({ "eventStreams": {} });
        }
        let mut result = json!({
            "supportedVersions": ProtocolVersion::supported(),
            "capabilities": capabilities,
        });
        if let Some(instructions) = &self.instructions {
            result["instructions"] = Value::String(instructions.clone());
        }
        result
    }

    /// A result as this revision sends it: `resultType`, caching hints where they belong,
    /// and who we are.
    fn finish(&self, method: Method, mut result: Value) -> Value {
        let Some(object) = result.as_object_mut() else {
            return result;
        };
        let complete = !object.contains_key("resultType");
        if complete {
            object.insert("resultType".into(), Value::from("complete"));
            if method.is_cacheable() {
                let settings = &self.stateless;
                object.insert("ttlMs".into(), Value::from(settings.cache_ttl_ms));
                object.insert(
                    "cacheScope".into(),
                    Value::from(settings.cache_scope.clone()),
                );
            }
        }
        let meta = object
            .entry("_meta")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(meta) = meta.as_object_mut() {
            meta.insert(
                SERVER_INFO.into(),
                serde_json::to_value(&self.info).unwrap_or_default(),
            );
        }
        result
    }

    /// Runs a method that may ask the client for input: with this round's answers, and
    /// ending with `input_required` when the handler waits for one it does not have. A
    /// `tools/call` may become a task instead (see [`super::tasks`]).
    async fn with_inputs(
        self: &Arc<Self>,
        method: Method,
        request: Request,
        meta: &RequestMeta,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let answers = self.answers(method, &request)?;
        let plan = match method {
            Method::ToolsCall => self.task_plan(&request, meta, ctx.principal(), ctx.client())?,
            _ => None,
        };
        let start_now = plan.as_ref().is_some_and(|p| !p.started_by_handler);
        let inputs = Arc::new(Inputs::new(
            answers,
            ctx.outbox().cloned(),
            plan.map(|p| p.starter),
        ));
        if start_now {
            inputs
                .start_task()
                .await
                .map_err(|e| ErrorObject::internal(e.to_string()))?;
        }
        let mut ctx = ctx.with_outbox(inputs.clone());
        if start_now {
            ctx = ctx.or_progress_token(Value::from("task"));
        }
        // Kept for the state of a next round; the handler takes the request.
        let params = request.params.clone();
        let server = self.clone();
        let work = Box::pin(async move { server.handle(request, ctx).await });
        match UntilInput::new(work, inputs.clone()).await {
            Ended::Done(Outgoing::Result { result, .. }) => Ok(result),
            Ended::Done(Outgoing::Error { error, .. }) => Err(error),
            Ended::Done(_) => Err(ErrorObject::internal("the handler gave no answer")),
            Ended::NeedsInput => {
                let state = self.stateless.key.seal(
                    method_name(method),
                    &params_digest(params.as_ref()),
                    &inputs.used(),
                    self.stateless.state_ttl,
                );
                Ok(json!({
                    "resultType": "input_required",
                    "inputRequests": inputs.missing(),
                    "requestState": state,
                }))
            }
            Ended::Task(task, work) => {
                let mut created = task.wire();
                created["resultType"] = Value::from("task");
                task.run(work);
                Ok(created)
            }
        }
    }

    /// The answers a round brings: those of earlier rounds (from the signed
    /// `requestState`) and this round's `inputResponses`.
    fn answers(
        &self,
        method: Method,
        request: &Request,
    ) -> Result<Map<String, Value>, ErrorObject> {
        let mut answers = match request.request_state() {
            None => Map::new(),
            Some(Value::String(state)) => self
                .stateless
                .key
                .open(state, method_name(method), &request.params_digest())
                .map_err(|e| ErrorObject::invalid_params(format!("Invalid params: {e}")))?,
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "Invalid params: requestState must be a string",
                ));
            }
        };
        match request.input_responses() {
            None => {}
            Some(Value::Object(responses)) => {
                for (key, response) in responses {
                    if !response.is_object() {
                        return Err(ErrorObject::invalid_params(format!(
                            "Invalid params: inputResponses.{key} must be an object (the client's result)"
                        )));
                    }
                    answers.insert(key.clone(), response.clone());
                }
            }
            Some(_) => {
                return Err(ErrorObject::invalid_params(
                    "Invalid params: inputResponses must be an object",
                ));
            }
        }
        Ok(answers)
    }
}

fn method_name(method: Method) -> &'static str {
    match method {
        Method::ToolsCall => "tools/call",
        Method::PromptsGet => "prompts/get",
        Method::ResourcesRead => "resources/read",
        _ => "",
    }
}

/// Errors as this revision has them: a missing resource is -32602 (it was -32002).
fn stateless_error(mut error: ErrorObject) -> ErrorObject {
    if error.code == super::RESOURCE_NOT_FOUND {
        error.code = ErrorObject::INVALID_PARAMS;
    }
    error
}
