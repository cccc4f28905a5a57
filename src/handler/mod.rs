//! The handler API: what a tool implementation sees. No HTTP, no JSON-RPC envelopes, no
//! event store: a tool gets its arguments and a [`RequestContext`] through which it reports
//! progress and asks the client things (sampling, elicitation, roots); where those messages
//! go (a resumable SSE stream, or nowhere) and how answers come back is the runtime's
//! business.

pub mod builtin;
pub mod fs;
pub(crate) mod prompts;
pub(crate) mod registry;
pub(crate) mod resources;
pub(crate) mod scopes;
pub mod skills;
pub(crate) mod tools;
pub(crate) mod typed;

// How the runtime carries what a handler says: public to the crate's own tests only.
internal! {
    mod outbox;
}

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::auth::Principal;
use crate::ids::SessionId;
use crate::protocol::ErrorObject;
use crate::protocol::client::{
    ClientRequest, ElicitResult, Elicitation, ListRoots, Root, Sampling, SamplingResult, satisfies,
};
use crate::protocol::methods::{ListKind, LogThreshold, LoggingLevel, ServerRequest};

pub(crate) use outbox::{Note, Outbox};
pub use prompts::{IntoPromptResult, Prompt, PromptError, PromptRegistry, prompt};
pub use resources::{ResourceError, ResourceRegistry};
pub use skills::{SkillsBuilder, SkillsDirectory, SkillsError, SkillsLimits};
pub use tools::{Tool, ToolError, ToolRegistry, optional_u64, required_str};
pub use typed::{IntoToolResult, Json, tool};

/// A boxed, sendable future: the return type of object-safe async methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A notification could not be delivered (the stream or the store is gone).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("notification not delivered: {0}")]
pub struct NotifyError(pub String);

/// A request to the client got no answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ClientRequestError {
    /// The client answered with an error.
    #[error("the client refused: {} ({})", .0.message, .0.code)]
    Rejected(ErrorObject),
    /// No answer within `server.client_request_timeout`.
    #[error("the client did not answer in time")]
    Timeout,
    /// The request could not be sent or its answer cannot arrive (no stream, session
    /// ended, too many unanswered requests).
    #[error("cannot ask the client: {0}")]
    Unavailable(String),
    /// The client did not declare the capability this request needs (the capabilities
    /// object it would have to declare), so it was not asked.
    #[error("the client did not declare the capability {0}")]
    NotDeclared(Value),
    /// The client's answer does not have the shape the request's answer has.
    #[error("the client's answer is malformed: {0}")]
    Malformed(String),
}

/// What a handler knows about the request it serves.
#[derive(Clone, Default)]
pub struct RequestContext {
    progress_token: Option<Value>,
    outbox: Option<Arc<dyn Outbox>>,
    log_level: Arc<LogThreshold>,
    /// False on a stateless request that did not ask for log messages.
    logs_wanted: bool,
    client_capabilities: Arc<Value>,
    /// Who is calling (`[auth]`); `None` without authentication.
    principal: Option<Arc<Principal>>,
    /// The session the request belongs to; `None` on a stateless request or a task.
    session: Option<SessionId>,
    /// The client's address (HTTP), for what is counted per client without `[auth]`.
    client: Option<std::net::IpAddr>,
}

impl std::fmt::Debug for RequestContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestContext")
            .field("progress_token", &self.progress_token)
            .field("has_stream", &self.outbox.is_some())
            .finish()
    }
}

impl RequestContext {
    /// A context whose messages go to `outbox` (`None`: the response is not streamed).
    pub(crate) fn new(progress_token: Option<Value>, outbox: Option<Arc<dyn Outbox>>) -> Self {
        Self {
            progress_token,
            outbox,
            log_level: Arc::default(),
            logs_wanted: true,
            client_capabilities: Arc::default(),
            principal: None,
            session: None,
            client: None,
        }
    }

    /// The client's address, where the request came over HTTP.
    pub(crate) fn client(&self) -> Option<std::net::IpAddr> {
        self.client
    }

    /// The same context for a request from `client`.
    pub(crate) fn with_client(mut self, client: Option<std::net::IpAddr>) -> Self {
        self.client = client;
        self
    }

    /// The verified caller: subject, scopes and every claim of its token, for a handler's
    /// own decisions. `None` when `[auth]` is off.
    pub fn principal(&self) -> Option<&Arc<Principal>> {
        self.principal.as_ref()
    }

    /// The same context on behalf of `principal`.
    pub(crate) fn with_principal(mut self, principal: Option<Arc<Principal>>) -> Self {
        self.principal = principal;
        self
    }

    /// The session this request belongs to (2025-11-25 and older); `None` for a
    /// stateless request or a task. For a handler that keeps per-session state or limits.
    pub fn session(&self) -> Option<SessionId> {
        self.session
    }

    /// The same context within `session`.
    pub(crate) fn with_session(mut self, session: SessionId) -> Self {
        self.session = Some(session);
        self
    }

