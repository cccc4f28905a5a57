//! Faults across replicas, with real processes and a real redis-server of the test's own:
//! a replica killed with SIGKILL mid-stream, and Redis killed and restarted under load.

mod common;

use common::outage;
use common::redis::{Certs, RedisCluster, RedisServer, Secured, SharedRedis};
use common::{
    Binary, Client, Frame, SseReader, TestServer, Transcript, call_through_outage, within,
};
use otpmcp::cluster::leases::{LOST_REPLICA_MESSAGE, RESTARTED_MESSAGE};
use otpmcp::config::{BackendKind, NonZeroDuration};
use otpmcp::server::HANDED_ON_NOTE;
use serde_json::json;

/// The binary with the shipped `config/redis.toml` overlay, pointed at the test's own
/// Redis (the overlay names the usual local one).
async fn binary_on(redis: &impl SharedRedis) -> Binary {
    let (url, cluster, _) = redis.target();
    let cluster = cluster.to_string();
    let more = redis.more_env();
    let mut env = vec![
        ("OTPMCP__STORE__REDIS_URL", url.as_str()),
        // One node is seed enough: the cluster client finds the others.
        ("OTPMCP__STORE__REDIS_CLUSTER", cluster.as_str()),
        ("OTPMCP__STORE__LEASE_TTL", "1s"),
    ];
    env.extend(more.iter().map(|(k, v)| (*k, v.as_str())));
    Binary::start(
        &[
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
        ],
        &env,
    )
    .await
}

#[tokio::test]
async fn a_call_whose_replica_is_killed_resumes_elsewhere_and_gets_an_error_answer() {
    killed_replica(RedisServer::start()).await;
}

/// The leases' keys share a slot, so their scripts run on a cluster too.
#[tokio::test]
async fn on_a_redis_cluster_a_killed_replicas_call_gets_an_error_answer_elsewhere() {
    killed_replica(RedisCluster::start()).await;
}

/// The same on a Redis reached over TLS only (its plain port off), trusting the test's CA
/// (`store.redis_ca_file`), presenting a client certificate, as an ACL user.
#[tokio::test]
async fn over_tls_a_killed_replicas_call_resumes_elsewhere_and_gets_an_error_answer() {
    killed_replica(RedisServer::start_secured(Secured {
        tls: Some(Certs::make()),
        client_auth: true,
        user: Some(("otpmcp".into(), "failover-pass".into())),
    }))
    .await;
}

async fn killed_replica(redis: impl SharedRedis) {
    let mut a = binary_on(&redis).await;
    let b = binary_on(&redis).await;
    let mut client = Client::new(&a.url);
    let (reader, mut t) = call_under_way(&mut client, 200, 10).await;
    // kill -9: no cleanup, no goodbye; whatever A stored is all there is.
    let _ = a.child.kill();
    let _ = a.child.wait();
    drop(reader);

    let frames = resumed_on(
        &client,
        &b,
        &mut t,
        "the lease to lapse and the error answer",
    )
    .await;
    let n = t.assert_exact_prefix();
    assert!((10..200).contains(&n), "A stored {n} events before it died");
    let Some(response) = t.response else {
        panic!("no answer after the replica died: {frames:?}");
    };
    assert_eq!(response["error"]["code"], -32603);
    assert_eq!(response["error"]["message"], LOST_REPLICA_MESSAGE);
    assert_eq!(response["id"], 2, "the answer carries the call's id");
    let mut ids = t.ids.clone();
    ids.dedup();
    assert_eq!(ids.len(), t.ids.len(), "no event id twice");
}

/// A planned restart (SIGTERM) whose drain ends before a call of a re-runnable tool does:
/// another replica runs the call again on the same stream. Its client, resuming there,
/// gets what the first run stored, a note that the call restarted, the whole new run and
/// its result, each event id once.
#[tokio::test]
async fn a_call_outlasting_a_drain_runs_again_on_another_replica() {
    let t = drained_call(40, true).await;
    t.assert_runs(HANDED_ON_NOTE, 40);
    assert_eq!(
        t.runs(HANDED_ON_NOTE).len(),
        2,
        "one handover: {:?}",
        t.notes
    );
    assert_eq!(t.result_text().as_deref(), Some("streamed 40 events"));
}

