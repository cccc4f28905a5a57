//! Spans, checked in-process with OpenTelemetry's in-memory exporter: MCP operation spans
//! (named `{method} {tool}`), `transport_sse.handle_stream` and GET spans with their replay
//! attributes, actor message spans, errors on spans, and continuation of an incoming W3C
//! traceparent (from headers, and from `params._meta`).

mod common;

use common::{Client, TestServer};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use serde_json::json;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|kv: &&KeyValue| kv.key.as_str() == key)
        .map(|kv| &kv.value)
}

fn attr_str(span: &SpanData, key: &str) -> Option<String> {
    attr(span, key).map(|v| v.as_str().into_owned())
}

#[tokio::test]
async fn requests_streams_and_actor_messages_are_traced() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")))
        .with(Targets::new().with_target("otpmcp", tracing::Level::DEBUG))
        .init();

    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let trace_id = "0af7651916cd43dd8448eb211c80319c";
    let traced = client
        .post(&json!({"jsonrpc": "2.0", "id": 50, "method": "tools/call",
            "params": {"name": "stream_events", "arguments": {"count": 3, "interval_ms": 0},
                       "_meta": {"progressToken": "p"}}}))
        .header("traceparent", format!("00-{trace_id}-b7ad6b7169203331-01"));
    let mut reader = common::SseReader::new(Client::send(traced).await);
    let frames = reader.rest().await;
    let last = frames
        .iter()
        .rev()
        .find_map(|f| f.id.clone())
        .unwrap_or_default();
    client.resume("invalid_xyz").await.next().await;
    client.resume(&last).await.rest().await;
    let mut stranger = server.client();
    stranger.session = Some("0123456789abcdef0123456789abcdef".into());
    let rejected =
        Client::send(stranger.post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))).await;
    assert_eq!(rejected.status(), 404);
    // The stateless revision carries trace context in `params._meta`.
    let meta_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let stateless = common::stateless::Stateless::new(&server.url);
    let traceparent = format!("00-{meta_trace}-00f067aa0ba902b7-01");
    let params = json!({"name": "echo", "arguments": {"text": "t"},
                        "_meta": {"traceparent": traceparent}});
    stateless.ask("tools/call", params).await;
    server.shutdown().await;
    let _ = provider.force_flush();
    let spans = exporter.get_finished_spans().unwrap_or_default();
    let named = |name: &str| spans.iter().filter(|s| s.name == name).collect::<Vec<_>>();

    let call = spans
        .iter()
        .find(|s| s.name == "tools/call stream_events")
        .unwrap_or_else(|| panic!("a SERVER span named after the method and tool"));
    assert_eq!(call.span_kind, opentelemetry::trace::SpanKind::Server);
    assert_eq!(
        attr_str(call, "mcp.method.name").as_deref(),
        Some("tools/call")
    );
    assert_eq!(
        call.span_context.trace_id().to_string(),
        trace_id,
        "traceparent continued"
    );
    assert_eq!(attr_str(call, "mcp.session.id"), client.session.clone());
    let continued = spans
        .iter()
        .find(|s| s.name == "tools/call echo")
        .unwrap_or_else(|| panic!("a span for the stateless tools/call"));
    assert_eq!(
        continued.span_context.trace_id().to_string(),
        meta_trace,
        "a stateless request's _meta.traceparent continued"
    );
    assert_eq!(
        attr_str(continued, "mcp.protocol.version").as_deref(),
        Some("2026-07-28")
    );

    let streams = named("transport_sse.handle_stream");
    let gets = named("GET");
    let invalid = gets
        .iter()
        .find(|s| attr_str(s, "replay").as_deref() == Some("invalid"))
        .unwrap_or_else(|| panic!("the invalid Last-Event-ID is on a span"));
    assert_eq!(
        attr_str(invalid, "last_event_id").as_deref(),
        Some("invalid_xyz")
    );
    let resumed = gets
        .iter()
        .find(|s| attr_str(s, "replay").as_deref() == Some("active"))
        .unwrap_or_else(|| panic!("the resume is on a span"));
    assert_eq!(attr_str(resumed, "last_event_id"), Some(last));
    assert!(attr(resumed, "missed_events").is_some());
    let post_stream = streams
        .iter()
        .find(|s| s.span_context.trace_id().to_string() == trace_id)
        .unwrap_or_else(|| panic!("the POST's stream span belongs to the caller's trace"));
    assert_eq!(
        attr_str(post_stream, "close_reason").as_deref(),
        Some("completed")
    );

    assert!(
        !named("event_store.handle").is_empty(),
        "store messages are traced"
    );
    assert!(
        !named("session_manager.handle").is_empty(),
        "session messages are traced"
    );
    let error = named("ping")
        .into_iter()
        .find(|s| attr_str(s, "error.type").as_deref() == Some("404"))
        .unwrap_or_else(|| panic!("the rejected request's span"));
    assert_eq!(
        error.status,
        opentelemetry::trace::Status::error("Not Found: session not found"),
        "the refusal is the span's status"
    );
}
