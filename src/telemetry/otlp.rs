//! OTLP/HTTP export of the metrics, beside the traces, when `telemetry.otlp_endpoint` is
//! set: every `telemetry.metrics_interval` the SDK's reader reads the counters and gauges
//! of [`super::metrics`] through callbacks, and sends the two MCP histograms and the
//! Redis round trips, which are recorded into the SDK as they happen (it has no
//! observable histogram).
//!
//! Names are the OpenTelemetry ones (`mcp.server.operation.duration`,
//! `otpmcp.events.evicted`); `/metrics` shows the same figures under Prometheus names.
//! Live sessions and store occupancy are asked of their actors, so only `/metrics` has
//! them.

use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Histogram, Meter, MeterProvider as _};
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};

use super::TelemetryError;
use super::durations::{Carrier, OperationLabels, Target};
use super::metrics::{self, Counters, Gauges, Label, MCP_BOUNDS, REDIS_BOUNDS};

/// The histograms recorded into the SDK, once export has started.
static RECORDERS: OnceLock<Recorders> = OnceLock::new();

struct Recorders {
    operation: Histogram<f64>,
    session: Histogram<f64>,
    redis: Histogram<f64>,
}

/// Starts the metric export to `endpoint`.
pub(super) fn start(
    endpoint: &str,
    interval: Duration,
    resource: Resource,
) -> Result<SdkMeterProvider, TelemetryError> {
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let reader = PeriodicReader::builder(exporter)
        .with_interval(interval)
        .build();
    let provider = SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource)
        .build();
    let meter = provider.meter("otpmcp");
    observe(&meter);
    let histogram = |name: &'static str, description: &'static str, bounds: &[f64]| {
        meter
            .f64_histogram(name)
            .with_unit("s")
            .with_description(description)
            .with_boundaries(bounds.to_vec())
            .build()
    };
    // A second start (tests start several servers in one process) keeps the first.
    let _ = RECORDERS.set(Recorders {
        operation: histogram(
            "mcp.server.operation.duration",
            "MCP request or notification duration, from its arrival until its answer is sent or stored.",
            MCP_BOUNDS,
        ),
        session: histogram(
            "mcp.server.session.duration",
            "The duration of MCP sessions.",
            MCP_BOUNDS,
        ),
        redis: histogram("otpmcp.redis.roundtrip", "Round trips to Redis.", REDIS_BOUNDS),
    });
    Ok(provider)
}

/// The transport attributes both MCP histograms carry.
fn transport(carrier: Carrier) -> impl Iterator<Item = KeyValue> {
    let protocol = carrier.protocol().into_iter().flat_map(|(name, version)| {
        [
            KeyValue::new("network.protocol.name", name),
            KeyValue::new("network.protocol.version", version),
        ]
    });
    std::iter::once(KeyValue::new("network.transport", carrier.transport())).chain(protocol)
}

