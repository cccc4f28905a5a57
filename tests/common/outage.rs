//! Calls through a Redis outage or failover: a load of streamed calls that resume after
//! cuts, and the checks that nothing was lost or repeated.

use std::time::Duration;

use serde_json::json;

use super::{Client, SseReader, TestServer, Transcript, eventually, within};

/// Calls `stream_events` (`count` events, 5 ms apart) and reads the whole stream, resuming
/// after a cut and retrying a 503 while the store is away, as a client does; returns the
/// transcript.
pub async fn call_through_outage(client: &Client, count: u64) -> Transcript {
    let reader = client
        .call_stream(
            "stream_events",
            json!({"count": count, "interval_ms": 5}),
            Some("t"),
        )
        .await;
    finish_through_outage(client, reader, Transcript::default()).await
}

/// Reads the rest of a call's stream into `t`, resuming as [`call_through_outage`] does.
pub async fn finish_through_outage(
    client: &Client,
    mut reader: SseReader,
    mut t: Transcript,
) -> Transcript {
    let mut resume_from = t.ids.last().cloned();
    loop {
        for f in within("a call to finish", reader.rest()).await {
            if f.is_priming() {
                resume_from = f.id.clone();
            }
            t.add(&f);
            if let Some(id) = &f.id {
                resume_from = Some(id.clone());
            }
        }
        if t.response.is_some() {
            return t;
        }
        // Closed before the answer (events went missing from the live feed while Redis
        // was away): resume like a client does, after the retry hint.
        let Some(last) = resume_from.clone() else {
            panic!("closed with nothing to resume from: {t:?}");
        };
        reader = loop {
            let resp = Client::send(client.get(Some(&last))).await;
            if resp.status() == 200 {
                break SseReader::new(resp);
            }
            assert_eq!(resp.status(), 503, "only unavailable while Redis is away");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
    }
}

/// `rounds` streamed calls of 20 events each, from `tasks` tasks on `client`'s session.
pub fn load(
    client: &Client,
    tasks: usize,
    rounds: usize,
) -> Vec<tokio::task::JoinHandle<Vec<Transcript>>> {
    (0..tasks)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move {
                let mut done = Vec::new();
                for _ in 0..rounds {
                    done.push(call_through_outage(&client, 20).await);
                }
                done
            })
        })
        .collect()
}

/// Every call of the load ended with its answer and every event, in order. The event
/// whose append was in flight when Redis died may arrive twice: live (its outcome unknown)
/// and replayed (Redis had stored it). Nothing else repeats, and nothing is missing.
pub async fn assert_whole(load: Vec<tokio::task::JoinHandle<Vec<Transcript>>>) -> usize {
    let mut calls = 0;
    for task in load {
        let transcripts = within("the load to finish", task)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        for t in transcripts {
            let mut seen = t.progress.clone();
            assert!(seen.is_sorted(), "in order: {seen:?}");
            seen.dedup();
            assert!(t.progress.len() - seen.len() <= 1, "{:?}", t.progress);
            assert_eq!(seen, (1..=20).collect::<Vec<u64>>(), "no gaps");
            assert!(t.response.is_some(), "no call hangs or loses its answer");
            calls += 1;
        }
    }
    calls
}

/// Waits until `client`'s replica stores a call's events again.
pub async fn stored_again(what: &str, client: &Client) {
    eventually(what, || async {
        let t = call_through_outage(client, 2).await;
        (t.ids.len() == 3).then_some(())
    })
    .await;
}

/// `client` on `server` instead.
pub fn moved(client: &Client, server: &TestServer) -> Client {
    let mut moved = client.clone();
    moved.url = server.url.clone();
    moved
}

/// Resuming after `before` (5 events)'s second event gives the rest of it, as stored
/// before the outage.
pub async fn assert_replays(client: &Client, before: &Transcript) {
    let mut resumed = client.resume(&before.ids[1]).await;
    let mut again = Transcript::default();
    for f in within("the replay", resumed.rest()).await {
        again.add(&f);
    }
    assert_eq!(again.progress, [3, 4, 5], "what Redis had is all there");
    assert_eq!(again.ids, before.ids[2..]);
    assert!(again.response.is_some());
}

/// `client`'s standalone GET stream, its priming event read.
pub async fn standalone(client: &Client) -> SseReader {
    let resp = Client::send(client.get(None)).await;
    assert_eq!(resp.status(), 200);
    let mut stream = SseReader::new(resp);
    assert!(within("the priming event", stream.next()).await.is_some());
    stream
}

/// Waits until `a` stores a tools change and tells its one session, then checks that
/// `following` (that session's standalone stream, on another replica) hears of it: the
/// live feed between replicas runs again.
pub async fn assert_live_feed(a: &TestServer, following: &mut SseReader) {
    eventually("A to store and tell its session", || async {
        let before = a.app.unstored_events();
        let told = a.app.update_tools(|_| {}).await.ok();
        (told == Some(1) && a.app.unstored_events() == before).then_some(())
    })
    .await;
    let note = following.next_json().await;
    assert_eq!(note["method"], "notifications/tools/list_changed");
}
