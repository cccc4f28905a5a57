//! OTLP export from the real binary: spans and metrics reach a collector over OTLP/HTTP
//! and are flushed when the process stops on SIGTERM. The stand-in collector decodes the
//! protobuf it receives, so the test checks what an operator's backend would see: span
//! names, kinds, attributes and parents after the OpenTelemetry MCP conventions, and the
//! MCP duration histogram.

mod common;

use axum::routing::post;
use common::{Client, SseReader};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use serde_json::json;
use tokio::sync::mpsc;

/// What the collector received, by signal.
enum Export {
    Traces(ExportTraceServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

/// A collector on a free port; returns its base URL and what it receives.
async fn collector() -> (String, mpsc::UnboundedReceiver<Export>) {
    let (tx, rx) = mpsc::unbounded_channel::<Export>();
    let traces = tx.clone();
    let app = axum::Router::new()
        .route(
            "/v1/traces",
            post(move |body| receive(traces.clone(), body, Export::Traces)),
        )
        .route(
            "/v1/metrics",
            post(move |body| receive(tx.clone(), body, Export::Metrics)),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), rx)
}

/// Decodes one export request as `M` and passes it on.
async fn receive<M: prost::Message + Default>(
    tx: mpsc::UnboundedSender<Export>,
    body: axum::body::Bytes,
    wrap: fn(M) -> Export,
) -> &'static str {
    let decoded = M::decode(body).unwrap_or_else(|e| panic!("not an OTLP export: {e}"));
    let _ = tx.send(wrap(decoded));
    ""
}

