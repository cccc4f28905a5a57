//! The MCP method table: turns a parsed request into handler calls and a JSON-RPC answer.
//! Knows MCP and the handler API; knows nothing of HTTP or the event store (for
//! `initialize` it only describes the session to create; the transport creates it).
//!
//! One table serves both protocol eras: [`McpServer::handle`] answers a request of a
//! 2025-11-25 session, [`McpServer::handle_stateless`] (in [`stateless`]) a 2026-07-28
//! request, with the same handlers.

mod exchange;
mod handover;
mod inputs;
mod listen;
mod outbox;
mod paging;
mod skills;
pub mod stateless;
mod streaming;
mod task_stream;
mod tasks;
mod trace;

use serde_json::Value;

use std::sync::Arc;

use crate::handler::builtin::{echo, stream_events};
use crate::handler::{
    BoxFuture, PromptError, PromptRegistry, RequestContext, ResourceError, ResourceRegistry,
    ToolError, ToolRegistry,
};
use crate::protocol::methods::{
    CallToolParams, CallToolResult, CompleteParams, CompletionArgument, CompletionRef,
    GetPromptParams, Icon, Implementation, InitializeParams, InitializeResult, ListKind, Method,
    ReadResourceResult, ResourceParams, SetLevelParams,
};
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, Outgoing, Request, Target};
use crate::session::{NewSession, SessionEffect};
pub(crate) use exchange::{Call, Exchange, Label, Opening, Told, guarded};
pub use handover::{HANDED_ON_NOTE, Handover};
use listen::Listen;
pub(crate) use outbox::{Announcer, Asking, PipeOutbox, note_payload};
use paging::page_value;
pub(crate) use streaming::{Refused, Step, StreamLimits, Streaming};
use task_stream::TaskStream;
pub(crate) use trace::Arrival;

/// Longest resource URI accepted in a subscription.
pub const MAX_URI_LEN: usize = 2048;

/// JSON-RPC error code for a resource that does not exist (MCP).
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// Largest `capabilities` plus `clientInfo` (serialized) accepted at `initialize`.
pub const MAX_CLIENT_DESCRIPTION: usize = 64 * 1024;

/// An MCP server: identity plus the tools it offers.
#[derive(Clone)]
pub struct McpServer {
    info: Implementation,
    instructions: Option<String>,
    tools: Live<ToolRegistry>,
    resources: Live<ResourceRegistry>,
    prompts: Live<PromptRegistry>,
    completer: Option<Completer>,
    skills: Option<Arc<crate::handler::SkillsDirectory>>,
    /// What a caller needs to list and read skills (`[auth]`); none by default.
    skill_scopes: Arc<[String]>,
    stateless: Arc<stateless::StatelessSettings>,
    news: crate::server_news::NewsHub,
    tasks: Option<crate::tasks::TaskHandle>,
    /// What streaming replies may hold.
    streams: StreamLimits,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("info", &self.info)
            .field("tools", &self.tools.get())
            .field("resources", &self.resources.get())
            .field("prompts", &self.prompts.get())
            .field("completion", &self.completer.is_some())
            .field("skills", &self.skills.is_some())
            .finish()
    }
}

/// Completes an argument value: `(what, argument, ctx) -> suggestions`.
pub type Completer = Arc<
    dyn Fn(CompletionRef, CompletionArgument, RequestContext) -> BoxFuture<'static, Vec<String>>
        + Send
        + Sync,
>;

/// A registry that can change while the server runs. Readers take a snapshot (an `Arc`
/// clone out of a `watch` channel, the same publication the actor slots use), so a change
/// never blocks or tears a request in progress; writers publish a whole new version.
#[derive(Clone)]
struct Live<T>(Arc<tokio::sync::watch::Sender<Arc<T>>>);

impl<T: Clone> Live<T> {
    fn new(value: T) -> Self {
        Self(Arc::new(tokio::sync::watch::Sender::new(Arc::new(value))))
    }

