//! One incoming message, decided once for whatever transport carries it.
//!
//! Architecture invariant: the transport knows bytes and connections, the server knows
//! methods. A transport parses a message, hands it to [`McpServer::exchange`] and acts on
//! what comes back: for a request, a [`Call`] that says at once everything the transport
//! needs before the handler runs (what the span names, the scopes its target declares,
//! the change to session state it makes, whether another replica may run it again, its
//! progress token), then runs it; for a notification, what it asks of the transport
//! ([`Told`]). No transport matches on a method.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::Value;

use super::{Handover, McpServer};
use crate::auth::{HandedPrincipal, Principal};
use crate::handler::{BoxFuture, Outbox, RequestContext};
use crate::protocol::meta::{HeaderParam, RequestMeta};
use crate::protocol::methods::{Method, NotificationKind};
use crate::protocol::{ErrorObject, Incoming, Notification, Outgoing, Request, RequestId};
use crate::session::{NewSession, SessionEffect};
use crate::telemetry::durations::Target;

/// An incoming message, as the server reads it.
pub(crate) enum Exchange {
    /// A request, ready to run.
    Call(Call),
    /// A notification, and what it asks.
    Told(Told),
    /// A client's answer to a question of ours.
    Answer {
        /// Our question's id.
        id: RequestId,
        /// Its result, or the client's error.
        outcome: Result<Value, ErrorObject>,
    },
}

/// What an operation's span and metrics name: only known methods and registered targets,
/// so a client cannot mint new series.
#[derive(Debug, Clone)]
pub(crate) struct Label {
    /// The method (or notification) if it is one the conventions know.
    pub(crate) known: Option<&'static str>,
    /// The registered tool or prompt it targets.
    pub(crate) target: Target,
    /// The span's name when it has a target (`tools/call echo`).
    pub(crate) span_name: Option<Arc<str>>,
}

impl Label {
    /// Nothing to name.
    pub(super) fn none() -> Self {
        Self {
            known: None,
            target: Target::None,
            span_name: None,
        }
    }
}

/// How a request relates to the session era's session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Opening {
    /// `initialize`: it opens one.
    Opens,
    /// Served without one (`ping` over stdio).
    Free,
    /// Needs one.
    Within,
}

/// A request, with what the transport must know before its handler runs.
pub(crate) struct Call {
    server: Arc<McpServer>,
    request: Request,
    pub(super) label: Label,
    effect: Option<SessionEffect>,
    rerunnable: bool,
    /// The arguments a tool's `Mcp-Param-*` headers mirror, when it has any.
    header_params: Option<Arc<[HeaderParam]>>,
}

/// What a notification asks of the transport.
pub(crate) enum Told {
    /// `notifications/cancelled`: cancel that request.
    Cancel(RequestId, Notification),
    /// Anything else: nothing to do but trace it.
    Nothing(Notification),
}

impl McpServer {
    /// Reads `message`: the one call a transport makes into the server before a handler
    /// runs.
    pub(crate) fn exchange(self: &Arc<Self>, message: Incoming) -> Exchange {
        match message {
            Incoming::Request(request) => Exchange::Call(self.call(request)),
            Incoming::Notification(note) => Exchange::Told(Told::read(note)),
            Incoming::Response { id, outcome } => Exchange::Answer { id, outcome },
        }
    }

    /// Decides `request` at once: one look at the registries.
    pub(crate) fn call(self: &Arc<Self>, request: Request) -> Call {
        let mut label = Label {
            known: request.kind.name(),
            ..Label::none()
        };
        let mut rerunnable = false;
        let mut header_params = None;
        match request.kind {
            Method::ToolsCall => {
                let tools = self.tools.get();
                if let Some(routing) = request.name().and_then(|name| tools.routing(name)) {
                    label.target = Target::Tool(routing.name.clone());
                    label.span_name = Some(routing.span_name.clone());
                    rerunnable = routing.tasks.rerunnable;
                    header_params =
                        (!routing.header_params.is_empty()).then(|| routing.header_params.clone());
                }
            }
            Method::PromptsGet => {
                if let Some(name) = request.name()
                    && self.prompts.get().contains(name)
                {
                    label.target = Target::Prompt(name.into());
                    label.span_name = Some(format!("prompts/get {name}").into());
                }
            }
            _ => {}
        }
        let effect = self.session_effect(&request);
        Call {
            server: self.clone(),
            request,
            label,
            effect,
            rerunnable,
            header_params,
        }
    }
}

impl Told {
    fn read(note: Notification) -> Self {
        if note.kind() == Some(NotificationKind::Cancelled)
            && let Some(id) = note.cancelled_request()
        {
            return Self::Cancel(id, note);
        }
        Self::Nothing(note)
    }

