//! The Prometheus text exposition (format 0.0.4) of everything in [`super::metrics`] and
//! [`super::operation`], plus the figures their owners give at scrape time ([`Owned`]).
//!
//! Names follow the OpenTelemetry-to-Prometheus mapping: dots become underscores, the
//! unit is a suffix (`_seconds`), counters end in `_total`.

use std::fmt::Write as _;

use super::durations::{Carrier, OPERATIONS, OperationLabels, SESSION_DURATION, Target};
use super::metrics::{self, Counter, Counters, Gauges, Histogram, Label};

/// What actors own and tell when asked: read by the admin listener at each scrape.
#[derive(Debug, Clone, Default)]
pub struct Owned {
    /// Sessions live on this replica.
    pub sessions_live: Option<u64>,
    /// `server.max_sessions`.
    pub sessions_limit: u64,
    /// Events and bytes the store holds, when it can tell cheaply (in memory).
    pub store: Option<(u64, u64)>,
    /// `sse.max_session_events`.
    pub session_events_limit: u64,
    /// `sse.max_session_bytes`.
    pub session_bytes_limit: u64,
    /// `sse.max_total_events`: events the in-memory store keeps across sessions.
    pub total_events_limit: u64,
    /// `sse.max_total_bytes`: payload bytes it keeps across sessions.
    pub total_bytes_limit: u64,
    /// With Redis: whether the breaker is open, and the leases this replica holds.
    pub redis: Option<RedisFigures>,
}

/// Redis health as this replica sees it.
#[derive(Debug, Clone, Copy, Default)]
pub struct RedisFigures {
    /// Calls skip Redis for now.
    pub breaker_open: bool,
}

