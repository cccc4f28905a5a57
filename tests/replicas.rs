//! Several otpmcp replicas on one Redis (each test starts its own redis-server, and again
//! its own Redis Cluster of three nodes): any
//! replica serves any session, resumes any stream and delivers live what another stored.
//! In-process replicas here (each a whole supervision tree with its own Redis
//! connections); tests/replica_failover.rs kills real processes.

mod common;

use common::redis::{RedisCluster, RedisServer, SharedRedis};
use common::{Client, SseReader, TestServer, Transcript, eventually, within};
use otpmcp::McpServer;
use otpmcp::config::{BackendKind, Config, NonZeroDuration};
use otpmcp::handler::ToolRegistry;
use serde_json::{Value, json};

fn on_redis(redis: &impl SharedRedis) -> impl FnOnce(&mut Config) + Clone + 'static {
    let (url, cluster, nodes) = redis.target();
    move |c: &mut Config| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
        c.store.redis_cluster = cluster;
        c.store.redis_nodes = nodes.into_iter().map(Into::into).collect();
    }
}

async fn replica(redis: &impl SharedRedis) -> TestServer {
    TestServer::start(on_redis(redis)).await
}

/// A replica on `redis` with `tweak` applied too.
async fn replica_with(
    redis: &impl SharedRedis,
    tweak: impl FnOnce(&mut Config) + Clone + 'static,
) -> TestServer {
    let on = on_redis(redis);
    TestServer::start(move |c: &mut Config| {
        on(c);
        tweak(c);
    })
    .await
}

/// Reads `reader` until `t` holds `n` progress notifications.
async fn until_progress(reader: &mut SseReader, t: &mut Transcript, n: usize) {
    while t.progress.len() < n {
        let frame = within("progress", reader.next()).await;
        t.add(&frame.unwrap_or_else(|| panic!("stream ended early")));
    }
}

/// The same client (same session) talking to another replica.
fn via(client: &Client, server: &TestServer) -> Client {
    let mut other = client.clone();
    other.url = server.url.clone();
    other
}

async fn a_session_created_on_one_replica_is_served_and_ended_by_another(redis: impl SharedRedis) {
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut client = a.client();
    client.initialize().await;
    let on_b = via(&client, &b);
    let tools = on_b.ask("tools/list", json!({})).await;
    assert!(
        tools["result"]["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty()),
        "B serves a session it never saw: {tools}"
    );
    let info = b.app.session_info(client.session_id()).await;
    assert!(
        info.is_ok_and(|i| i.client_info["name"] == "otpmcp-tests"),
        "B knows the client's info from Redis"
    );

    let deleted = Client::send(on_b.delete()).await;
    assert_eq!(deleted.status(), 200);
    eventually("A to learn that the session ended", || async {
        let resp =
            Client::send(client.post(&json!({"jsonrpc": "2.0", "id": 99, "method": "ping"}))).await;
        (resp.status() == 404).then_some(())
    })
    .await;
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_stream_started_on_one_replica_resumes_on_another_exactly_once(redis: impl SharedRedis) {
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut client = a.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 30, "interval_ms": 20}),
            Some("t"),
        )
        .await;
    let mut t = Transcript::default();
    until_progress(&mut reader, &mut t, 5).await;
    drop(reader);
    let last = t.ids.last().cloned().unwrap_or_else(|| panic!("no ids"));
    let mut resumed = via(&client, &b).resume(&last).await;
    for f in resumed.rest().await {
        t.add(&f);
    }
    assert_eq!(
        t.progress,
        (1..=30).collect::<Vec<u64>>(),
        "each event once, in order"
    );
    assert_eq!(
        t.response
            .as_ref()
            .map(|r| r["result"]["content"][0]["text"].clone()),
        Some(json!("streamed 30 events"))
    );
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_get_stream_on_one_replica_receives_notifications_stored_by_another(
    redis: impl SharedRedis,
) {
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut client = a.client();
    client.initialize().await;
    let resp = Client::send(via(&client, &b).get(None)).await;
    assert_eq!(resp.status(), 200);
    let mut standalone = SseReader::new(resp);
    let priming = within("the priming event", standalone.next()).await;
    assert!(priming.is_some_and(|f| f.is_priming()));
    // A stores the notification; B holds the connection.
    let told = a.app.update_tools(|_| {}).await;
    assert_eq!(told.ok(), Some(1));
    let note = standalone.next_json().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
    a.shutdown().await;
    b.shutdown().await;
}