    /// The notification itself.
    pub(crate) fn notification(&self) -> &Notification {
        match self {
            Self::Cancel(_, note) | Self::Nothing(note) => note,
        }
    }
}

impl Call {
    /// The request as parsed.
    pub(crate) fn request(&self) -> &Request {
        &self.request
    }

    /// Its id.
    pub(crate) fn id(&self) -> &RequestId {
        &self.request.id
    }

    /// The scopes its target declares (`[auth]`; asked only then).
    pub(crate) fn scopes(&self) -> Arc<[String]> {
        self.server.required_scopes(&self.request)
    }

    /// The arguments its tool's `Mcp-Param-*` headers must mirror (2026-07-28).
    pub(crate) fn header_params(&self) -> Option<&[HeaderParam]> {
        self.header_params.as_deref()
    }

    /// How it relates to a session of the session era.
    pub(crate) fn opening(&self) -> Opening {
        match self.request.kind {
            Method::Initialize => Opening::Opens,
            Method::Ping => Opening::Free,
            _ => Opening::Within,
        }
    }

    /// The change to session state it makes, applied by whoever owns the session before
    /// the handler runs.
    pub(crate) fn effect(&self) -> Option<&SessionEffect> {
        self.effect.as_ref()
    }

    /// What another replica needs to run it again, if it calls a tool declared
    /// re-runnable.
    pub(crate) fn handover(&self, principal: Option<&Arc<Principal>>) -> Option<Handover> {
        self.rerunnable.then(|| Handover {
            params: self.request.params.clone().unwrap_or(Value::Null),
            principal: principal.map(|p| HandedPrincipal::from(p.as_ref())),
        })
    }

    /// The handler's context, its notes going to `outbox`; a `tools/call`'s progress
    /// token in it.
    pub(crate) fn context(&self, outbox: Option<Arc<dyn Outbox>>) -> RequestContext {
        RequestContext::new(McpServer::progress_token(&self.request), outbox)
    }

    /// Answers `initialize`: the result, and the session to open.
    pub(crate) fn initialize(self) -> Result<(Value, NewSession), ErrorObject> {
        let (result, session) = self.server.initialize(self.request)?;
        let result = super::to_value(&result)?;
        Ok((result, session))
    }

    /// Runs the handler of a session-era request, its panic answered as an internal
    /// error.
    pub(crate) async fn run(self, ctx: RequestContext) -> Outgoing {
        let id = self.request.id.clone();
        guarded(id, Box::pin(self.server.handle(self.request, ctx))).await
    }

    /// Runs a 2026-07-28 request whose `_meta` was read as `meta`, its panic answered as
    /// an internal error.
    pub(crate) async fn run_stateless(self, meta: &RequestMeta, ctx: RequestContext) -> Outgoing {
        let id = self.request.id.clone();
        guarded(
            id,
            Box::pin(self.server.handle_stateless(self.request, meta, ctx)),
        )
        .await
    }

    /// True when its reply streams (its method's spec says so): open it with
    /// [`Call::open_stream`]. Otherwise it is answered once, perhaps after notes.
    pub(crate) fn streams(&self) -> bool {
        self.request.kind.spec().streams
    }

    /// The server and the request, to open a streaming reply.
    pub(super) fn into_parts(self) -> (Arc<McpServer>, Request) {
        (self.server, self.request)
    }
}

/// `work`, its panic answered as an internal error to `id`: a buggy tool must not leave
/// its client waiting for an answer that never comes.
pub(crate) async fn guarded(id: RequestId, work: BoxFuture<'_, Outgoing>) -> Outgoing {
    match CatchUnwind(work).await {
        Ok(answer) => answer,
        Err(()) => {
            tracing::error!(request_id = %id, "handler panicked");
            Outgoing::Error {
                id: Some(id),
                error: ErrorObject::internal("the handler failed unexpectedly"),
            }
        }
    }
}

/// A handler's future with its panic contained: `Err(())` if it panicked.
struct CatchUnwind<'a>(BoxFuture<'a, Outgoing>);

impl Future for CatchUnwind<'_> {
    type Output = Result<Outgoing, ()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let inner = &mut self.0;
        match std::panic::catch_unwind(AssertUnwindSafe(|| inner.as_mut().poll(cx))) {
            Ok(Poll::Ready(answer)) => Poll::Ready(Ok(answer)),
            Ok(Poll::Pending) => Poll::Pending,
            Err(_) => Poll::Ready(Err(())),
        }
    }
}