/// The whole exposition.
pub fn render(owned: &Owned) -> String {
    let mut out = Exposition(String::with_capacity(16 * 1024));
    out.operations();
    out.session_durations();
    out.counter(
        "otpmcp_sessions_created_total",
        "Sessions created.",
        &metrics::SESSIONS_CREATED,
    );
    out.counter(
        "otpmcp_sessions_expired_total",
        "Sessions ended idle (server.session_timeout).",
        &metrics::SESSIONS_EXPIRED,
    );
    out.counter(
        "otpmcp_sessions_deleted_total",
        "Sessions ended by the client's DELETE.",
        &metrics::SESSIONS_DELETED,
    );
    out.counter(
        "otpmcp_sessions_evicted_total",
        "Idle sessions ended to make room for a new one at server.max_sessions.",
        &metrics::SESSIONS_EVICTED,
    );
    out.counters(
        "otpmcp_sessions_refused_total",
        "Requests refused for their session, by reason.",
        &metrics::SESSIONS_REFUSED,
    );
    out.counters(
        "otpmcp_auth_refused_total",
        "Requests refused by [auth], by reason.",
        &metrics::AUTH_REFUSED,
    );
    if let Some(live) = owned.sessions_live {
        out.gauge(
            "otpmcp_sessions_live",
            "Sessions live on this replica.",
            live,
        );
    }
    out.gauge(
        "otpmcp_sessions_limit",
        "server.max_sessions.",
        owned.sessions_limit,
    );
    out.gauges(
        "otpmcp_streams_open",
        "SSE streams open now, by kind.",
        &metrics::STREAMS_OPEN,
    );
    out.counter(
        "otpmcp_events_appended_total",
        "Events stored.",
        &metrics::EVENTS_APPENDED,
    );
    out.counter(
        "otpmcp_events_replayed_total",
        "Events sent again on a Last-Event-ID resume.",
        &metrics::EVENTS_REPLAYED,
    );
    out.counters(
        "otpmcp_events_evicted_total",
        "Events dropped before their stream was read to the end, or no longer served, by reason.",
        &metrics::EVENTS_EVICTED,
    );
    out.counters(
        "otpmcp_replays_total",
        "Last-Event-ID resumes, by outcome.",
        &metrics::REPLAYS,
    );
    out.counter(
        "otpmcp_connections_refused_total",
        "Connections answered 503 and closed at server.max_connections.",
        &metrics::CONNECTIONS_REFUSED,
    );
    out.counters(
        "otpmcp_connections_cut_total",
        "Connections the server cut, by reason.",
        &metrics::CONNECTIONS_CUT,
    );
    out.counters(
        "otpmcp_actor_restarts_total",
        "Restarts of each supervised actor.",
        &metrics::ACTOR_RESTARTS,
    );
    out.counter(
        "otpmcp_supervisor_escalations_total",
        "Times the root supervisor gave up (restart intensity exceeded).",
        &metrics::ESCALATIONS,
    );
    out.gauges(
        "otpmcp_mailbox_depth",
        "Messages queued for an actor through its handle, not yet handled.",
        &metrics::MAILBOX_DEPTH,
    );
    if let Some((events, bytes)) = owned.store {
        out.gauge("otpmcp_store_events", "Events the store holds.", events);
        out.gauge(
            "otpmcp_store_bytes",
            "Payload bytes the store holds.",
            bytes,
        );
    }
    out.gauge(
        "otpmcp_store_session_events_limit",
        "sse.max_session_events: events kept per session.",
        owned.session_events_limit,
    );
    out.gauge(
        "otpmcp_store_session_bytes_limit",
        "sse.max_session_bytes: payload bytes kept per session.",
        owned.session_bytes_limit,
    );
    if owned.store.is_some() {
        out.gauge(
            "otpmcp_store_total_events_limit",
            "sse.max_total_events: events kept across all sessions.",
            owned.total_events_limit,
        );
        out.gauge(
            "otpmcp_store_total_bytes_limit",
            "sse.max_total_bytes: payload bytes kept across all sessions.",
            owned.total_bytes_limit,
        );
    }
    out.counter(
        "otpmcp_requests_reaped_total",
        "Requests and tasks of lost replicas answered or taken over here.",
        &metrics::REQUESTS_REAPED,
    );
    if let Some(redis) = owned.redis {
        out.histogram(
            "otpmcp_redis_roundtrip_seconds",
            "Round trips to Redis.",
            &[(String::new(), &*metrics::REDIS_ROUNDTRIP)],
        );
        out.gauge(
            "otpmcp_redis_breaker_open",
            "1 while calls skip Redis after a failure.",
            u64::from(redis.breaker_open),
        );
        out.counter(
            "otpmcp_redis_reconnects_total",
            "Times Redis became reachable again after a failure.",
            &metrics::REDIS_RECONNECTS,
        );
        out.gauge(
            "otpmcp_leases_held",
            "Requests and tasks this replica holds a lease on.",
            u64::try_from(metrics::LEASES_HELD.get()).unwrap_or(0),
        );
    }
    out.0
}

/// The transport attributes both MCP histograms carry, as labels.
fn transport(carrier: Carrier) -> String {
    let mut labels = format!("network_transport=\"{}\"", carrier.transport());
    if let Some((name, version)) = carrier.protocol() {
        let _ = write!(
            labels,
            ",network_protocol_name=\"{name}\",network_protocol_version=\"{version}\""
        );
    }
    labels
}

struct Exposition(String);