/// A server whose `ask` tool asks the client for a sampling result.
fn ask_tool() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools.register(common::ask_tool());
    McpServer::new(tools)
}

async fn a_sampling_answer_posted_to_another_replica_reaches_the_waiting_handler(
    redis: impl SharedRedis,
) {
    let a = TestServer::start_with(on_redis(&redis), ask_tool()).await;
    let b = TestServer::start_with(on_redis(&redis), ask_tool()).await;
    let mut client = a.client();
    client.initialize().await;
    let mut reader = client.call_stream("ask", json!({}), None).await;
    let request: Value = loop {
        let frame = within("the sampling request", reader.next_event())
            .await
            .unwrap_or_else(|| panic!("stream ended"));
        if let Some(v) = frame.json()
            && v["method"] == "sampling/createMessage"
        {
            break v;
        }
    };
    let answer = json!({"jsonrpc": "2.0", "id": request["id"], "result": {
        "role": "assistant", "content": {"type": "text", "text": "four"}, "model": "test"}});
    let posted = Client::send(via(&client, &b).post(&answer)).await;
    assert_eq!(posted.status(), 202);
    let mut t = Transcript::default();
    for f in reader.rest().await {
        t.add(&f);
    }
    assert_eq!(t.result_text().as_deref(), Some("four"));
    a.shutdown().await;
    b.shutdown().await;
}

async fn an_idle_session_expires_on_every_replica(redis: impl SharedRedis) {
    let short = |c: &mut Config| c.server.session_timeout = NonZeroDuration::from_millis(300);
    let a = replica_with(&redis, short).await;
    let b = replica_with(&redis, short).await;
    let mut client = a.client();
    client.initialize().await;
    let on_b = via(&client, &b);
    assert!(on_b.ask("ping", json!({})).await["result"].is_object());
    let id = client.session_id();
    eventually("both replicas to drop the idle session", || async {
        let gone_a = a.app.session_info(id).await.is_err();
        let gone_b = b.app.session_info(id).await.is_err();
        (gone_a && gone_b).then_some(())
    })
    .await;
    for c in [&client, &on_b] {
        let resp =
            Client::send(c.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}))).await;
        assert_eq!(resp.status(), 404, "expired in Redis too, not reloaded");
    }
    a.shutdown().await;
    b.shutdown().await;
}

