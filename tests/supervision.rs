//! Supervision: a panic injected into each supervised actor is followed by a restart with
//! sessions and stored events intact; past the restart intensity the tree gives up.

mod common;

use common::{TestServer, Transcript, eventually, within};
use otpmcp::supervisor::{Child, Exit};
use serde_json::json;

async fn restarted(server: &TestServer, child: Child, before: Option<ractor::ActorId>) {
    eventually("the child to restart", || async {
        let now = server.app.child_id(child);
        (now.is_some() && now != before).then_some(())
    })
    .await;
}

async fn crash_and_wait(server: &TestServer, child: Child) {
    let before = server.app.child_id(child);
    assert!(server.app.inject_panic(child).is_ok());
    restarted(server, child, before).await;
}

#[tokio::test]
async fn the_event_store_restarts_with_its_events_and_live_subscriptions() {
    store_restart(TestServer::start(|_| {}).await).await;
}

#[tokio::test]
async fn the_event_store_on_redis_restarts_with_its_events_and_live_subscriptions() {
    let redis = common::redis::RedisServer::start();
    let url = redis.url();
    store_restart(
        TestServer::start(move |c| {
            c.store.backend = otpmcp::config::BackendKind::Redis;
            c.store.redis_url = url.into();
        })
        .await,
    )
    .await;
}

async fn store_restart(server: TestServer) {
    let mut client = server.client();
    client.initialize().await;
    // A finished call whose events must survive the crash.
    let mut done = client
        .call_stream(
            "stream_events",
            json!({"count": 5, "interval_ms": 0}),
            Some("a"),
        )
        .await;
    let priming = done.next().await.and_then(|f| f.id).unwrap_or_default();
    done.rest().await;
    // A call in flight across the crash.
    let mut live = client
        .call_stream(
            "stream_events",
            json!({"count": 30, "interval_ms": 10}),
            Some("b"),
        )
        .await;
    let mut t = Transcript::default();
    for _ in 0..5 {
        if let Some(f) = live.next_event().await {
            t.add(&f);
        }
    }
    let shard = server.app.store_shard_of(client.session_id());
    crash_and_wait(&server, Child::EventStore(shard)).await;
    while let Some(f) = live.next_event().await {
        if t.add(&f) {
            break;
        }
    }
    assert_eq!(
        t.progress,
        (1..=30).collect::<Vec<_>>(),
        "the live stream kept flowing"
    );
    let mut replay = Transcript::default();
    let mut r = client.resume(&priming).await;
    while let Some(f) = r.next_event().await {
        if replay.add(&f) {
            break;
        }
    }
    assert_eq!(
        replay.progress,
        vec![1, 2, 3, 4, 5],
        "stored events survived"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_store_crash_amid_a_fast_stream_loses_and_repeats_nothing() {
    fast_stream_across_a_crash(TestServer::start(roomy).await).await;
}

#[tokio::test]
async fn a_store_crash_on_redis_amid_a_fast_stream_loses_and_repeats_nothing() {
    let redis = common::redis::RedisServer::start();
    let url = redis.url();
    fast_stream_across_a_crash(
        TestServer::start(move |c| {
            roomy(c);
            c.store.backend = otpmcp::config::BackendKind::Redis;
            c.store.redis_url = url.into();
        })
        .await,
    )
    .await;
}

/// Room for a whole 0 ms stream: the connection is not cut as a slow consumer, and the
/// session keeps every event.
fn roomy(c: &mut otpmcp::Config) {
    c.sse.max_session_events =
        std::num::NonZeroUsize::new(100_000).unwrap_or(c.sse.max_session_events);
    c.sse.stream_buffer = std::num::NonZeroUsize::new(100_000).unwrap_or(c.sse.stream_buffer);
    c.sse.stream_buffer_bytes =
        std::num::NonZeroUsize::new(64 << 20).unwrap_or(c.sse.stream_buffer_bytes);
}

/// A handler streaming without pause keeps several appends in flight (the stream
/// writer's window; on Redis, group commit): a crash of the store shard amid them makes
/// the writer send them again, and the client still gets every event once, in order.
async fn fast_stream_across_a_crash(server: TestServer) {
    // Long enough that the handler is still writing when the shard crashes.
    const COUNT: u64 = 20_000;
    let mut client = server.client();
    client.initialize().await;
    let mut live = client
        .call_stream(
            "stream_events",
            json!({"count": COUNT, "interval_ms": 0}),
            Some("f"),
        )
        .await;
    let mut t = Transcript::default();
    while t.progress.len() < 50 {
        match live.next_event().await {
            Some(f) => {
                t.add(&f);
            }
            None => panic!("the stream ended before the crash"),
        }
    }
    let shard = server.app.store_shard_of(client.session_id());
    crash_and_wait(&server, Child::EventStore(shard)).await;
    within("the stream to end with its result", async {
        while !t.read_to_response(&mut live).await {
            let last = live.last_id.clone().unwrap_or_default();
            live = client.resume(&last).await;
        }
    })
    .await;
    assert_eq!(
        t.progress,
        (1..=COUNT).collect::<Vec<_>>(),
        "every event once, in order"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn the_session_manager_restarts_with_its_sessions() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    crash_and_wait(&server, Child::SessionManager).await;
    let info = server.app.session_info(client.session_id()).await;
    assert!(info.is_ok(), "the session survived: {info:?}");
    let mut r = client
        .call_stream("echo", json!({"text": "still here"}), None)
        .await;
    let mut t = Transcript::default();
    for f in r.rest().await {
        t.add(&f);
    }
    assert_eq!(t.result_text().as_deref(), Some("still here"));
    server.shutdown().await;
}

#[tokio::test]
async fn the_http_listener_restarts_on_the_same_port() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    crash_and_wait(&server, Child::HttpListener).await;
    // A fresh connection (the old keep-alive one died with the old listener).
    let mut fresh = common::Client::new(&server.url);
    fresh.session = client.session.clone();
    let mut r = fresh
        .call_stream("echo", json!({"text": "again"}), None)
        .await;
    let mut t = Transcript::default();
    for f in r.rest().await {
        t.add(&f);
    }
    assert_eq!(t.result_text().as_deref(), Some("again"));
    server.shutdown().await;
}

#[tokio::test]
async fn past_the_restart_intensity_the_tree_escalates() {
    let mut server = TestServer::start(|c| c.supervisor.max_restarts = 1).await;
    crash_and_wait(&server, Child::EventStore(0)).await;
    assert!(server.app.inject_panic(Child::EventStore(0)).is_ok());
    let exit = within("the tree to give up", server.app.wait()).await;
    assert!(
        matches!(exit, Exit::Escalated(ref why) if why.contains("event_store")),
        "{exit:?}"
    );
}
