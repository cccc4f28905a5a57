//! Resumption through the real HTTP surface: the erlmcp design's five scenarios, exactly-once
//! delivery across random disconnects, per-stream isolation, and the cases where the
//! official SDKs lose events.

mod common;

use std::time::Duration;

use common::{Client, TestServer, Transcript, eventually};
use otpmcp::config::NonZeroDuration;
use otpmcp::event_store::StreamNo;
use rand::{Rng, SeedableRng};
use serde_json::json;

/// Reads `n` non-priming events from `reader` into `t`.
async fn read_events(reader: &mut common::SseReader, t: &mut Transcript, n: usize) {
    let mut got = 0;
    while got < n {
        let f = reader
            .next_event()
            .await
            .unwrap_or_else(|| panic!("stream ended early"));
        if !f.is_priming() {
            t.add(&f);
            got += 1;
        }
    }
}

/// Reads until the response, failing on duplicates.
async fn read_to_end(reader: &mut common::SseReader, t: &mut Transcript) {
    while let Some(f) = reader.next_event().await {
        if t.add(&f) {
            return;
        }
    }
}

fn assert_complete(t: &Transcript, count: u64) {
    let want: Vec<u64> = (1..=count).collect();
    assert_eq!(
        t.progress, want,
        "every progress notification once, in order"
    );
    assert_eq!(t.result_text(), Some(format!("streamed {count} events")));
    let mut ids = t.ids.clone();
    ids.dedup();
    assert_eq!(ids.len(), t.ids.len(), "no event id delivered twice");
}

#[tokio::test]
async fn scenario_1_basic_resumption_replays_what_was_missed_then_continues_live() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut t = Transcript::default();
    let mut first = client
        .call_stream(
            "stream_events",
            json!({"count": 8, "interval_ms": 30}),
            Some("tok"),
        )
        .await;
    read_events(&mut first, &mut t, 3).await;
    let last = first.last_id.clone().unwrap_or_default();
    drop(first);
    let mut resumed = client.resume(&last).await;
    read_to_end(&mut resumed, &mut t).await;
    assert_complete(&t, 8);
    server.shutdown().await;
}

#[tokio::test]
async fn scenario_2_multiple_disconnects_each_pick_up_exactly_where_they_left_off() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut t = Transcript::default();
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 20, "interval_ms": 10}),
            Some("tok"),
        )
        .await;
    read_events(&mut reader, &mut t, 10).await;
    let at_10 = reader.last_id.clone().unwrap_or_default();
    drop(reader);
    let mut reader = client.resume(&at_10).await;
    read_events(&mut reader, &mut t, 5).await;
    let at_15 = reader.last_id.clone().unwrap_or_default();
    drop(reader);
    let mut reader = client.resume(&at_15).await;
    read_to_end(&mut reader, &mut t).await;
    assert_complete(&t, 20);
    server.shutdown().await;
}