async fn resuming_on_another_replica_closes_the_older_connection(redis: impl SharedRedis) {
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut client = a.client();
    client.initialize().await;
    let resp = Client::send(client.get(None)).await;
    assert_eq!(resp.status(), 200);
    let mut old = SseReader::new(resp);
    let priming = within("the priming event", old.next())
        .await
        .unwrap_or_else(|| panic!("no priming event"));
    let id = priming
        .id
        .clone()
        .unwrap_or_else(|| panic!("priming has an id"));
    let mut newer = via(&client, &b).resume(&id).await;
    assert!(within("B's priming", newer.next()).await.is_some());
    // A's connection ends (with a retry hint), so no message goes out on two streams.
    let rest = within("A's connection to close", old.rest()).await;
    assert!(rest.iter().all(|f| f.data.is_none()), "{rest:?}");
    let told = a.app.update_tools(|_| {}).await;
    assert_eq!(told.ok(), Some(1));
    assert_eq!(
        newer.next_json().await["method"],
        "notifications/tools/list_changed"
    );
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_replica_that_reloads_a_session_never_reuses_its_stream_numbers(redis: impl SharedRedis) {
    let short = |c: &mut Config| c.server.session_timeout = NonZeroDuration::from_millis(400);
    let a = replica_with(&redis, short).await;
    let b = replica_with(&redis, short).await;
    let mut client = a.client();
    client.initialize().await;
    let first = client
        .ask(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "one"}}),
        )
        .await;
    assert_eq!(first["result"]["content"][0]["text"], "one");
    let on_b = via(&client, &b);
    let id = client.session_id();
    // B keeps the session alive while A's idle copy is dropped.
    eventually("A to drop its idle copy", || async {
        let _ = on_b.ask("ping", json!({})).await;
        a.app.session_info(id).await.is_err().then_some(())
    })
    .await;
    assert!(
        b.app.session_info(id).await.is_ok(),
        "B kept the session alive"
    );
    let second = client
        .ask(
            "tools/call",
            json!({"name": "echo", "arguments": {"text": "two"}}),
        )
        .await;
    assert_eq!(
        second["result"]["content"][0]["text"], "two",
        "a fresh stream, not the first call's replayed: {second}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_cancellation_sent_through_another_replica_stops_the_request(redis: impl SharedRedis) {
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let mut client = a.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 500, "interval_ms": 20}),
            Some("t"),
        )
        .await;
    let mut t = Transcript::default();
    until_progress(&mut reader, &mut t, 2).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 2, "reason": "changed my mind"}});
    let posted = Client::send(via(&client, &b).post(&cancel)).await;
    assert_eq!(posted.status(), 202);
    for f in within("A's stream to end", reader.rest()).await {
        t.add(&f);
    }
    assert!(t.response.is_none(), "a cancelled request is not answered");
    assert!(
        t.progress.len() < 500,
        "stopped early: {}",
        t.progress.len()
    );
    a.shutdown().await;
    b.shutdown().await;
}

fn with_a_resource() -> McpServer {
    let mut resources = otpmcp::handler::ResourceRegistry::default();
    resources.resource(
        otpmcp::protocol::methods::ResourceDefinition {
            uri: "mem://a".into(),
            name: "a".into(),
            description: "A".into(),
            mime_type: None,
        },
        |uri, _| async move {
            Ok(vec![otpmcp::protocol::methods::ResourceContents {
                uri,
                mime_type: None,
                text: Some("alpha".into()),
                blob: None,
            }])
        },
    );
    McpServer::default().with_resources(resources)
}

async fn a_resource_update_on_any_replica_reaches_every_subscriber_once(redis: impl SharedRedis) {
    let a = TestServer::start_with(on_redis(&redis), with_a_resource()).await;
    let b = TestServer::start_with(on_redis(&redis), with_a_resource()).await;
    let mut x = a.client();
    x.initialize().await;
    let mut y = b.client();
    y.initialize().await;
    // Both subscribe through B; X listens on A, Y on B.
    for client in [&x, &y] {
        let answer = via(client, &b)
            .ask("resources/subscribe", json!({"uri": "mem://a"}))
            .await;
        assert_eq!(answer["result"], json!({}));
    }
    let mut x_live = x.resume("none").await;
    assert!(
        within("X's priming", x_live.next())
            .await
            .is_some_and(|f| f.is_priming())
    );
    let mut y_live = y.resume("none").await;
    assert!(
        within("Y's priming", y_live.next())
            .await
            .is_some_and(|f| f.is_priming())
    );

    let told = a.app.notify_resource_updated("mem://a").await;
    assert_eq!(told.ok(), Some(2), "A tells sessions subscribed through B");
    for live in [&mut x_live, &mut y_live] {
        let update = live.next_json().await;
        assert_eq!(update["method"], "notifications/resources/updated");
        assert_eq!(update["params"]["uri"], "mem://a");
    }

    // Once each: the next thing X hears is this marker, not a second copy.
    assert_eq!(a.app.update_tools(|_| {}).await.ok(), Some(1));
    assert_eq!(
        x_live.next_json().await["method"],
        "notifications/tools/list_changed"
    );
    let deleted = Client::send(y.delete()).await;
    assert_eq!(deleted.status(), 200);
    let told = b.app.notify_resource_updated("mem://a").await;
    assert_eq!(told.ok(), Some(1), "an ended session is no longer told");
    assert_eq!(
        x_live.next_json().await["method"],
        "notifications/resources/updated"
    );
    a.shutdown().await;
    b.shutdown().await;
}

