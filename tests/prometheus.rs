//! The Grafana dashboard against a real Prometheus (Debian's package, installed by
//! scripts/test): Prometheus scrapes two running servers — one in memory, one on Redis —
//! under a small load, and every PromQL expression of `deploy/grafana/otpmcp.json` must
//! return data through Prometheus's HTTP API. So the dashboard cannot drift from the
//! metric names. The checking is `tests/ops/prometheus_check.py`.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::redis::RedisServer;
use common::{Client, TestServer, nz};
use otpmcp::config::BackendKind;
use otpmcp::supervisor::Child;
use serde_json::json;

fn admin_on(c: &mut otpmcp::Config) {
    common::admin_on(c);
    // Small enough that the load's streams are trimmed: evictions and truncated resumes.
    c.sse.max_session_events = nz!(4);
}

/// One client's life, over and over until `stop`: a session, a tool call, an error, a
/// stream longer than the session keeps, a resume of it, the end of the session.
async fn load(url: String, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        let mut client = Client::new(&url);
        client.initialize().await;
        client
            .ask(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": "x"}}),
            )
            .await;
        client
            .ask("tools/call", json!({"name": "no_such_tool"}))
            .await;
        let frames = client
            .call_stream(
                "stream_events",
                json!({"count": 8, "interval_ms": 0}),
                Some("p"),
            )
            .await
            .rest()
            .await;
        if let Some(priming) = frames
            .iter()
            .find(|f| f.is_priming())
            .and_then(|f| f.id.clone())
        {
            client.resume(&priming).await.rest().await;
        }
        Client::send(client.delete()).await;
        // Pacing, so that Prometheus and the servers share the machine.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
#[ignore = "needs Prometheus; ./scripts/test runs it"]
async fn every_dashboard_expression_has_data_in_a_real_prometheus() {
    let memory = TestServer::start(admin_on).await;
    let redis = RedisServer::start();
    let url = redis.url();
    let shared = TestServer::start(move |c| {
        admin_on(c);
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let loads = [
        tokio::spawn(load(memory.url.clone(), stop.clone())),
        tokio::spawn(load(shared.url.clone(), stop.clone())),
    ];
    // A crash and its restart, for the restart panels (its panic message is expected).
    assert!(memory.app.inject_panic(Child::SessionManager).is_ok());

    let root = env!("CARGO_MANIFEST_DIR");
    let workdir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus");
    let _ = std::fs::remove_dir_all(&workdir);
    std::fs::create_dir_all(&workdir).unwrap_or_else(|e| panic!("{}: {e}", workdir.display()));
    let check = tokio::process::Command::new("python3")
        .arg(format!("{root}/tests/ops/prometheus_check.py"))
        .arg("--metrics-url")
        .arg(memory.admin_url("/metrics"))
        .arg("--metrics-url")
        .arg(shared.admin_url("/metrics"))
        .arg("--dashboard")
        .arg(format!("{root}/deploy/grafana/otpmcp.json"))
        .arg("--workdir")
        .arg(&workdir)
        .arg("--redis")
        .kill_on_drop(true)
        .output();
    // The script has its own 60 s deadline per stage; this is the backstop.
    let output = tokio::time::timeout(Duration::from_secs(240), check)
        .await
        .unwrap_or_else(|_| panic!("prometheus_check.py did not finish"))
        .unwrap_or_else(|e| panic!("prometheus_check.py: {e}"));
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        let _ = load.await;
    }
    let report = String::from_utf8_lossy(&output.stdout);
    println!("{report}");
    assert!(
        output.status.success(),
        "every expression returns data:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let checked = report.lines().filter(|l| l.starts_with("ok")).count();
    assert!(
        checked >= 20,
        "the dashboard's expressions were checked:\n{report}"
    );
    shared.shutdown().await;
    memory.shutdown().await;
    drop(redis);
}
