//! `GET /metrics` on the admin listener: the Prometheus exposition counts what clients
//! did — operations by method, tool and error; sessions created and deleted; resumes by
//! outcome; restarts — with every labelled counter there from the start.

mod common;

use common::stateless::Stateless;
use common::{TestServer, admin_on, nz, within};
use otpmcp::supervisor::Child;
use serde_json::json;

async fn scrape(server: &TestServer) -> String {
    let resp = within("a scrape", reqwest::get(server.admin_url("/metrics")))
        .await
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    resp.text().await.unwrap_or_default()
}

/// The value of the sample of `name` whose labels include all of `labels`.
fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.split(['{', ' ']).next() == Some(name))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// The counters are the process's own (statics), and `cargo test` runs a file's tests as
// threads of one process: one test runs the three in turn, the one that finds every
// counter at zero first, so that none sees another's counts.
#[tokio::test]
async fn the_exposition_counts_from_zero_then_refusals_then_redis() {
    the_exposition_counts_operations_sessions_resumes_and_restarts().await;
    refused_sessions_are_counted_by_reason().await;
    on_redis_the_round_trips_breaker_and_leases_are_exposed_and_the_dashboard_lists_replicas()
        .await;
}

async fn the_exposition_counts_operations_sessions_resumes_and_restarts() {
    let server = TestServer::start(admin_on).await;
    let before = scrape(&server).await;
    // Labelled counters exist, at zero, before anything happened.
    for (name, label, value) in [
        ("otpmcp_replays_total", "outcome", "foreign_id"),
        ("otpmcp_events_evicted_total", "reason", "bytes"),
        ("otpmcp_connections_cut_total", "reason", "write_stall"),
        ("otpmcp_sessions_refused_total", "reason", "full"),
        ("otpmcp_actor_restarts_total", "actor", "event_store"),
        ("otpmcp_streams_open", "kind", "resume"),
        ("otpmcp_mailbox_depth", "actor", "session_manager"),
    ] {
        assert_eq!(
            sample(&before, name, &[(label, value)]),
            Some(0.0),
            "{name}"
        );
    }

    let mut client = server.client();
    client.initialize().await;
    client.echo("hi").await;
    let missing = client
        .ask("tools/call", json!({"name": "no_such_tool"}))
        .await;
    assert_eq!(missing["error"]["code"], -32602);
    // A resume of a finished call from its start, and one with another session's id.
    let mut reader = client
        .call_stream("echo", json!({"text": "again"}), None)
        .await;
    let frames = reader.rest().await;
    let priming = frames
        .iter()
        .find(|f| f.is_priming())
        .and_then(|f| f.id.clone())
        .unwrap_or_else(|| panic!("no priming event"));
    let replayed = client.resume(&priming).await.rest().await;
    assert!(replayed.iter().any(|f| f.is_response()));
    let mut other = server.client();
    other.initialize().await;
    let foreign = common::Client::send(other.get(Some(&priming))).await;
    assert_eq!(foreign.status(), 200, "a live stream instead");
    drop(foreign);
    // The stateless era is measured too, under its own version.
    let stateless = Stateless::new(&server.url);
    let answer = stateless
        .ask(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "x"}}),
        )
        .await;
    assert_eq!(answer.error_code(), None);
    assert_eq!(common::Client::send(client.delete()).await.status(), 200);
    // A crash and its restart.
    assert!(server.app.inject_panic(Child::EventStore(0)).is_ok());
    common::eventually("the restart to be counted", || async {
        let text = scrape(&server).await;
        (sample(
            &text,
            "otpmcp_actor_restarts_total",
            &[("actor", "event_store")],
        ) == Some(1.0))
        .then_some(())
    })
    .await;

    let text = scrape(&server).await;
    let op = "mcp_server_operation_duration_seconds_count";
    assert_eq!(
        sample(
            &text,
            op,
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_tool_name", "echo"),
                ("gen_ai_operation_name", "execute_tool"),
                ("mcp_protocol_version", "2025-11-25"),
                ("network_transport", "tcp"),
            ]
        ),
        Some(2.0),
        "two echo calls in a session:\n{text}"
    );
    assert_eq!(
        sample(
            &text,
            op,
            &[
                ("mcp_method_name", "tools/call"),
                ("gen_ai_tool_name", "echo"),
                ("mcp_protocol_version", "2026-07-28"),
            ]
        ),
        Some(1.0),
        "one stateless echo call"
    );
    assert_eq!(
        sample(
            &text,
            op,
            &[
                ("mcp_method_name", "tools/call"),
                ("error_type", "-32602"),
                ("rpc_response_status_code", "-32602"),
            ]
        ),
        Some(1.0),
        "the failed call, with its code"
    );
    assert!(
        !text.contains("no_such_tool"),
        "names a client sends do not become labels"
    );
    assert_eq!(
        sample(&text, op, &[("mcp_method_name", "initialize")]),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &text,
            op,
            &[("mcp_method_name", "notifications/initialized")]
        ),
        Some(2.0)
    );
    let bucket = sample(
        &text,
        "mcp_server_operation_duration_seconds_bucket",
        &[("mcp_method_name", "initialize"), ("le", "+Inf")],
    );
    assert_eq!(bucket, Some(2.0));
    assert_eq!(
        sample(&text, "otpmcp_sessions_created_total", &[]),
        Some(2.0)
    );
    assert_eq!(
        sample(&text, "otpmcp_sessions_deleted_total", &[]),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &text,
            "mcp_server_session_duration_seconds_count",
            &[("mcp_protocol_version", "2025-11-25")]
        ),
        Some(1.0),
        "the deleted session's duration"
    );
    assert_eq!(sample(&text, "otpmcp_sessions_live", &[]), Some(1.0));
    assert_eq!(
        sample(&text, "otpmcp_replays_total", &[("outcome", "complete")]),
        Some(1.0)
    );
    assert_eq!(
        sample(&text, "otpmcp_replays_total", &[("outcome", "foreign_id")]),
        Some(1.0)
    );
    assert!(sample(&text, "otpmcp_events_replayed_total", &[]).is_some_and(|n| n >= 1.0));
    assert!(sample(&text, "otpmcp_events_appended_total", &[]).is_some_and(|n| n >= 3.0));
    assert!(sample(&text, "otpmcp_store_events", &[]).is_some());
    assert_eq!(
        sample(&text, "otpmcp_store_session_events_limit", &[]),
        Some(10_000.0)
    );
    assert_eq!(
        sample(&text, "otpmcp_store_total_events_limit", &[]),
        Some(1_000_000.0)
    );
    assert_eq!(
        sample(
            &text,
            "otpmcp_sessions_refused_total",
            &[("reason", "unknown")]
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "otpmcp_redis_breaker_open", &[]),
        None,
        "no Redis"
    );
    server.shutdown().await;
}