async fn a_cancelled_call_closes_its_connection_on_another_replica(redis: impl SharedRedis) {
    // No catch-up from the store within the test (it would close the connection too):
    // only the news from A can.
    let slow_catch_up = |c: &mut Config| c.store.retry_interval = NonZeroDuration::from_secs(600);
    let a = replica_with(&redis, slow_catch_up).await;
    let b = replica_with(&redis, slow_catch_up).await;
    let mut client = a.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 500, "interval_ms": 20}),
            Some("t"),
        )
        .await;
    let mut t = Transcript::default();
    until_progress(&mut reader, &mut t, 2).await;
    drop(reader);
    // The call runs on A; its connection is now on B.
    let last = t.ids.last().cloned().unwrap_or_else(|| panic!("no ids"));
    let mut on_b = via(&client, &b).resume(&last).await;
    until_progress(&mut on_b, &mut t, 4).await;
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                        "params": {"requestId": 2}});
    assert_eq!(Client::send(client.post(&cancel)).await.status(), 202);
    for f in within("B's connection to close", on_b.rest()).await {
        t.add(&f);
    }
    assert!(t.response.is_none(), "a cancelled request is not answered");
    assert!(t.progress.len() < 500);
    a.shutdown().await;
    b.shutdown().await;
}

/// The set of a resource's subscribers (`P:subs:<uri>`) lives in no session's keys: it
/// gets the session timeout as its time to live, renewed while a subscribed session is
/// alive on some replica, and goes once none is.
#[tokio::test]
async fn a_resources_subscriber_set_expires_after_its_subscribers() {
    let redis = RedisServer::start();
    let short = |c: &mut Config| c.server.session_timeout = NonZeroDuration::from_millis(800);
    let on = on_redis(&redis);
    let a = TestServer::start_with(
        move |c: &mut Config| {
            on(c);
            short(c);
        },
        with_a_resource(),
    )
    .await;
    let mut x = a.client();
    x.initialize().await;
    let answer = x
        .ask("resources/subscribe", json!({"uri": "mem://a"}))
        .await;
    assert_eq!(answer["result"], json!({}));
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let ttl: i64 = redis::cmd("PTTL")
        .arg("otpmcp:subs:mem://a")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!((1..=800).contains(&ttl), "a time to live: {ttl} ms");
    // The session goes idle and expires; nothing renews the set any more.
    eventually("the subscriber set to expire", || async {
        let exists: i64 = redis::cmd("EXISTS")
            .arg("otpmcp:subs:mem://a")
            .query_async(&mut conn.clone())
            .await
            .unwrap_or(1);
        (exists == 0).then_some(())
    })
    .await;
    a.shutdown().await;
}

/// Every scenario runs on one redis-server and on a Redis Cluster of three nodes.
macro_rules! on_both {
    ($($scenario:ident),* $(,)?) => {
        mod single {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::RedisServer::start()).await;
                }
            )*
        }
        mod cluster {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::RedisCluster::start()).await;
                }
            )*
        }
    };
}

on_both!(
    a_session_created_on_one_replica_is_served_and_ended_by_another,
    a_stream_started_on_one_replica_resumes_on_another_exactly_once,
    a_get_stream_on_one_replica_receives_notifications_stored_by_another,
    a_sampling_answer_posted_to_another_replica_reaches_the_waiting_handler,
    an_idle_session_expires_on_every_replica,
    resuming_on_another_replica_closes_the_older_connection,
    a_replica_that_reloads_a_session_never_reuses_its_stream_numbers,
    a_cancellation_sent_through_another_replica_stops_the_request,
    a_resource_update_on_any_replica_reaches_every_subscriber_once,
    a_cancelled_call_closes_its_connection_on_another_replica,
);