fn attr<'a>(span: &'a Span, key: &str) -> Option<&'a any_value::Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv: &KeyValue| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn text(span: &Span, key: &str) -> Option<String> {
    match attr(span, key)? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn mcp_spans_and_metrics_are_exported_over_otlp_http_and_flushed_on_sigterm() {
    let (base, mut received) = collector().await;
    let endpoint = format!("{base}/v1/traces");
    let binary = common::Binary::start(
        &[],
        &[
            ("OTPMCP__TELEMETRY__OTLP_ENDPOINT", &endpoint),
            // The actors' message spans are debug spans.
            ("OTPMCP__TELEMETRY__LOG_FILTER", "info,otpmcp=debug"),
        ],
    )
    .await;
    let port: u16 = binary
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {}", binary.url));
    let mut client = Client::new(&binary.url);
    client.initialize().await;
    let session = client.session_id().to_string();

    // A tool call whose caller put its trace in `_meta`, over an HTTP request that has a
    // trace of its own: the first is the parent, the second a link.
    let caller = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let http = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331");
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {
        "name": "echo", "arguments": {"text": "hi"},
        "_meta": {"traceparent": format!("00-{}-{}-01", caller.0, caller.1)}}});
    let resp = Client::send(
        client
            .post(&call)
            .header("traceparent", format!("00-{}-{}-01", http.0, http.1)),
    )
    .await;
    let frames = SseReader::new(resp).rest().await;
    let priming = frames
        .iter()
        .find(|f| f.is_priming())
        .and_then(|f| f.id.clone())
        .unwrap_or_else(|| panic!("no priming event in {frames:?}"));
    // A resume of that stream from its start.
    let replayed = client.resume(&priming).await.rest().await;
    assert!(replayed.iter().any(|f| f.is_response()), "{replayed:?}");
    // An error.
    let missing = client
        .ask("tools/call", json!({"name": "no_such_tool"}))
        .await;
    assert_eq!(missing["error"]["code"], -32602, "{missing}");

    assert_eq!(binary.terminate().await, Some(0));

    let mut spans: Vec<Span> = Vec::new();
    let mut metric_names: Vec<String> = Vec::new();
    let mut tool_points = 0;
    // Everything is flushed before the process exits, so it has all arrived by now.
    while let Ok(export) = received.try_recv() {
        match export {
            Export::Traces(t) => spans.extend(
                t.resource_spans
                    .into_iter()
                    .flat_map(|r| r.scope_spans)
                    .flat_map(|s| s.spans),
            ),
            Export::Metrics(m) => {
                for metric in m
                    .resource_metrics
                    .into_iter()
                    .flat_map(|r| r.scope_metrics)
                    .flat_map(|s| s.metrics)
                {
                    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
                    if metric.name == "mcp.server.operation.duration"
                        && let Some(Data::Histogram(h)) = &metric.data
                    {
                        tool_points += h
                            .data_points
                            .iter()
                            .filter(|p| {
                                p.attributes.iter().any(|kv| {
                                    kv.key == "gen_ai.tool.name"
                                        && matches!(&kv.value, Some(AnyValue { value: Some(any_value::Value::StringValue(s)) }) if s == "echo")
                                })
                            })
                            .map(|p| p.count)
                            .sum::<u64>();
                    }
                    metric_names.push(metric.name);
                }
            }
        }
    }

    // The tool call: a SERVER span named after the method and the tool.
    let tool = spans
        .iter()
        .find(|s| s.name == "tools/call echo")
        .unwrap_or_else(|| {
            let names: Vec<_> = spans.iter().map(|s| s.name.as_str()).collect();
            panic!("no `tools/call echo` span among {names:?}")
        });
    assert_eq!(tool.kind, SpanKind::Server as i32);
    assert_eq!(hex(&tool.trace_id), caller.0, "the trace from `_meta`");
    assert_eq!(
        hex(&tool.parent_span_id),
        caller.1,
        "the caller's span is the parent"
    );
    assert!(
        tool.links
            .iter()
            .any(|l| hex(&l.trace_id) == http.0 && hex(&l.span_id) == http.1),
        "the HTTP request's context is linked: {:?}",
        tool.links
    );
    for (key, want) in [
        ("mcp.method.name", "tools/call".to_owned()),
        ("gen_ai.tool.name", "echo".to_owned()),
        ("gen_ai.operation.name", "execute_tool".to_owned()),
        ("mcp.session.id", session.clone()),
        ("mcp.protocol.version", "2025-11-25".to_owned()),
        ("jsonrpc.request.id", "41".to_owned()),
        ("network.transport", "tcp".to_owned()),
        ("network.protocol.name", "http".to_owned()),
        ("server.address", "127.0.0.1".to_owned()),
        ("server.port", port.to_string()),
    ] {
        assert_eq!(text(tool, key), Some(want), "{key} of {tool:?}");
    }
    assert_eq!(text(tool, "error.type"), None);

    // The actors' message spans are its descendants, in its trace.
    let descends = |span: &Span| descends_from(&spans, span, tool);
    let actor_spans: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.ends_with(".handle") && s.trace_id == tool.trace_id)
        .collect();
    assert!(
        actor_spans
            .iter()
            .any(|s| s.name == "event_store.handle" && descends(s)),
        "an event store message span under the tool call: {:?}",
        actor_spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );

    // The error: a SERVER span with the JSON-RPC code as its error type and status.
    let failed = spans
        .iter()
        .find(|s| s.name == "tools/call" && text(s, "jsonrpc.request.id").is_some())
        .unwrap_or_else(|| panic!("no span for the failed call"));
    assert_eq!(failed.kind, SpanKind::Server as i32);
    assert_eq!(text(failed, "error.type").as_deref(), Some("-32602"));
    assert_eq!(
        text(failed, "rpc.response.status_code").as_deref(),
        Some("-32602")
    );
    assert_eq!(
        text(failed, "gen_ai.tool.name"),
        None,
        "unknown tools name nothing"
    );
    let status = failed.status.as_ref().map(|s| s.code);
    assert_eq!(status, Some(2), "status ERROR");

    // The resume: an HTTP SERVER span for the GET, with how the replay went.
    let resume = spans
        .iter()
        .find(|s| s.name == "GET" && text(s, "replay_outcome").is_some())
        .unwrap_or_else(|| panic!("no span for the resume"));
    assert_eq!(resume.kind, SpanKind::Server as i32);
    assert_eq!(text(resume, "replay_outcome").as_deref(), Some("complete"));
    assert_eq!(text(resume, "mcp.session.id"), Some(session));
    assert_eq!(text(resume, "last_event_id"), Some(priming));

    // Metrics, beside the traces.
    for name in [
        "mcp.server.operation.duration",
        "otpmcp.sessions.created",
        "otpmcp.replays",
        "otpmcp.events.appended",
    ] {
        assert!(
            metric_names.iter().any(|n| n == name),
            "{name} among {metric_names:?}"
        );
    }
    assert_eq!(tool_points, 1, "one echo call in the histogram");
}

/// Whether `span` is `ancestor` or below it.
fn descends_from<'a>(spans: &'a [Span], mut span: &'a Span, ancestor: &Span) -> bool {
    for _ in 0..16 {
        if span.span_id == ancestor.span_id {
            return true;
        }
        match spans.iter().find(|p| p.span_id == span.parent_span_id) {
            Some(parent) => span = parent,
            None => return false,
        }
    }
    false
}
