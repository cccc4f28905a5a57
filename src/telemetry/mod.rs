//! Logs, traces and metrics: a `tracing` subscriber with readable logs on stderr, plus
//! OTLP/HTTP export of spans and metrics when `telemetry.otlp_endpoint` is set.
//! [`TelemetryGuard`] flushes on drop.
//!
//! - [`metrics`]: the counters, gauges and histograms, in process-wide atomics.
//! - [`durations`]: the two MCP duration histograms and the labels of their series.
//! - [`operation`]: one MCP operation's SERVER span and duration, per the OpenTelemetry
//!   MCP semantic conventions.
//! - [`series`]: histograms by label sets not known in advance, bounded.
//! - [`prometheus`]: the text exposition served on the admin listener's `/metrics`.

pub mod durations;
mod fields;
pub mod metrics;
pub mod operation;
mod otlp;
pub mod prometheus;
pub mod series;

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::TelemetryConfig;

/// Telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `telemetry.log_filter` does not parse.
    #[error("telemetry.log_filter: {0}")]
    Filter(String),
    /// The OTLP exporter could not be built.
    #[error("telemetry.otlp_endpoint: {0}")]
    Exporter(String),
    /// A global subscriber was already installed.
    #[error("a tracing subscriber is already installed")]
    AlreadyInstalled,
}

/// Keeps the exporter alive; flushes pending spans when dropped or shut down.
#[derive(Debug, Default)]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
}

impl TelemetryGuard {
    /// Flushes and stops span export.
    pub fn shutdown(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            eprintln!("otpmcp: flushing spans failed: {e}");
        }
        if let Some(meters) = self.meters.take()
            && let Err(e) = meters.shutdown()
        {
            eprintln!("otpmcp: flushing metrics failed: {e}");
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.flush();
    }
}

/// `mcp.server.session.duration`: a session of `version` ended after `took`.
pub fn session_ended(version: &'static str, took: Duration) {
    durations::SESSION_DURATION.observe(version, || durations::OTHER, took);
    otlp::session(version, took);
}

/// A round trip to Redis took `took`.
pub fn redis_roundtrip(took: Duration) {
    metrics::REDIS_ROUNDTRIP.observe(took);
    otlp::redis(took);
}

/// Installs the global subscriber.
pub fn init(config: &TelemetryConfig) -> Result<TelemetryGuard, TelemetryError> {
    let filter: Targets =
        config
            .log_filter
            .parse()
            .map_err(|e: tracing_subscriber::filter::ParseError| {
                TelemetryError::Filter(e.to_string())
            })?;
    let fmt = tracing_subscriber::fmt::layer()
        .fmt_fields(fields::LogFields)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_target(false);
    let resource = || {
        Resource::builder()
            .with_service_name(config.service_name.clone())
            .build()
    };
    let meters = match config.metrics_endpoint() {
        Some(endpoint) => Some(otlp::start(&endpoint, config.metrics_interval, resource())?),
        None => None,
    };
    let provider = if config.otlp_endpoint.is_empty() {
        None
    } else {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(config.otlp_endpoint.expose())
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        Some(
            SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource())
                .build(),
        )
    };
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("otpmcp")));
    tracing_subscriber::registry()
        .with(otel)
        .with(fmt)
        .with(filter)
        .try_init()
        .map_err(|_| TelemetryError::AlreadyInstalled)?;
    Ok(TelemetryGuard { provider, meters })
}