    fn get(&self) -> Arc<T> {
        self.0.borrow().clone()
    }

    fn update(&self, change: impl FnOnce(&mut T)) {
        self.0.send_modify(|current| {
            let mut next = (**current).clone();
            change(&mut next);
            *current = Arc::new(next);
        });
    }
}

/// Most suggestions one completion answer carries (the spec's limit).
const MAX_COMPLETIONS: usize = 100;

impl Default for McpServer {
    /// The default server: `echo` and `stream_events`.
    fn default() -> Self {
        let mut tools = ToolRegistry::default();
        tools.register(echo()).register(stream_events());
        Self::new(tools)
    }
}

impl McpServer {
    /// A server offering `tools`, named after this crate.
    pub fn new(tools: ToolRegistry) -> Self {
        Self {
            info: Implementation {
                name: env!("CARGO_PKG_NAME").into(),
                title: None,
                version: env!("CARGO_PKG_VERSION").into(),
                icons: Vec::new(),
            },
            instructions: None,
            tools: Live::new(tools),
            resources: Live::new(ResourceRegistry::default()),
            prompts: Live::new(PromptRegistry::default()),
            completer: None,
            skills: None,
            skill_scopes: Arc::new([]),
            stateless: Arc::default(),
            news: crate::server_news::NewsHub::default(),
            tasks: None,
            streams: StreamLimits::default(),
        }
    }

    /// Names the server in `serverInfo` (by default this crate's name and version), e.g.
    /// `McpServer::new(tools).named("weather", env!("CARGO_PKG_VERSION"))`.
    pub fn named(mut self, name: impl Into<String>, version: impl Into<String>) -> Self {
        self.info.name = name.into();
        self.info.version = version.into();
        self
    }