    /// This context's outbox, for a runtime that wraps it (see the stateless path's
    /// multi round-trip inputs).
    pub(crate) fn outbox(&self) -> Option<&Arc<dyn Outbox>> {
        self.outbox.as_ref()
    }

    /// The same context reporting progress under `token` when the client sent none: a
    /// task records its progress for `tasks/stream` whether or not the call asked for it.
    pub(crate) fn or_progress_token(mut self, token: Value) -> Self {
        self.progress_token.get_or_insert(token);
        self
    }

    /// The same context with its messages going to `outbox`.
    pub(crate) fn with_outbox(mut self, outbox: Arc<dyn Outbox>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// Log messages only at `level` and above, or none at all (`None`): a stateless
    /// request opts in to log messages per request.
    pub(crate) fn with_request_log_level(mut self, level: Option<LoggingLevel>) -> Self {
        match level {
            Some(level) => {
                let threshold = LogThreshold::default();
                threshold.set(level);
                self.log_level = Arc::new(threshold);
            }
            None => self.logs_wanted = false,
        }
        self
    }

    /// The capabilities the client declared (at `initialize`, or on this request).
    pub fn client_capabilities(&self) -> &Value {
        &self.client_capabilities
    }

    /// Records what the client said it supports at `initialize`.
    pub(crate) fn with_client_capabilities(mut self, capabilities: Arc<Value>) -> Self {
        self.client_capabilities = capabilities;
        self
    }

    /// True when the client declared capability `name` (e.g. `sampling`, `elicitation`,
    /// `roots`) at `initialize`.
    pub fn client_supports(&self, name: &str) -> bool {
        self.client_capabilities
            .get(name)
            .is_some_and(|c| !c.is_null())
    }

    /// Shares the session's log threshold (`logging/setLevel`; unset: everything).
    /// [`RequestContext::log`] reads it at every call, so a later change applies to this
    /// request too.
    pub(crate) fn with_log_level(mut self, level: Arc<LogThreshold>) -> Self {
        self.log_level = level;
        self
    }

    /// Sends a log message to the client (`notifications/message`) if `level` is at least
    /// the level the client set. Does nothing when the response is not streamed.
    pub async fn log(
        &self,
        level: LoggingLevel,
        logger: Option<&str>,
        data: Value,
    ) -> Result<(), NotifyError> {
        if !self.logs_wanted || self.log_level.get().is_some_and(|min| level < min) {
            return Ok(());
        }
        match &self.outbox {
            Some(outbox) => {
                let logger = logger.map(str::to_owned);
                outbox
                    .notify(Note::Log {
                        level,
                        logger,
                        data,
                    })
                    .await
            }
            None => Ok(()),
        }
    }

    /// Logs `message` at [`LoggingLevel::Info`], without a logger name: the short form of
    /// [`RequestContext::log`].
    pub async fn info(&self, message: impl Into<String>) -> Result<(), NotifyError> {
        self.log(LoggingLevel::Info, None, Value::String(message.into()))
            .await
    }

    /// Logs `message` at [`LoggingLevel::Warning`] (see [`RequestContext::info`]).
    pub async fn warn(&self, message: impl Into<String>) -> Result<(), NotifyError> {
        self.log(LoggingLevel::Warning, None, Value::String(message.into()))
            .await
    }

    /// Logs `message` at [`LoggingLevel::Debug`] (see [`RequestContext::info`]).
    pub async fn debug(&self, message: impl Into<String>) -> Result<(), NotifyError> {
        self.log(LoggingLevel::Debug, None, Value::String(message.into()))
            .await
    }

    /// True when the client asked for progress (sent a `progressToken`).
    pub fn wants_progress(&self) -> bool {
        self.progress_token.is_some()
    }

    /// Reports progress. Does nothing when the client sent no `progressToken` or the
    /// response is not streamed.
    pub async fn progress(
        &self,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) -> Result<(), NotifyError> {
        let (Some(token), Some(outbox)) = (&self.progress_token, &self.outbox) else {
            return Ok(());
        };
        outbox
            .notify(Note::Progress {
                token: token.clone(),
                progress,
                total,
                message,
            })
            .await
    }

    /// SSE polling (MCP 2025-11-25): closes the client's connection now, with a `retry:`
    /// hint, while this request keeps running; everything sent afterwards, the response
    /// included, is stored and reaches the client when it reconnects with `Last-Event-ID`.
    /// Frees the connection during long waits. Returns whether a connection was closed.
    pub async fn close_connection(&self) -> bool {
        match &self.outbox {
            Some(outbox) => outbox.close_connection().await,
            None => false,
        }
    }

    /// Announces that resource `uri` changed: every session subscribed to it (not only
    /// this one) gets `notifications/resources/updated` on its standalone GET stream,
    /// stored and resumable like any event. Returns how many sessions were told.
    pub async fn notify_resource_updated(
        &self,
        uri: impl Into<String>,
    ) -> Result<usize, NotifyError> {
        match &self.outbox {
            Some(outbox) => outbox.resource_updated(uri.into()).await,
            None => Err(NotifyError("the response is not streamed".into())),
        }
    }

    /// Announces that list `kind` (tools, prompts, resources) changed, to every session
    /// (on its standalone stream) and every `subscriptions/listen` stream that asked.
    /// Returns how many sessions were told. (A runtime change of the list itself goes
    /// through [`crate::App::update_tools`] and its siblings, which announce it too.)
    pub async fn notify_list_changed(&self, kind: ListKind) -> Result<usize, NotifyError> {
        match &self.outbox {
            Some(outbox) => outbox.list_changed(kind).await,
            None => Err(NotifyError("the response is not streamed".into())),
        }
    }

    /// Sends a notification of the server's own (a `method` MCP does not define, which
    /// clients that do not know it ignore) on the request's stream: stored and resumable
    /// like progress. Does nothing when the response is not streamed.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), NotifyError> {
        match &self.outbox {
            Some(outbox) => {
                let method = method.to_owned();
                outbox.notify(Note::Custom { method, params }).await
            }
            None => Ok(()),
        }
    }

