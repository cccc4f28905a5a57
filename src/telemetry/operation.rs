//! One MCP operation as the OpenTelemetry MCP semantic conventions describe it: a SERVER
//! span named `{mcp.method.name} {target}`, and one observation of
//! `mcp.server.operation.duration` when it ends, with the same attributes.
//!
//! The transport begins an [`Operation`] once it has parsed the message, and moves it
//! with the work: it ends when the answer is known (stored, or sent as JSON), or as
//! `cancelled` when the work is dropped unanswered.
//!
//! Series of the histogram are keyed by method, tool or prompt, protocol version and
//! error type. Only registered tools and prompts name a series (the caller checks), and
//! past [`super::series::MAX_SERIES`] new label sets share one `_OTHER` series, so memory stays bounded
//! whatever clients send.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::SpanContext;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::durations::{Carrier, OPERATIONS, OTHER, OperationLabels, Target};
use crate::protocol::{Outgoing, RequestId};

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// Answered with a result.
    Ok,
    /// A tool answered with `isError: true`.
    ToolError,
    /// Answered with a JSON-RPC error.
    Error {
        /// Its code.
        code: i64,
        /// Its message (the span status description).
        message: &'a str,
    },
    /// Refused at the HTTP level before any answer (unknown session, too busy, ...).
    Rejected {
        /// The HTTP status.
        status: u16,
        /// Why.
        message: &'a str,
    },
    /// Dropped unanswered (the client cancelled, or its session or stream ended).
    Cancelled,
}

/// Where an operation begins.
#[derive(Debug, Clone)]
pub struct Start<'a> {
    /// The method if it is one we know (`None`: `_OTHER`).
    pub known: Option<&'static str>,
    /// Its target, if registered.
    pub target: Target,
    /// The span's name when it has a target (`tools/call echo`), made once per target.
    pub span_name: Option<Arc<str>>,
    /// The JSON-RPC id, for requests.
    pub request_id: Option<&'a RequestId>,
    /// The negotiated or requested protocol version, when known now.
    pub version: Option<&'static str>,
    /// What carried it.
    pub carrier: Carrier,
    /// The address the request arrived on.
    pub local: Option<SocketAddr>,
}

/// An operation under way: its span, and its clock for the histogram.
#[derive(Debug)]
pub struct Operation {
    span: tracing::Span,
    started: Instant,
    method: &'static str,
    target: Target,
    version: &'static str,
    carrier: Carrier,
    done: bool,
}

impl Operation {
    /// Opens the span (not yet entered: the caller instruments its work with it).
    pub fn begin(start: Start<'_>) -> Self {
        let method = start.known.unwrap_or(OTHER);
        let name: &str = start.span_name.as_deref().unwrap_or(method);
        let (tool, prompt) = match &start.target {
            Target::Tool(t) => (Some(&**t), None),
            Target::Prompt(p) => (None, Some(&**p)),
            Target::None => (None, None),
        };
        // Everything known now is given now: each later `record` costs every layer a
        // visit.
        let protocol = start.carrier.protocol();
        let span = tracing::info_span!(
            "mcp.server",
            otel.name = name,
            otel.kind = "server",
            otel.status_code = Empty,
            otel.status_description = Empty,
            mcp.method.name = method,
            mcp.session.id = Empty,
            mcp.protocol.version = start.version,
            mcp.resource.uri = Empty,
            jsonrpc.request.id = start.request_id.map(tracing::field::display),
            gen_ai.tool.name = tool,
            gen_ai.operation.name = tool.map(|_| "execute_tool"),
            gen_ai.prompt.name = prompt,
            error.type = Empty,
            rpc.response.status_code = Empty,
            http.response.status_code = Empty,
            network.transport = start.carrier.transport(),
            network.protocol.name = protocol.map(|(name, _)| name),
            network.protocol.version = protocol.map(|(_, version)| version),
            server.address = start.local.map(|a| tracing::field::display(a.ip())),
            server.port = start.local.map(|a| a.port()),
            stream = Empty,
        );
        Self {
            span,
            started: Instant::now(),
            method,
            target: start.target,
            version: start.version.unwrap_or(OTHER),
            carrier: start.carrier,
            done: false,
        }
    }

    /// Makes the span continue the caller's trace `parent` (from `params._meta`, else the
    /// HTTP headers), linking `link` (the HTTP request's context when `_meta` gave the
    /// parent). Before the span is first entered.
    pub fn follow(&self, parent: opentelemetry::Context, link: Option<SpanContext>) {
        let _ = self.span.set_parent(parent);
        if let Some(link) = link {
            self.span.add_link(link);
        }
    }

    /// The span, to instrument the work with and record on.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Sets the protocol version once the session says which.
    pub fn set_version(&mut self, version: &'static str) {
        if self.version != version {
            self.version = version;
            self.span.record("mcp.protocol.version", version);
        }
    }

    /// Ends the operation with `answer`: a JSON-RPC error, a tool's `isError`, or success.
    pub fn answered(self, answer: &Outgoing) {
        let outcome = match answer {
            Outgoing::Error { error, .. } => Outcome::Error {
                code: error.code,
                message: &error.message,
            },
            Outgoing::Result { result, .. }
                if result.get("isError").and_then(serde_json::Value::as_bool) == Some(true) =>
            {
                Outcome::ToolError
            }
            _ => Outcome::Ok,
        };
        self.finish(outcome);
    }

    /// Ends the operation: the span's error attributes and status, and the histogram.
    pub fn finish(mut self, outcome: Outcome<'_>) {
        self.end(outcome);
    }

    fn end(&mut self, outcome: Outcome<'_>) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let span = &self.span;
        let (error, code): (Option<Arc<str>>, Option<i64>) = match outcome {
            Outcome::Ok => (None, None),
            Outcome::ToolError => (Some("tool_error".into()), None),
            Outcome::Error { code, message } => {
                span.record("rpc.response.status_code", code.to_string());
                span.record("otel.status_description", message);
                (Some(code.to_string().into()), Some(code))
            }
            Outcome::Rejected { status, message } => {
                span.record("http.response.status_code", status);
                span.record("otel.status_description", message);
                (Some(status.to_string().into()), None)
            }
            Outcome::Cancelled => (Some("cancelled".into()), None),
        };
        if let Some(error) = &error {
            span.record("error.type", &**error);
            span.record("otel.status_code", "ERROR");
        }
        let carrier = self.carrier;
        let labels = OperationLabels {
            method: self.method,
            carrier,
            target: self.target.clone(),
            version: self.version,
            error,
            code,
        };
        let version = self.version;
        let took = self.started.elapsed();
        super::otlp::operation(&labels, took);
        OPERATIONS.observe(
            labels,
            || OperationLabels {
                method: OTHER,
                carrier,
                target: Target::None,
                version,
                error: None,
                code: None,
            },
            took,
        );
    }
}

impl Drop for Operation {
    fn drop(&mut self) {
        self.end(Outcome::Cancelled);
    }
}
