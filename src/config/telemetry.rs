//! `[telemetry]`: logs, and traces and metrics over OTLP.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, human_duration};
use super::secret::SecretUrl;

/// Logs on stderr, and traces and metrics over OTLP/HTTP. An exporter that cannot be built
/// exits 2 naming the key.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `service.name` of exported spans and metrics.
    pub service_name: String,
    /// OTLP/HTTP traces endpoint, the full URL, e.g. `http://127.0.0.1:4318/v1/traces`.
    /// Empty: no export.
    pub otlp_endpoint: SecretUrl,
    /// Filter in `tracing` target syntax, e.g. `info,otpmcp=debug`, for the logs and
    /// exported spans. The actors' per-message spans are at debug level.
    pub log_filter: String,
    /// OTLP/HTTP metrics endpoint. Empty: the traces endpoint with `/v1/traces` replaced by
    /// `/v1/metrics`; no export without either (`/metrics` on the admin listener still
    /// works).
    pub otlp_metrics_endpoint: SecretUrl,
    /// How often metrics are exported over OTLP.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub metrics_interval: Duration,
}

impl TelemetryConfig {
    /// Where metrics go over OTLP, if anywhere.
    pub fn metrics_endpoint(&self) -> Option<String> {
        if !self.otlp_metrics_endpoint.is_empty() {
            return Some(self.otlp_metrics_endpoint.expose().to_owned());
        }
        let traces = self.otlp_endpoint.expose().trim_end_matches('/');
        if traces.is_empty() {
            return None;
        }
        Some(match traces.strip_suffix("/v1/traces") {
            Some(base) => format!("{base}/v1/metrics"),
            None => format!("{traces}/v1/metrics"),
        })
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            service_name: "otpmcp".into(),
            otlp_endpoint: SecretUrl::default(),
            log_filter: "info".into(),
            otlp_metrics_endpoint: SecretUrl::default(),
            metrics_interval: Duration::from_secs(10),
        }
    }
}
