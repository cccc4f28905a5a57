//! A connection to Redis that goes silent without closing (half-open: a NAT or a firewall
//! forgot it) is detected by the heartbeat's ping and replaced, for commands and for the
//! pub/sub feed. A relay of the test's own stops forwarding to make one.

mod common;

use common::redis::RedisServer;
use common::relay::Relay;
use common::{TestServer, Transcript, eventually, within};
use otpmcp::config::{BackendKind, Config, NonZeroDuration};
use serde_json::json;

fn on_redis(url: String) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
        c.store.ping_interval = NonZeroDuration::from_millis(200);
        c.store.command_timeout = NonZeroDuration::from_millis(300);
        c.store.connect_timeout = NonZeroDuration::from_millis(500);
        c.store.retry_interval = NonZeroDuration::from_millis(100);
    }
}

#[tokio::test]
async fn a_half_open_redis_connection_is_replaced_and_the_live_feed_comes_back() {
    let redis = RedisServer::start();
    let relay = Relay::start(redis.port).await;
    let a = TestServer::start(on_redis(redis.url())).await;
    let b = TestServer::start(on_redis(relay.url())).await;
    let mut client = a.client();
    client.initialize().await;
    let mut on_b = client.clone();
    on_b.url = b.url.clone();
    // B serves the session too, before the cut.
    on_b.echo("before").await;

    relay.cut();

    // Commands: B stores events again once its connection was replaced.
    eventually("B to store again", || async {
        let before = b.app.unstored_events();
        let told = b.app.update_tools(|_| {}).await.ok();
        (told.is_some() && b.app.unstored_events() == before).then_some(())
    })
    .await;

    // Pub/sub: a call running on A, followed from B, arrives whole on B as A stores it.
    let mut on_a = client
        .call_stream(
            "stream_events",
            json!({"count": 30, "interval_ms": 30}),
            Some("t"),
        )
        .await;
    let priming = within("the priming event", on_a.next())
        .await
        .and_then(|f| f.id)
        .unwrap_or_else(|| panic!("no priming id"));
    drop(on_a);
    // While a connection is being replaced, B answers 503 (Redis is unavailable): a
    // client tries again, as this one does.
    let mut resumed = eventually("B to resume the call", || async {
        let resp = common::Client::send(on_b.get(Some(&priming))).await;
        (resp.status() == 200).then(|| common::SseReader::new(resp))
    })
    .await;
    let mut t = Transcript::default();
    within("the call, followed from B", async {
        while let Some(f) = resumed.next().await {
            if t.add(&f) {
                break;
            }
        }
    })
    .await;
    assert_eq!(t.progress, (1..=30).collect::<Vec<u64>>());
    assert_eq!(t.result_text().as_deref(), Some("streamed 30 events"));
    a.shutdown().await;
    b.shutdown().await;
}
