//! The operation (span and metrics) of an incoming message, whatever carried it: its
//! span is named by the method, tool or prompt; its parent is the caller's context from
//! `params._meta` when there is one (the MCP conventions' place for it, and the
//! 2026-07-28 revision's only one), with the transport's own context (HTTP headers)
//! linked; otherwise the transport's context.

use std::net::SocketAddr;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use serde_json::Value;

use super::{Exchange, Label};
use crate::protocol::RequestId;
use crate::protocol::methods::{Method, NotificationKind};
use crate::telemetry::durations::Carrier;
use crate::telemetry::operation::{Operation, Start};

/// Where a message came in: what the transport knows of it.
pub(crate) struct Arrival<F> {
    /// The protocol revision its transport named (HTTP's version header), if any.
    pub(crate) version: Option<&'static str>,
    /// What carried it.
    pub(crate) carrier: Carrier,
    /// The address the server listens on, if it listens.
    pub(crate) local: Option<SocketAddr>,
    /// The transport's trace context (HTTP's `traceparent`), read only if the span is
    /// recorded.
    pub(crate) context: F,
}

impl Exchange {
    /// The operation of an incoming request or notification (`None` for a client's
    /// answer, which belongs to the server's own request).
    pub(crate) fn operation<F>(&mut self, arrival: Arrival<F>) -> Option<Operation>
    where
        F: FnOnce() -> Option<opentelemetry::Context>,
    {
        let Label {
            known,
            target,
            span_name,
        } = self.take_label()?;
        let op = Operation::begin(Start {
            known,
            target,
            span_name,
            request_id: self.request_id(),
            version: arrival.version,
            carrier: arrival.carrier,
            local: arrival.local,
        });
        // A span the filter turned off has no parent to find.
        if !op.span().is_disabled() {
            let outer = (arrival.context)();
            match from_meta(self.meta()) {
                Some(meta) => {
                    let link = outer
                        .as_ref()
                        .map(|cx| cx.span().span_context().clone())
                        .filter(|sc| sc.is_valid());
                    op.follow(meta, link);
                }
                None => {
                    if let Some(outer) = outer {
                        op.follow(outer, None);
                    }
                }
            }
        }
        if let Some(uri) = self.resource() {
            op.span().record("mcp.resource.uri", uri);
        }
        Some(op)
    }

    /// What its span names, taken once (the operation keeps it); `None` for an answer,
    /// which belongs to our own request.
    fn take_label(&mut self) -> Option<Label> {
        match self {
            Self::Call(call) => Some(std::mem::replace(&mut call.label, Label::none())),
            Self::Told(told) => Some(Label {
                known: told.notification().kind().map(NotificationKind::name),
                ..Label::none()
            }),
            Self::Answer { .. } => None,
        }
    }

    /// Its `params._meta`, where a caller's trace context may be.
    fn meta(&self) -> Option<&serde_json::Map<String, Value>> {
        match self {
            Self::Call(call) => call.request().meta(),
            Self::Told(told) => told.notification().meta(),
            Self::Answer { .. } => None,
        }
    }

    /// The request's id, for a request.
    fn request_id(&self) -> Option<&RequestId> {
        match self {
            Self::Call(call) => Some(&call.request().id),
            _ => None,
        }
    }

    /// The resource a `resources/read` reads, to record on its span.
    fn resource(&self) -> Option<&str> {
        match self {
            Self::Call(call) if call.request().kind == Method::ResourcesRead => {
                call.request().uri()
            }
            _ => None,
        }
    }
}

/// The caller's context from `params._meta`, if it put one there.
fn from_meta(meta: Option<&serde_json::Map<String, Value>>) -> Option<opentelemetry::Context> {
    let carrier = crate::protocol::trace_carrier(meta)?;
    let cx = TraceContextPropagator::new().extract(&carrier);
    let cx = BaggagePropagator::new().extract_with_context(&cx, &carrier);
    cx.span().span_context().is_valid().then_some(cx)
}