#[tokio::test]
async fn scenario_3_expired_events_are_not_replayed_and_the_gone_stream_says_so() {
    let server = TestServer::start(|c| {
        c.sse.event_ttl = NonZeroDuration::from_millis(300);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 5, "interval_ms": 0}),
            Some("tok"),
        )
        .await;
    let mut t = Transcript::default();
    read_to_end(&mut reader, &mut t).await;
    let last = reader.last_id.clone().unwrap_or_default();
    drop(reader);
    let session = client.session_id();
    // Wait until the sweep has dropped the finished stream.
    eventually("the stream to expire", || async {
        let info = server.app.session_info(session).await.ok()?;
        (!info.last_event.iter().any(|(s, _)| *s == StreamNo(1))).then_some(())
    })
    .await;
    let resp = Client::send(client.get(Some(&last))).await;
    assert_eq!(
        resp.status(),
        410,
        "an expired POST stream cannot be resumed"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn scenario_4_a_last_event_id_older_than_the_replay_window_gets_no_replay() {
    let window = NonZeroDuration::from_millis(300);
    let server = TestServer::start(|c| c.sse.replay_window = window).await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 4, "interval_ms": 0}),
            Some("tok"),
        )
        .await;
    let priming = reader.next().await.unwrap_or_default();
    assert!(priming.is_priming());
    let priming_id = priming.id.unwrap_or_default();
    let mut t = Transcript::default();
    read_to_end(&mut reader, &mut t).await;
    drop(reader);
    // The condition under test is the passage of time itself.
    tokio::time::sleep(window.get() + Duration::from_millis(100)).await;
    let mut resumed = client.resume(&priming_id).await;
    let frames = resumed.rest().await;
    assert!(
        frames
            .iter()
            .all(|f| f.progress().is_none() && !f.is_response()),
        "nothing is replayed outside the window: {frames:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn scenario_5_an_invalid_last_event_id_opens_a_live_stream_without_replay() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut t = Transcript::default();
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 3, "interval_ms": 0}),
            Some("tok"),
        )
        .await;
    read_to_end(&mut reader, &mut t).await;
    for bad in ["invalid_xyz", "session_abc_3", "ffffffff-x-1", ""] {
        let mut live = client.resume(bad).await;
        let priming = live.next().await.unwrap_or_default();
        assert!(priming.is_priming(), "{bad:?}: a priming frame first");
        let id = priming.id.unwrap_or_default();
        assert!(
            id.contains("-0-"),
            "{bad:?}: the standalone stream, got {id}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn exactly_once_across_random_disconnects() {
    let seed: u64 = std::env::var("OTPMCP_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    println!("seed {seed} (set OTPMCP_TEST_SEED to repeat)");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let count = 150;
    let mut t = Transcript::default();
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": count, "interval_ms": 2}),
            Some("tok"),
        )
        .await;
    let mut reconnects = 0;
    loop {
        let budget = rng.random_range(1..25);
        let mut done = false;
        for _ in 0..budget {
            match reader.next_event().await {
                Some(f) => {
                    if t.add(&f) {
                        done = true;
                        break;
                    }
                }
                None => break,
            }
        }
        if done {
            break;
        }
        let last = reader.last_id.clone().unwrap_or_default();
        drop(reader);
        reconnects += 1;
        reader = client.resume(&last).await;
    }
    assert!(reconnects > 3, "the test disconnected {reconnects} times");
    assert_complete(&t, count);
    server.shutdown().await;
}

#[tokio::test]
async fn two_concurrent_post_streams_stay_isolated() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let a = client.call_stream(
        "stream_events",
        json!({"count": 10, "interval_ms": 5}),
        Some("a"),
    );
    let b = client.call_stream(
        "stream_events",
        json!({"count": 7, "interval_ms": 5}),
        Some("b"),
    );
    let (mut a, mut b) = tokio::join!(a, b);
    let (fa, fb) = tokio::join!(a.rest(), b.rest());
    let tokens = |frames: &[common::Frame]| -> Vec<String> {
        frames
            .iter()
            .filter_map(|f| f.json())
            .filter_map(|v| v["params"]["progressToken"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(tokens(&fa), vec!["a"; 10]);
    assert_eq!(tokens(&fb), vec!["b"; 7]);
    let stream_of = |frames: &[common::Frame]| -> Vec<String> {
        let mut s: Vec<String> = frames
            .iter()
            .filter_map(|f| f.id.as_deref())
            .filter_map(|id| id.split('-').nth(1).map(str::to_owned))
            .collect();
        s.dedup();
        s
    };
    let (sa, sb) = (stream_of(&fa), stream_of(&fb));
    assert_eq!(sa.len(), 1, "one stream number per POST stream");
    assert_eq!(sb.len(), 1);
    assert_ne!(sa, sb, "two POST streams have different numbers");
    // Resuming one of them replays only its own events.
    let priming_a = fa[0].id.clone().unwrap_or_default();
    let mut t = Transcript::default();
    let mut r = client.resume(&priming_a).await;
    read_to_end(&mut r, &mut t).await;
    assert_eq!(t.progress, (1..=10).collect::<Vec<_>>());
    server.shutdown().await;
}

#[tokio::test]
async fn a_finished_call_with_many_events_is_replayed_in_full() {
    // rmcp keeps 16 events and replays nothing once the call has finished.
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let count = 500;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": count, "interval_ms": 0}),
            Some("tok"),
        )
        .await;
    let priming = reader.next().await.unwrap_or_default();
    let priming_id = priming.id.unwrap_or_default();
    drop(reader);
    server
        .wait_for_response_stored(client.session_id(), 1, count)
        .await;
    let mut t = Transcript::default();
    let mut resumed = client.resume(&priming_id).await;
    read_to_end(&mut resumed, &mut t).await;
    assert_complete(&t, count);
    assert!(
        resumed.next().await.is_none(),
        "the stream closes after the response"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn sessions_never_see_each_others_events_even_with_the_same_request_ids() {
    // The Python SDK keys stored events by request id across sessions.
    let server = TestServer::start(|_| {}).await;
    let mut alice = server.client();
    alice.initialize().await;
    let mut bob = Client::new(&server.url);
    bob.initialize().await;
    let mut ra = alice
        .call_stream(
            "stream_events",
            json!({"count": 3, "interval_ms": 0}),
            Some("alice"),
        )
        .await;
    let mut rb = bob
        .call_stream(
            "stream_events",
            json!({"count": 5, "interval_ms": 0}),
            Some("bob"),
        )
        .await;
    let fa = ra.rest().await;
    rb.rest().await;
    let alice_priming = fa[0].id.clone().unwrap_or_default();
    // Bob presents Alice's id: he gets a live stream of his own, never her events.
    let mut r = bob.resume(&alice_priming).await;
    let priming = r.next().await.unwrap_or_default();
    assert!(
        priming.id.unwrap_or_default().contains("-0-"),
        "standalone stream"
    );
    let mut t = Transcript::default();
    read_to_end(&mut alice.resume(&alice_priming).await, &mut t).await;
    assert_eq!(t.progress, vec![1, 2, 3], "Alice still resumes her own");
    server.shutdown().await;
}
