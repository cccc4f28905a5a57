//! Where an HTTP request's trace comes from and which span it gets.
//!
//! An MCP message gets the SERVER span of [`Operation`] (the OpenTelemetry MCP
//! conventions), which the server's exchange starts and parents (by `params._meta` when
//! the caller put its context there); this file gives it the HTTP side: the version
//! header, and the headers' context as parent or link. GET and DELETE, which carry no MCP message, get an HTTP server
//! span continuing the headers' context; so does a POST refused before its body parsed.

use std::net::SocketAddr;

use axum::http::{HeaderMap, HeaderName};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::extract::PROTOCOL_VERSION;
use super::rejection::Rejection;
use crate::protocol::version::ProtocolVersion;
use crate::server::{Arrival, Exchange};
use crate::telemetry::durations::Carrier;
use crate::telemetry::operation::Operation;

/// The operation of an incoming request or notification over HTTP (`None` for a
/// client's answer): its revision and trace context from the request's headers.
pub(super) fn operation(
    local: Option<SocketAddr>,
    headers: &HeaderMap,
    exchange: &mut Exchange,
) -> Option<Operation> {
    let version = headers
        .get(&PROTOCOL_VERSION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<ProtocolVersion>().ok())
        .map(ProtocolVersion::as_str);
    exchange.operation(Arrival {
        version,
        carrier: Carrier::Http,
        local,
        context: || from_headers(headers),
    })
}

/// The HTTP server span of a request that carries no MCP message (GET, DELETE), or whose
/// body could not be read as one: `{verb}`, continuing the headers' trace.
pub(super) fn http_span(verb: &'static str, headers: &HeaderMap) -> tracing::Span {
    let span = tracing::info_span!(
        "mcp.http",
        otel.name = verb,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = verb,
        http.response.status_code = Empty,
        error.type = Empty,
        mcp.session.id = Empty,
        mcp.protocol.version = Empty,
        network.transport = "tcp",
        network.protocol.name = "http",
        last_event_id = Empty,
        stream = Empty,
        replay = Empty,
        missed_events = Empty,
        replay_outcome = Empty,
        close_reason = Empty,
        unstored_events = Empty,
    );
    if let Some(cx) = from_headers(headers) {
        let _ = span.set_parent(cx);
    }
    span
}

/// Records a refusal on the current span (an HTTP span, or an operation's).
pub(super) fn record_rejection(rejection: &Rejection) {
    let span = tracing::Span::current();
    let status = rejection.status().as_u16();
    span.record("http.response.status_code", status);
    span.record("error.type", status.to_string());
    span.record("otel.status_code", "ERROR");
}

/// The caller's context from W3C headers, if it sent any.
fn from_headers(headers: &HeaderMap) -> Option<opentelemetry::Context> {
    static TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
    if !headers.contains_key(&TRACEPARENT) {
        return None;
    }
    let carrier = HeaderExtractor(headers);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let cx = BaggagePropagator::new().extract_with_context(&cx, &carrier);
    cx.span().span_context().is_valid().then_some(cx)
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(|k| k.as_str()).collect()
    }
}