impl Exposition {
    fn head(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn counter(&mut self, name: &str, help: &str, counter: &Counter) {
        self.head(name, help, "counter");
        let _ = writeln!(self.0, "{name} {}", counter.get());
    }

    fn counters<L: Label, const N: usize>(
        &mut self,
        name: &str,
        help: &str,
        counters: &Counters<L, N>,
    ) {
        self.head(name, help, "counter");
        for (label, n) in counters.each() {
            let _ = writeln!(self.0, "{name}{{{}=\"{}\"}} {n}", L::NAME, label.as_str());
        }
    }

    fn gauge(&mut self, name: &str, help: &str, value: u64) {
        self.head(name, help, "gauge");
        let _ = writeln!(self.0, "{name} {value}");
    }

    fn gauges<L: Label, const N: usize>(&mut self, name: &str, help: &str, gauges: &Gauges<L, N>) {
        self.head(name, help, "gauge");
        for (label, v) in gauges.each() {
            let _ = writeln!(self.0, "{name}{{{}=\"{}\"}} {v}", L::NAME, label.as_str());
        }
    }

    /// `series` pairs rendered label sets (`a="x",b="y"`, or empty) with histograms.
    fn histogram(&mut self, name: &str, help: &str, series: &[(String, &Histogram)]) {
        self.head(name, help, "histogram");
        for (labels, h) in series {
            let sep = if labels.is_empty() { "" } else { "," };
            for (bound, n) in h.bounds().iter().zip(h.cumulative()) {
                let _ = writeln!(self.0, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
            }
            let _ = writeln!(
                self.0,
                "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
                h.count()
            );
            let braces = if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            };
            let _ = writeln!(self.0, "{name}_sum{braces} {}", h.sum());
            let _ = writeln!(self.0, "{name}_count{braces} {}", h.count());
        }
    }

    fn operations(&mut self) {
        let series = OPERATIONS.each();
        let rendered: Vec<(String, &Histogram)> = series
            .iter()
            .map(|(labels, h)| (operation_labels(labels), &**h))
            .collect();
        self.histogram(
            "mcp_server_operation_duration_seconds",
            "MCP request or notification duration, from its arrival until its answer is sent or stored.",
            &rendered,
        );
    }

    fn session_durations(&mut self) {
        let series = SESSION_DURATION.each();
        let rendered: Vec<(String, &Histogram)> = series
            .iter()
            .map(|(version, h)| {
                (
                    // Sessions with a duration are HTTP's.
                    format!(
                        "mcp_protocol_version=\"{}\",{}",
                        escape(version),
                        transport(Carrier::Http)
                    ),
                    &**h,
                )
            })
            .collect();
        self.histogram(
            "mcp_server_session_duration_seconds",
            "The duration of MCP sessions, from initialize to their end (DELETE or expiry).",
            &rendered,
        );
    }
}

fn operation_labels(l: &OperationLabels) -> String {
    let mut out = format!(
        "mcp_method_name=\"{}\",mcp_protocol_version=\"{}\",{}",
        escape(l.method),
        escape(l.version),
        transport(l.carrier)
    );
    match &l.target {
        Target::Tool(t) => {
            let _ = write!(
                out,
                ",gen_ai_tool_name=\"{}\",gen_ai_operation_name=\"execute_tool\"",
                escape(t)
            );
        }
        Target::Prompt(p) => {
            let _ = write!(out, ",gen_ai_prompt_name=\"{}\"", escape(p));
        }
        Target::None => {}
    }
    if let Some(error) = &l.error {
        let _ = write!(out, ",error_type=\"{}\"", escape(error));
    }
    if let Some(code) = l.code {
        let _ = write!(out, ",rpc_response_status_code=\"{code}\"");
    }
    out
}

/// A label value as the text format needs it.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn stdio_operations_are_labelled_as_pipes_without_http() {
        let labels = |carrier| OperationLabels {
            method: "tools/list",
            carrier,
            target: Target::None,
            version: "2025-11-25",
            error: None,
            code: None,
        };
        let stdio = operation_labels(&labels(Carrier::Stdio));
        assert!(stdio.ends_with(r#",network_transport="pipe""#), "{stdio}");
        assert!(!stdio.contains("network_protocol"), "{stdio}");
        let http = operation_labels(&labels(Carrier::Http));
        assert!(
            http.contains(r#"network_transport="tcp",network_protocol_name="http""#),
            "{http}"
        );
    }

    #[test]
    fn every_family_has_help_and_type_and_counters_start_at_zero() {
        let text = render(&Owned::default());
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = name
                .trim_end_matches("_bucket")
                .trim_end_matches("_sum")
                .trim_end_matches("_count");
            assert!(
                text.contains(&format!("# TYPE {family} "))
                    || text.contains(&format!("# TYPE {name} ")),
                "{name} has no TYPE line"
            );
        }
        assert!(text.contains("otpmcp_replays_total{outcome=\"foreign_id\"} "));
        assert!(text.contains("otpmcp_events_evicted_total{reason=\"bytes\"} "));
    }
}
