//! The event store in shards (`store.shards`): sessions spread over them, one shard's
//! crash and restart leaves the others' sessions untouched (on the dashboard too) and
//! loses nothing of its own, and the store-wide budget holds across shards.

mod common;

use common::{Client, SseReader, TestServer, Transcript, admin_on, eventually, sse_get};
use otpmcp::config::NonZeroDuration;
use otpmcp::supervisor::Child;
use serde_json::{Value, json};

const SHARDS: usize = 4;

fn sharded(c: &mut otpmcp::Config) {
    c.store.shards = SHARDS;
}

/// A new session, with the shard that owns it.
async fn session_on(server: &TestServer) -> (Client, usize) {
    let mut client = server.client();
    client.initialize().await;
    let shard = server.app.store_shard_of(client.session_id());
    (client, shard)
}

/// A session on each of two different shards.
async fn two_shards(server: &TestServer) -> ((Client, usize), (Client, usize)) {
    let first = session_on(server).await;
    for _ in 0..64 {
        let other = session_on(server).await;
        if other.1 != first.1 {
            return (first, other);
        }
    }
    panic!("64 sessions all landed on shard {}", first.1);
}

#[tokio::test]
async fn sessions_spread_over_the_shards_and_each_shard_holds_its_own() {
    let server = TestServer::start(sharded).await;
    assert_eq!(server.app.store().shards(), SHARDS);
    // Sessions until every shard owns at least two (random ids: a few dozen at most).
    let mut owned = [0u64; SHARDS];
    let mut clients = Vec::new();
    while owned.iter().any(|n| *n < 2) {
        assert!(clients.len() < 200, "sessions do not spread: {owned:?}");
        let (client, shard) = session_on(&server).await;
        client.echo("stored").await;
        owned[shard] += 1;
        clients.push(client);
    }
    for (shard, sessions) in owned.iter().enumerate() {
        let held = server.app.store().occupancy_of(shard).await;
        let held = held.ok().flatten().unwrap_or_default();
        assert_eq!(held.sessions, *sessions, "shard {shard} holds its sessions");
        assert!(held.events >= *sessions, "and their events");
    }
    let all = server.app.store().occupancy().await.ok().flatten();
    assert_eq!(all.map(|o| o.sessions), Some(owned.iter().sum()));
    server.shutdown().await;
}

/// The next dashboard snapshot's `event_store` node.
async fn store_node(feed: &mut SseReader) -> Value {
    loop {
        let frame = feed
            .next()
            .await
            .unwrap_or_else(|| panic!("the feed ended"));
        if frame.event.as_deref() != Some("snapshot") {
            continue;
        }
        let snapshot = frame.json().unwrap_or_default();
        let children = snapshot["tree"]["children"].as_array().cloned();
        let store = children
            .unwrap_or_default()
            .into_iter()
            .find(|c| c["name"] == "event_store");
        if let Some(store) = store {
            return store;
        }
    }
}

/// A 30-event streamed call, read up to its 5th progress event.
async fn streaming(client: &Client, token: &str) -> (SseReader, Transcript) {
    let args = json!({"count": 30, "interval_ms": 10});
    let mut live = client.call_stream("stream_events", args, Some(token)).await;
    let mut t = Transcript::default();
    while t.progress.len() < 5 {
        let frame = live.next_event().await;
        t.add(&frame.unwrap_or_else(|| panic!("the stream ended early")));
    }
    (live, t)
}

async fn finish(mut live: SseReader, mut t: Transcript) -> Transcript {
    while let Some(f) = live.next_event().await {
        if t.add(&f) {
            break;
        }
    }
    t
}

/// A finished call of `count` events; returns its priming event's id.
async fn finished_call(client: &Client, count: u64, token: &str) -> String {
    let args = json!({"count": count, "interval_ms": 0});
    let mut call = client.call_stream("stream_events", args, Some(token)).await;
    let priming = call.next().await.and_then(|f| f.id).unwrap_or_default();
    call.rest().await;
    priming
}

/// What a resume after `from` replays, up to the response.
async fn resumed(client: &Client, from: &str) -> Transcript {
    finish(client.resume(from).await, Transcript::default()).await
}

