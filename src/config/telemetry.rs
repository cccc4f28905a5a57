//! `[telemetry]`: logs, and traces and metrics over OTLP.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::human_duration;
use super::secret::SecretUrl;

/// `[telemetry]`: logs and traces.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `service.name` of exported spans.
    pub service_name: String,
    /// OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`. Empty: no
    /// export, readable logs on stderr only.
    pub otlp_endpoint: SecretUrl,
    /// Log filter in `tracing` target syntax, e.g. `info,otpmcp=debug`.
    pub log_filter: String,
    /// OTLP/HTTP metrics endpoint. Empty: beside the traces, the traces endpoint with
    /// `/v1/traces` replaced by `/v1/metrics`; no export without either.
    pub otlp_metrics_endpoint: SecretUrl,
    /// How often metrics are exported over OTLP.
    #[serde(with = "human_duration")]
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