    /// The name a host shows people in `serverInfo` (`title`), beside `name`.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.info.title = Some(title.into());
        self
    }

    /// One more picture a host may show beside the server, in `serverInfo` (`icons`).
    pub fn icon(mut self, icon: Icon) -> Self {
        self.info.icons.push(icon);
        self
    }

    /// Who this server is.
    pub fn info(&self) -> &Implementation {
        &self.info
    }

    /// [`McpServer::info`] as the JSON a `serverInfo` field carries.
    pub(crate) fn info_json(&self) -> Value {
        serde_json::to_value(&self.info).unwrap_or(Value::Null)
    }

    /// True when the server offers list `kind` (tools always; resources and prompts when
    /// it has some; skills are resources).
    pub(crate) fn offers(&self, kind: ListKind) -> bool {
        match kind {
            ListKind::Tools => true,
            ListKind::Resources => !self.resources.get().is_empty() || self.skills.is_some(),
            ListKind::Prompts => !self.prompts.get().is_empty(),
        }
    }

    /// The scopes `request` needs (`[auth]`): those its tool, prompt or resource
    /// declares; none for any other method, or a target this server does not have (which
    /// gets its own error).
    pub(crate) fn required_scopes(&self, request: &Request) -> Arc<[String]> {
        match request.target() {
            Some(Target::Tool(name)) => self.tools.get().scopes(name),
            Some(Target::Prompt(name)) => self.prompts.get().scopes(name),
            Some(Target::Resource(uri)) => self.resource_scopes(uri),
            None => self.skills_method_scopes(request.kind),
        }
    }

    /// The scopes reading, or being told of changes to, resource `uri` needs (`[auth]`):
    /// what `resources/subscribe` checks, and what a `subscriptions/listen` stream's
    /// `resourceSubscriptions` are filtered by.
    pub(crate) fn resource_scopes(&self, uri: &str) -> Arc<[String]> {
        self.skill_file_scopes(uri)
            .unwrap_or_else(|| self.resources.get().scopes(uri))
    }

    /// What a call to tool `name` needs checked, if there is such a tool.
    pub(crate) fn tool_routing(&self, name: &str) -> Option<crate::handler::tools::ToolRouting> {
        self.tools.get().routing(name).cloned()
    }

    /// Where changes are announced to `subscriptions/listen` streams.
    pub(crate) fn news(&self) -> &crate::server_news::NewsHub {
        &self.news
    }

    /// Uses `hub` for announcements (the runtime sizes it from `[stateless]`).
    pub(crate) fn with_news(mut self, hub: crate::server_news::NewsHub) -> Self {
        self.news = hub;
        self
    }

    /// Offers `resources` (`resources/*` methods and the `resources` capability).
    pub fn with_resources(mut self, resources: ResourceRegistry) -> Self {
        self.resources = Live::new(resources);
        self
    }

    /// Offers `prompts` (`prompts/*` methods and the `prompts` capability).
    pub fn with_prompts(mut self, prompts: PromptRegistry) -> Self {
        self.prompts = Live::new(prompts);
        self
    }

    /// Answers `completion/complete` with `complete` (and offers the `completions`
    /// capability).
    pub fn with_completion<F, Fut>(mut self, complete: F) -> Self
    where
        F: Fn(CompletionRef, CompletionArgument, RequestContext) -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Vec<String>> + Send + 'static,
    {
        self.completer = Some(Arc::new(move |r, a, ctx| Box::pin(complete(r, a, ctx))));
        self
    }

    /// Changes the tools while the server runs (use [`crate::App::update_tools`], which
    /// also tells the clients).
    pub(crate) fn update_tools(&self, change: impl FnOnce(&mut ToolRegistry)) {
        self.tools.update(change);
        self.news
            .publish(crate::server_news::ServerNews::ListChanged {
                list: ListKind::Tools,
            });
    }

    /// Changes the resources while the server runs (see [`crate::App::update_resources`]).
    pub(crate) fn update_resources(&self, change: impl FnOnce(&mut ResourceRegistry)) {
        self.resources.update(change);
        self.news
            .publish(crate::server_news::ServerNews::ListChanged {
                list: ListKind::Resources,
            });
    }

    /// Changes the prompts while the server runs (see [`crate::App::update_prompts`]).
    pub(crate) fn update_prompts(&self, change: impl FnOnce(&mut PromptRegistry)) {
        self.prompts.update(change);
        self.news
            .publish(crate::server_news::ServerNews::ListChanged {
                list: ListKind::Prompts,
            });
    }

    /// Sets the `instructions` sent at `initialize`.
    pub fn with_instructions(mut self, instructions: impl Into<String>) -> Self {
        self.instructions = Some(instructions.into());
        self
    }

    fn capabilities(&self) -> Value {
        let mut caps = serde_json::json!({ "tools": { "listChanged": true }, "logging": {} });
        if !self.resources.get().is_empty() {
            caps["resources"] = serde_json::json!({ "subscribe": true, "listChanged": true });
        } else if self.skills.is_some() {
            caps["resources"] = serde_json::json!({});
        }
        if !self.prompts.get().is_empty() {
            caps["prompts"] = serde_json::json!({ "listChanged": true });
        }
        if self.completer.is_some() {
            caps["completions"] = serde_json::json!({});
        }
        if let Some((id, settings)) = self.skills_extension() {
            caps["extensions"] = serde_json::json!({ id: settings });
        }
        caps
    }

    /// Answers `initialize`: the result to send and the session to create.
    pub(crate) fn initialize(
        &self,
        request: Request,
    ) -> Result<(InitializeResult, NewSession), ErrorObject> {
        let params: InitializeParams = request.into_params()?;
        // Kept for the session's lifetime, so bounded well below the body limit.
        let kept = serde_json::to_vec(&params.capabilities).map_or(0, |v| v.len())
            + serde_json::to_vec(&params.client_info).map_or(0, |v| v.len());
        if kept > MAX_CLIENT_DESCRIPTION {
            return Err(ErrorObject::invalid_params(format!(
                "capabilities and clientInfo together exceed {MAX_CLIENT_DESCRIPTION} bytes"
            )));
        }
        let version = ProtocolVersion::negotiate(&params.protocol_version);
        let result = InitializeResult {
            protocol_version: version.as_str().into(),
            capabilities: self.capabilities(),
            server_info: self.info.clone(),
            instructions: self.instructions.clone(),
        };
        let lists = ListKind::ALL
            .into_iter()
            .filter(|kind| self.offers(*kind))
            .collect();
        let session = NewSession {
            lists,
            protocol_version: version,
            client_capabilities: std::sync::Arc::new(params.capabilities),
            client_info: params.client_info,
            client: None,
            owner: None,
        };
        Ok((result, session))
    }

    /// The `progressToken` of a request, if it is a `tools/call` carrying one.
    pub(crate) fn progress_token(request: &Request) -> Option<Value> {
        if request.kind != Method::ToolsCall {
            return None;
        }
        request.progress_token().cloned()
    }

    /// True when `resources/subscribe` to `uri` succeeds: a resource (or template) we
    /// serve, with a URI of at most [`MAX_URI_LEN`] bytes. Subscriptions to anything else
    /// would only be memory a client can fill.
    pub(crate) fn accepts_subscription(&self, uri: &str) -> bool {
        uri.len() <= MAX_URI_LEN && self.resources.get().contains(uri)
    }

    /// The change to session state `request` makes, when it makes one and the server
    /// will answer it with success: the transport, which owns the sessions, applies it
    /// before the handler runs; the server then only answers.
    pub(crate) fn session_effect(&self, request: &Request) -> Option<SessionEffect> {
        match request.kind {
            Method::SetLevel => request
                .params_as::<SetLevelParams>()
                .ok()
                .map(|p| SessionEffect::LogLevel(p.level)),
            Method::ResourcesSubscribe => request
                .uri()
                .filter(|uri| self.accepts_subscription(uri))
                .map(|uri| SessionEffect::Subscribe(uri.to_owned())),
            Method::ResourcesUnsubscribe => request
                .uri()
                .map(|uri| SessionEffect::Unsubscribe(uri.to_owned())),
            _ => None,
        }
    }

    /// Answers one request (other than `initialize`, which needs a session first).
    pub(crate) async fn handle(&self, request: Request, ctx: RequestContext) -> Outgoing {
        let id = request.id.clone();
        // Lists show a caller only what its scopes allow (everything without `[auth]`).
        let caller = ctx.principal().map(|p| &**p);
        let result = match request.kind {
            Method::Ping => Ok(Value::Object(Default::default())),
            Method::ToolsList => page_value("tools", &self.tools.get().list_for(caller), &request),
            Method::ResourcesList => {
                page_value("resources", &self.listed_resources(caller), &request)
            }
            Method::ResourceTemplatesList => page_value(
                "resourceTemplates",
                &self.resources.get().list_templates_for(caller),
                &request,
            ),
            Method::ResourcesRead => self.read_resource(request, ctx).await,
            // Subscriptions are session state, recorded by the transport when the answer
            // is a success (see `accepts_subscription`); here only the answer is made.
            Method::ResourcesSubscribe => request.into_params::<ResourceParams>().and_then(|p| {
                if p.uri.len() > MAX_URI_LEN {
                    Err(ErrorObject::invalid_params(format!(
                        "uri is longer than {MAX_URI_LEN} bytes"
                    )))
                } else if !self.accepts_subscription(&p.uri) {
                    Err(ErrorObject {
                        code: RESOURCE_NOT_FOUND,
                        message: format!("Resource not found: {}", p.uri),
                        data: Some(serde_json::json!({ "uri": p.uri })),
                    })
                } else {
                    Ok(Value::Object(Default::default()))
                }
            }),
            Method::ResourcesUnsubscribe => request
                .into_params::<ResourceParams>()
                .map(|_| Value::Object(Default::default())),
            Method::PromptsList => {
                page_value("prompts", &self.prompts.get().list_for(caller), &request)
            }
            Method::PromptsGet => self.get_prompt(request, ctx).await,
            Method::SkillsList | Method::SkillsGet | Method::ResourcesDirectoryRead => {
                self.skills_method(request)
            }
            Method::Complete => self.complete(request, ctx).await,
            Method::ToolsCall => self.call_tool(request, ctx).await,
            // The session's level was set by the transport before this call (it owns
            // session state); here only the answer is made.
            Method::SetLevel => request
                .params_as::<SetLevelParams>()
                .map(|_| Value::Object(Default::default())),
            Method::Initialize => Err(ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Invalid request: the session is already initialized",
            )),
            Method::Discover
            | Method::Listen
            | Method::TasksGet
            | Method::TasksUpdate
            | Method::TasksCancel
            | Method::TasksStream
            | Method::Unknown => Err(ErrorObject::method_not_found(&request.method)),
        };
        match result {
            Ok(result) => Outgoing::Result { id, result },
            Err(error) => Outgoing::Error {
                id: Some(id),
                error,
            },
        }
    }

    async fn read_resource(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params: ResourceParams = request.into_params()?;
        if let Some(contents) = self.read_skill_file(&params.uri) {
            return to_value(&ReadResourceResult {
                contents: vec![contents],
            });
        }
        let resources = self.resources.get();
        match resources.read(&params.uri, ctx).await {
            Ok(contents) => to_value(&ReadResourceResult { contents }),
            Err(ResourceError::NotFound(uri)) => Err(ErrorObject {
                code: RESOURCE_NOT_FOUND,
                message: format!("Resource not found: {uri}"),
                data: Some(serde_json::json!({ "uri": uri })),
            }),
            Err(ResourceError::Failed(why)) => Err(ErrorObject::internal(why)),
        }
    }

    async fn get_prompt(
        &self,
        request: Request,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params: GetPromptParams = request.into_params()?;
        let prompts = self.prompts.get();
        match prompts.get(&params.name, params.arguments, ctx).await {
            Ok(result) => to_value(&result),
            Err(PromptError::InvalidParams(why)) => Err(ErrorObject::invalid_params(why)),
            Err(PromptError::Failed(why)) => Err(ErrorObject::internal(why)),
        }
    }

    async fn complete(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let params: CompleteParams = request.into_params()?;
        let mut values = match &self.completer {
            Some(complete) => complete(params.reference, params.argument, ctx).await,
            None => return Err(ErrorObject::method_not_found("completion/complete")),
        };
        let total = values.len();
        values.truncate(MAX_COMPLETIONS);
        Ok(serde_json::json!({ "completion": {
            "values": values, "total": total, "hasMore": total > MAX_COMPLETIONS } }))
    }

    async fn call_tool(&self, request: Request, ctx: RequestContext) -> Result<Value, ErrorObject> {
        let params: CallToolParams = request.into_params()?;
        let tool =
            self.tools.get().get(&params.name).ok_or_else(|| {
                ErrorObject::invalid_params(format!("Unknown tool: {}", params.name))
            })?;
        match tool.call(params.arguments, ctx).await {
            Ok(result) => to_value(&result),
            // A tool result, not a protocol error, so the model reads what to correct
            // (SEP-1303); both eras, and a task ends `completed` with it.
            Err(ToolError::InvalidArguments(why)) => to_value(&CallToolResult::error(format!(
                "Invalid arguments for tool {}: {why}",
                params.name
            ))),
            Err(ToolError::Failed(why)) => to_value(&CallToolResult::error(why)),
            Err(ToolError::Internal(why)) => Err(ErrorObject::internal(why)),
            Err(ToolError::MissingCapability(required)) => {
                Err(ErrorObject::missing_capability(required))
            }
        }
    }
}

pub(super) fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ErrorObject> {
    serde_json::to_value(value).map_err(|e| ErrorObject::internal(e.to_string()))
}