#[tokio::test]
async fn one_shard_restarts_alone_and_its_streams_resume_exactly() {
    let server = TestServer::start(|c| {
        sharded(c);
        admin_on(c);
        c.admin.dashboard_interval = NonZeroDuration::from_millis(100);
    })
    .await;
    let ((hit, crashed), (spared, kept)) = two_shards(&server).await;
    let spared_actor = server.app.child_id(Child::EventStore(kept));
    let crashed_actor = server.app.child_id(Child::EventStore(crashed));
    // A finished call on the crashing shard, whose events must survive.
    let priming = finished_call(&hit, 5, "done").await;
    // A call in flight on each shard across the crash.
    let (hit_live, hit_t) = streaming(&hit, "hit").await;
    let (spared_live, spared_t) = streaming(&spared, "spared").await;

    assert!(server.app.inject_panic(Child::EventStore(crashed)).is_ok());
    eventually("the shard to restart", || async {
        let now = server.app.child_id(Child::EventStore(crashed));
        (now.is_some() && now != crashed_actor).then_some(())
    })
    .await;
    assert_eq!(
        server.app.child_id(Child::EventStore(kept)),
        spared_actor,
        "the other shard was not restarted"
    );
    let (hit_t, spared_t) = tokio::join!(finish(hit_live, hit_t), finish(spared_live, spared_t));
    for (who, t) in [("crashed", &hit_t), ("spared", &spared_t)] {
        assert_eq!(
            t.progress,
            (1..=30).collect::<Vec<_>>(),
            "{who} shard's live stream"
        );
        assert!(t.response.is_some(), "{who} shard's call answered");
    }
    // Resume across the restart: exactly what was stored, once each.
    let replay = resumed(&hit, &priming).await;
    assert_eq!(replay.progress, [1, 2, 3, 4, 5], "stored events survived");
    let resumed_from = hit_t.ids.first().cloned().unwrap_or_default();
    let again = resumed(&hit, &resumed_from).await;
    assert_eq!(again.ids.as_slice(), &hit_t.ids[1..], "the resume is exact");

    // The dashboard shows the restart on that shard only.
    let mut feed = sse_get(&server.admin_url("/dashboard/events"), None).await;
    let store = eventually_node(&mut feed, crashed).await;
    let shards = store["children"].as_array().cloned().unwrap_or_default();
    assert_eq!(shards.len(), SHARDS);
    for (n, shard) in shards.iter().enumerate() {
        assert_eq!(shard["name"], format!("shard {n}"));
        assert_eq!(shard["state"], "running");
        let expected = u64::from(n == crashed);
        assert_eq!(shard["restarts"], expected, "shard {n}: {store}");
    }
    assert_eq!(store["restarts"], 1);
    server.shutdown().await;
}

/// Snapshots until one shows shard `crashed` restarted (history may come first).
async fn eventually_node(feed: &mut SseReader, crashed: usize) -> Value {
    loop {
        let store = store_node(feed).await;
        if store["children"][crashed]["restarts"] == 1 {
            return store;
        }
    }
}

#[tokio::test]
async fn the_store_wide_budget_holds_across_shards() {
    const BUDGET: u64 = 40;
    let server = TestServer::start(|c| {
        sharded(c);
        c.sse.max_total_events =
            std::num::NonZeroUsize::new(BUDGET as usize).unwrap_or_else(|| panic!("non-zero"));
    })
    .await;
    let ((first, _), (second, _)) = two_shards(&server).await;
    // The first session's 30 events are the oldest of the store; newer events on
    // another shard push the store past its budget.
    let priming = finished_call(&first, 30, "old").await;
    let new_priming = finished_call(&second, 30, "new").await;
    let held = eventually("the shards to trim", || async {
        let held = server.app.store().occupancy().await.ok().flatten()?;
        (held.events <= BUDGET).then_some(held)
    })
    .await;
    assert!(
        held.events >= BUDGET * 9 / 10,
        "no more than needed went: {held:?}"
    );
    // What went is the oldest: the first session's, on the other shard.
    let old = resumed(&first, &priming).await.progress;
    assert!(
        old.first().is_some_and(|p| *p > 1) && old.last() == Some(&30),
        "the oldest events were evicted: {old:?}"
    );
    let new = resumed(&second, &new_priming).await.progress;
    assert_eq!(
        new,
        (1..=30).collect::<Vec<_>>(),
        "the newer shard kept all"
    );
    server.shutdown().await;
}
