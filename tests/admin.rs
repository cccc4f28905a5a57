//! The admin listener (`[admin]`): off by default; when on, `/healthz` and `/readyz` on a
//! socket of their own, readiness following the store, Redis and shutdown.

mod common;

use common::redis::RedisServer;
use common::{Client, TestServer, admin_on, eventually, within};
use otpmcp::config::{BackendKind, NonZeroDuration};
use serde_json::Value;

async fn probe(addr: std::net::SocketAddr, path: &str) -> (u16, Value) {
    let resp = within("a probe", reqwest::get(format!("http://{addr}{path}")))
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = resp.status().as_u16();
    let body = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

#[tokio::test]
async fn the_admin_listener_is_off_by_default() {
    let server = TestServer::start(|_| {}).await;
    assert_eq!(server.app.admin_addr(), None);
    server.shutdown().await;
}

#[tokio::test]
async fn probes_answer_live_and_ready() {
    let server = TestServer::start(admin_on).await;
    let Some(admin) = server.app.admin_addr() else {
        panic!("the admin listener is on");
    };
    assert!(admin.ip().is_loopback());
    assert_ne!(admin, server.app.local_addr(), "a socket of its own");
    assert_eq!(
        probe(admin, "/healthz").await,
        (200, serde_json::json!({"status": "alive"}))
    );
    assert_eq!(
        probe(admin, "/readyz").await,
        (200, serde_json::json!({"ready": true}))
    );
    server.shutdown().await;
}

#[tokio::test]
async fn readiness_fails_while_redis_is_away_and_returns_with_it() {
    let mut redis = RedisServer::start_persistent();
    let url = redis.url();
    let server = TestServer::start(move |c| {
        admin_on(c);
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
        c.store.retry_interval = NonZeroDuration::from_millis(200);
    })
    .await;
    let Some(admin) = server.app.admin_addr() else {
        panic!("the admin listener is on");
    };
    assert_eq!(probe(admin, "/readyz").await.0, 200);
    redis.kill();
    let reason = eventually("readiness to fail", || async {
        let (status, body) = probe(admin, "/readyz").await;
        (status == 503).then_some(body)
    })
    .await;
    assert_eq!(reason["ready"], false);
    assert!(
        reason["reason"].as_str().is_some_and(|r| !r.is_empty()),
        "{reason}"
    );
    // Alive all along: the process need not restart.
    assert_eq!(probe(admin, "/healthz").await.0, 200);
    redis.restart();
    eventually("readiness to return", || async {
        (probe(admin, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    server.shutdown().await;
}

/// `POST /fault/panic/{child}` is there only with `admin.fault_injection`: the child then
/// panics and the supervisor starts a new incarnation of it.
#[tokio::test]
async fn fault_injection_is_off_unless_asked_for_and_restarts_the_child() {
    use otpmcp::supervisor::Child;
    let off = TestServer::start(admin_on).await;
    let http = reqwest::Client::new();
    let refused = Client::send(http.post(off.admin_url("/fault/panic/event_store"))).await;
    assert_eq!(refused.status(), 404, "off by default");
    off.shutdown().await;

    let on = TestServer::start(|c| {
        admin_on(c);
        c.admin.fault_injection = true;
    })
    .await;
    let before = on.app.child_id(Child::SessionManager);
    let sent = Client::send(
        http.post(on.admin_url("/fault/panic/session_manager"))
            .header(otpmcp::admin::FAULT_HEADER, "1"),
    )
    .await;
    assert_eq!(sent.status(), 202);
    eventually("a new session manager", || async {
        let now = on.app.child_id(Child::SessionManager);
        (now.is_some() && now != before).then_some(())
    })
    .await;
    let unknown = Client::send(
        http.post(on.admin_url("/fault/panic/nobody"))
            .header(otpmcp::admin::FAULT_HEADER, "1"),
    )
    .await;
    assert_eq!(unknown.status(), 404);
    on.shutdown().await;
}

// Issue 22, finding 6: the admin listener checked neither Host nor Origin, and
// `POST /fault/panic/{child}` was a CORS simple request any page could send.
#[tokio::test]
async fn browsers_are_refused_and_faults_need_their_header() {
    use otpmcp::supervisor::Child;
    let server = TestServer::start(|c| {
        admin_on(c);
        c.admin.fault_injection = true;
    })
    .await;
    let Some(admin) = server.app.admin_addr() else {
        panic!("the admin listener is on");
    };
    let http = reqwest::Client::new();
    for path in ["/healthz", "/readyz", "/metrics", "/dashboard"] {
        let url = format!("http://{admin}{path}");
        let rebound = Client::send(http.get(&url).header("host", "evil.example")).await;
        assert_eq!(rebound.status(), 403, "{path} with a foreign Host");
        let foreign = Client::send(http.get(&url).header("origin", "http://evil.example")).await;
        assert_eq!(foreign.status(), 403, "{path} with a foreign Origin");
        let local = Client::send(http.get(&url).header("origin", "http://localhost:3000")).await;
        assert_eq!(local.status(), 200, "{path} from a local page");
    }
    let fault = server.admin_url("/fault/panic/session_manager");
    let before = server.app.child_id(Child::SessionManager);
    let foreign = Client::send(
        http.post(&fault)
            .header("origin", "http://evil.example")
            .header(otpmcp::admin::FAULT_HEADER, "1"),
    )
    .await;
    assert_eq!(foreign.status(), 403, "a foreign page's fault");
    // What a page on an allowed origin can send without a preflight: no custom header.
    let simple = Client::send(
        http.post(&fault)
            .header("origin", "http://localhost")
            .header("content-type", "text/plain")
            .body("x"),
    )
    .await;
    assert_eq!(simple.status(), 403, "a simple request's fault");
    // Nothing panicked: the readiness probe and the same incarnation answer.
    assert_eq!(probe(admin, "/healthz").await.0, 200);
    assert_eq!(server.app.child_id(Child::SessionManager), before);
    let sent = Client::send(http.post(&fault).header(otpmcp::admin::FAULT_HEADER, "1")).await;
    assert_eq!(sent.status(), 202);
    eventually("a new session manager", || async {
        let now = server.app.child_id(Child::SessionManager);
        (now.is_some() && now != before).then_some(())
    })
    .await;
    server.shutdown().await;
}