async fn refused_sessions_are_counted_by_reason() {
    let server = TestServer::start(|c| {
        admin_on(c);
        c.server.max_sessions = nz!(1);
    })
    .await;
    let mut busy = server.client();
    busy.initialize().await;
    // An open stream keeps it busy: it cannot make room.
    let stream = common::Client::send(busy.get(None)).await;
    assert_eq!(stream.status(), 200);
    let full = common::Client::send(server.client().post(&json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"}}})))
    .await;
    assert_eq!(full.status(), 503);
    let text = scrape(&server).await;
    assert_eq!(
        sample(
            &text,
            "otpmcp_sessions_refused_total",
            &[("reason", "full")]
        ),
        Some(1.0)
    );
    drop(stream);
    server.shutdown().await;
}

async fn on_redis_the_round_trips_breaker_and_leases_are_exposed_and_the_dashboard_lists_replicas()
{
    let redis = common::redis::RedisServer::start();
    let url = redis.url();
    let server = TestServer::start(move |c| {
        admin_on(c);
        c.store.backend = otpmcp::config::BackendKind::Redis;
        c.store.redis_url = url.into();
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    client.echo("r").await;
    let text = scrape(&server).await;
    assert!(
        sample(&text, "otpmcp_redis_roundtrip_seconds_count", &[]).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "otpmcp_redis_breaker_open", &[]), Some(0.0));
    assert_eq!(
        sample(&text, "otpmcp_leases_held", &[]),
        Some(0.0),
        "the call ended"
    );
    assert_eq!(
        sample(&text, "otpmcp_redis_reconnects_total", &[]),
        Some(0.0)
    );
    assert_eq!(
        sample(&text, "otpmcp_store_events", &[]),
        None,
        "Redis does not count"
    );

    // The dashboard's snapshots name the replicas sharing Redis.
    let mut feed = common::sse_get(&server.admin_url("/dashboard/events"), None).await;
    let snapshot = loop {
        let frame = feed
            .next()
            .await
            .unwrap_or_else(|| panic!("the feed ended"));
        if frame.event.as_deref() == Some("snapshot") {
            break frame.json().unwrap_or_default();
        }
    };
    assert_eq!(snapshot["backend"], "redis");
    let replicas = snapshot["cluster"]["replicas"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        replicas
            .iter()
            .any(|r| r["self"] == true && r["id"] == server.app.replica()),
        "{snapshot}"
    );
    drop(feed);
    server.shutdown().await;
    drop(redis);
}