/// Records an operation's duration, when exporting.
pub(super) fn operation(labels: &OperationLabels, took: Duration) {
    let Some(r) = RECORDERS.get() else {
        return;
    };
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", labels.method),
        KeyValue::new("mcp.protocol.version", labels.version),
    ];
    attributes.extend(transport(labels.carrier));
    match &labels.target {
        Target::Tool(t) => {
            attributes.push(KeyValue::new("gen_ai.tool.name", t.to_string()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        Target::Prompt(p) => attributes.push(KeyValue::new("gen_ai.prompt.name", p.to_string())),
        Target::None => {}
    }
    if let Some(error) = &labels.error {
        attributes.push(KeyValue::new("error.type", error.to_string()));
    }
    if let Some(code) = labels.code {
        attributes.push(KeyValue::new("rpc.response.status_code", code.to_string()));
    }
    r.operation.record(took.as_secs_f64(), &attributes);
}

/// Records a session's duration, when exporting.
pub(super) fn session(version: &'static str, took: Duration) {
    if let Some(r) = RECORDERS.get() {
        let mut attributes = vec![KeyValue::new("mcp.protocol.version", version)];
        // Sessions with a duration are HTTP's (stdio's lasts as long as the process).
        attributes.extend(transport(Carrier::Http));
        r.session.record(took.as_secs_f64(), &attributes);
    }
}

/// Records a Redis round trip, when exporting.
pub(super) fn redis(took: Duration) {
    if let Some(r) = RECORDERS.get() {
        r.redis.record(took.as_secs_f64(), &[]);
    }
}

/// Registers the callbacks that read the counters and gauges at each export.
fn observe(meter: &Meter) {
    let counter = |name: &'static str, description: &'static str, read: fn() -> u64| {
        meter
            .u64_observable_counter(name)
            .with_description(description)
            .with_callback(move |o| o.observe(read(), &[]))
            .build();
    };
    counter("otpmcp.sessions.created", "Sessions created.", || {
        metrics::SESSIONS_CREATED.get()
    });
    counter("otpmcp.sessions.expired", "Sessions ended idle.", || {
        metrics::SESSIONS_EXPIRED.get()
    });
    counter(
        "otpmcp.sessions.deleted",
        "Sessions ended by DELETE.",
        || metrics::SESSIONS_DELETED.get(),
    );
    counter(
        "otpmcp.sessions.evicted",
        "Idle sessions ended to make room at server.max_sessions.",
        || metrics::SESSIONS_EVICTED.get(),
    );
    counter(
        "otpmcp.connections.refused",
        "Connections refused at server.max_connections.",
        || metrics::CONNECTIONS_REFUSED.get(),
    );
    counter("otpmcp.events.appended", "Events stored.", || {
        metrics::EVENTS_APPENDED.get()
    });
    counter(
        "otpmcp.events.replayed",
        "Events sent again on a resume.",
        || metrics::EVENTS_REPLAYED.get(),
    );
    counter(
        "otpmcp.supervisor.escalations",
        "Times the root supervisor gave up.",
        || metrics::ESCALATIONS.get(),
    );
    counter(
        "otpmcp.redis.reconnects",
        "Times Redis became reachable again after a failure.",
        || metrics::REDIS_RECONNECTS.get(),
    );
    counter(
        "otpmcp.requests.reaped",
        "Requests and tasks of lost replicas answered or taken over here.",
        || metrics::REQUESTS_REAPED.get(),
    );
    labelled(
        meter,
        "otpmcp.sessions.refused",
        "Requests refused for their session.",
        &metrics::SESSIONS_REFUSED,
    );
    labelled(
        meter,
        "otpmcp.auth.refused",
        "Requests refused by [auth].",
        &metrics::AUTH_REFUSED,
    );
    labelled(
        meter,
        "otpmcp.events.evicted",
        "Events dropped or no longer served.",
        &metrics::EVENTS_EVICTED,
    );
    labelled(
        meter,
        "otpmcp.replays",
        "Last-Event-ID resumes.",
        &metrics::REPLAYS,
    );
    labelled(
        meter,
        "otpmcp.connections.cut",
        "Connections the server cut.",
        &metrics::CONNECTIONS_CUT,
    );
    labelled(
        meter,
        "otpmcp.actor.restarts",
        "Restarts of each supervised actor.",
        &metrics::ACTOR_RESTARTS,
    );
    gauges(
        meter,
        "otpmcp.streams.open",
        "SSE streams open now.",
        &metrics::STREAMS_OPEN,
    );
    gauges(
        meter,
        "otpmcp.mailbox.depth",
        "Messages queued for an actor, not yet handled.",
        &metrics::MAILBOX_DEPTH,
    );
    meter
        .i64_observable_gauge("otpmcp.leases.held")
        .with_description("Requests and tasks this replica holds a lease on (Redis).")
        .with_callback(|o| o.observe(metrics::LEASES_HELD.get(), &[]))
        .build();
}

fn labelled<L: Label, const N: usize>(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    family: &'static Counters<L, N>,
) {
    meter
        .u64_observable_counter(name)
        .with_description(description)
        .with_callback(move |o| {
            for (label, n) in family.each() {
                o.observe(n, &[KeyValue::new(L::NAME, label.as_str())]);
            }
        })
        .build();
}

fn gauges<L: Label, const N: usize>(
    meter: &Meter,
    name: &'static str,
    description: &'static str,
    family: &'static Gauges<L, N>,
) {
    meter
        .i64_observable_gauge(name)
        .with_description(description)
        .with_callback(move |o| {
            for (label, v) in family.each() {
                o.observe(v, &[KeyValue::new(L::NAME, label.as_str())]);
            }
        })
        .build();
}