/// The same with `store.hand_over_calls` off: the call's client, resuming on another
/// replica, gets every event stored and then an error that says the server restarted and
/// the call may be retried, not that a replica was lost.
#[tokio::test]
async fn a_call_outlasting_a_drain_gets_a_retryable_answer_elsewhere() {
    let t = drained_call(200, false).await;
    t.assert_exact_prefix();
    let Some(response) = t.response else {
        panic!("no answer after the drain");
    };
    assert_eq!(response["error"]["code"], -32603);
    assert_eq!(response["error"]["message"], RESTARTED_MESSAGE);
    assert_eq!(response["error"]["data"]["retryable"], true);
}

/// A `stream_events` call of `count` events 25 ms apart on a replica that is stopped
/// (SIGTERM, a 200 ms drain) after 5 of them; its whole transcript, resumed on another
/// replica, each event id once.
async fn drained_call(count: u64, hand_over: bool) -> Transcript {
    let redis = RedisServer::start();
    let (url, _, _) = redis.target();
    let hand_over = hand_over.to_string();
    let draining = [
        ("OTPMCP__STORE__REDIS_URL", url.as_str()),
        ("OTPMCP__STORE__LEASE_TTL", "1s"),
        ("OTPMCP__SERVER__SHUTDOWN_TIMEOUT", "200ms"),
        ("OTPMCP__STORE__HAND_OVER_CALLS", hand_over.as_str()),
    ];
    let config = [
        "--config",
        concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
    ];
    let a = Binary::start(&config, &draining).await;
    let b = binary_on(&redis).await;
    let mut client = Client::new(&a.url);
    let (mut reader, mut t) = call_under_way(&mut client, count, 5).await;
    assert_eq!(a.terminate().await, Some(0));
    // What A sent before it closed the stream, with its retry hint.
    for f in within("the stream's end", reader.rest()).await {
        t.add(&f);
    }
    resumed_on(&client, &b, &mut t, "the answer from another replica").await;
    let mut ids = t.ids.clone();
    ids.dedup();
    assert_eq!(ids.len(), t.ids.len(), "no event id twice");
    t
}

/// A new session on `client`'s replica making a `stream_events` call of `count` events
/// 25 ms apart, read until `first` progress values have arrived.
async fn call_under_way(client: &mut Client, count: u64, first: usize) -> (SseReader, Transcript) {
    client.initialize().await;
    let args = json!({"count": count, "interval_ms": 25});
    let mut reader = client.call_stream("stream_events", args, Some("t")).await;
    let mut t = Transcript::default();
    while t.progress.len() < first {
        let frame = within("progress", reader.next()).await;
        t.add(&frame.unwrap_or_else(|| panic!("stream ended early")));
    }
    (reader, t)
}

/// Resumes `client`'s call on replica `b` from the last id in `t`, adding the rest of the
/// stream (`what` it waits for) to `t`; the frames it got.
async fn resumed_on(client: &Client, b: &Binary, t: &mut Transcript, what: &str) -> Vec<Frame> {
    let last = t.ids.last().cloned().unwrap_or_else(|| panic!("no ids"));
    let mut on_b = client.clone();
    on_b.url = b.url.clone();
    let mut resumed = on_b.resume(&last).await;
    let frames = within(what, resumed.rest()).await;
    for f in &frames {
        t.add(f);
    }
    frames
}