    /// Becomes a task now, when the request can (a 2026-07-28 request that declared the
    /// tasks extension, for a tool that may run as a task): the client gets the task's
    /// id at once, and the handler goes on as the task, its questions answered by
    /// `tasks/update`. For a tool registered as starting its task itself,
    /// after it has asked in the request what it needs to begin. Returns whether it is a
    /// task (false: it goes on answering the request, which is always allowed).
    pub async fn start_task(&self) -> Result<bool, ClientRequestError> {
        match &self.outbox {
            Some(outbox) => outbox.start_task().await,
            None => Ok(false),
        }
    }

    /// Asks the user to fill a form (or visit a URL) and waits for the answer. See
    /// [`RequestContext::ask`].
    pub async fn elicit(&self, request: Elicitation) -> Result<ElicitResult, ClientRequestError> {
        self.ask(request).await
    }

    /// Asks the client's model and waits for its answer. See [`RequestContext::ask`].
    pub async fn sample(&self, request: Sampling) -> Result<SamplingResult, ClientRequestError> {
        self.ask(request).await
    }

    /// Asks which roots the client exposes. See [`RequestContext::ask`].
    pub async fn list_roots(&self) -> Result<Vec<Root>, ClientRequestError> {
        Ok(self.ask(ListRoots {}).await?.roots)
    }

    /// Asks the client something and waits for its answer. The same call works in every
    /// protocol era:
    /// - on a 2025-11-25 session it is a server→client request on this request's stream,
    ///   stored like any event (it survives a disconnect), answered by POST;
    /// - on a stateless (2026-07-28) request it becomes one of the `inputRequests` of an
    ///   `input_required` result, and the handler runs again when the client retries with
    ///   the answer: a handler must therefore ask the same things in the same order each
    ///   time it runs, and do nothing it cannot repeat before its last question;
    /// - inside a task it sets the task to `input_required` until `tasks/update` answers.
    ///
    /// A client that did not declare the capability the request needs is not asked:
    /// [`ClientRequestError::NotDeclared`] (which a tool's `?` turns into -32021).
    pub async fn ask<R: ClientRequest>(&self, request: R) -> Result<R::Answer, ClientRequestError> {
        self.ask_as(None, request).await
    }

    /// [`RequestContext::ask`] with the key this input has among a stateless request's
    /// `inputRequests` (default: one made from the order of asking).
    pub async fn ask_as<R: ClientRequest>(
        &self,
        key: Option<&str>,
        request: R,
    ) -> Result<R::Answer, ClientRequestError> {
        let required = request.required_capability();
        if !satisfies(&self.client_capabilities, &required) {
            return Err(ClientRequestError::NotDeclared(required));
        }
        let params = serde_json::to_value(&request)
            .map_err(|e| ClientRequestError::Unavailable(e.to_string()))?;
        let answer = self
            .send(ServerRequest {
                method: R::METHOD.into(),
                params: Some(params),
                key: key.map(str::to_owned),
            })
            .await?;
        serde_json::from_value(answer).map_err(|e| ClientRequestError::Malformed(e.to_string()))
    }

    /// Asks the client something untyped (`method`, `params`) and waits for its answer;
    /// prefer [`RequestContext::ask`], which also checks the client's capabilities.
    pub async fn request(
        &self,
        method: impl Into<String>,
        params: Option<Value>,
    ) -> Result<Value, ClientRequestError> {
        self.send(ServerRequest {
            method: method.into(),
            params,
            key: None,
        })
        .await
    }

    async fn send(&self, request: ServerRequest) -> Result<Value, ClientRequestError> {
        let Some(outbox) = &self.outbox else {
            return Err(ClientRequestError::Unavailable(
                "the response is not streamed, so the client cannot be asked".into(),
            ));
        };
        outbox.request(request).await
    }
}