#[tokio::test]
async fn redis_killed_and_restarted_under_load_loses_nothing_it_persisted() {
    let mut redis = RedisServer::start_persistent();
    let url = redis.url();
    let server = TestServer::start(move |c| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
        c.store.retry_interval = NonZeroDuration::from_millis(100);
        c.store.command_timeout = NonZeroDuration::from_millis(500);
        c.store.connect_timeout = NonZeroDuration::from_millis(500);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let before = call_through_outage(&client, 5).await;
    assert_eq!(before.progress, [1, 2, 3, 4, 5]);
    assert_eq!(before.ids.len(), 6, "stored: every event has an id");

    // Load: calls keep running while Redis dies and comes back.
    let load = outage::load(&client, 4, 6);
    redis.kill();
    let during = call_through_outage(&client, 5).await;
    assert_eq!(
        during.progress,
        [1, 2, 3, 4, 5],
        "live delivery goes on without Redis"
    );
    assert!(during.response.is_some(), "and the answer arrives");
    assert!(server.app.unstored_events() > 0, "counted as not stored");
    redis.restart();

    outage::assert_whole(load).await;
    // Stored again once Redis is back, and what Redis persisted before the kill is still
    // there to replay.
    outage::stored_again("events to be stored again", &client).await;
    outage::assert_replays(&client, &before).await;
    server.shutdown().await;
}

/// In-process replicas on Redis at `url` that retry and time out fast, so a restart of
/// Redis passes within a test's wait.
fn on_redis(url: String) -> impl FnOnce(&mut otpmcp::config::Config) {
    move |c: &mut otpmcp::config::Config| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
        c.store.retry_interval = NonZeroDuration::from_millis(100);
        c.store.command_timeout = NonZeroDuration::from_millis(500);
        c.store.connect_timeout = NonZeroDuration::from_millis(500);
    }
}

#[tokio::test]
async fn the_live_feed_between_replicas_comes_back_after_a_redis_restart() {
    let mut redis = RedisServer::start_persistent();
    let a = TestServer::start(on_redis(redis.url())).await;
    let b = TestServer::start(on_redis(redis.url())).await;
    let mut client = a.client();
    client.initialize().await;
    let mut standalone = outage::standalone(&outage::moved(&client, &b)).await;

    redis.restart();
    // Stored on A once Redis is back; B hears of it live, or reads it back when its
    // pub/sub connection returns.
    outage::assert_live_feed(&a, &mut standalone).await;
    a.shutdown().await;
    b.shutdown().await;
}

/// A tool that answers once the test says so.
fn gated(gate: std::sync::Arc<tokio::sync::Notify>) -> otpmcp::McpServer {
    use otpmcp::handler::{ToolRegistry, tool};
    use otpmcp::protocol::methods::CallToolResult;
    let mut tools = ToolRegistry::default();
    tools.register(
        tool("gated", move |(), _| {
            let gate = gate.clone();
            async move {
                gate.notified().await;
                Ok(CallToolResult::text("through"))
            }
        })
        .description("Answers once the test opens the gate."),
    );
    otpmcp::McpServer::new(tools)
}

/// A call running on A answers while Redis is down, and its client follows it from B: A
/// delivers the answer live to nobody there, so it keeps trying to store it, and once
/// Redis is back B hears it. (The soak found a resume on B waiting for it for ever.)
#[tokio::test]
async fn an_answer_given_while_redis_is_down_reaches_the_client_on_another_replica() {
    let mut redis = RedisServer::start_persistent();
    let gate = std::sync::Arc::new(tokio::sync::Notify::new());
    let a = TestServer::start_with(on_redis(redis.url()), gated(gate.clone())).await;
    let b = TestServer::start_with(on_redis(redis.url()), gated(gate.clone())).await;
    let mut client = a.client();
    client.initialize().await;
    let mut on_a = client.call_stream("gated", json!({}), None).await;
    let priming = within("the priming event", on_a.next())
        .await
        .and_then(|f| f.id)
        .unwrap_or_else(|| panic!("no priming id"));
    drop(on_a);
    let mut on_b = client.clone();
    on_b.url = b.url.clone();
    let mut following = on_b.resume(&priming).await;
    assert!(
        within("B's priming", following.next())
            .await
            .is_some_and(|f| f.is_priming())
    );

    redis.kill();
    let before = a.app.unstored_events();
    gate.notify_one();
    common::eventually("A to try to store the answer", || async {
        (a.app.unstored_events() > before).then_some(())
    })
    .await;
    redis.restart();

    let answer = within("the answer on B", following.next_event()).await;
    let answer = answer.and_then(|f| f.json()).unwrap_or_default();
    assert_eq!(
        answer["result"]["content"][0]["text"], "through",
        "{answer}"
    );
    a.shutdown().await;
    b.shutdown().await;
}
