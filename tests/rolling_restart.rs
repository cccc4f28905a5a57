//! Rolling restarts behind Debian's nginx with `deploy/nginx/otpmcp.conf`: three replicas
//! on one Redis, each restarted in turn under load (SIGTERM, drain, exit, start on the
//! same port), at a rolling restart's pace. Every streamed session call shorter than the
//! drain ends with its result and its events exact, resuming across any cut; every
//! 2026-07-28 call ends with its notes and its result. A request refused before it ran is
//! sent again: a draining replica's 503, or nginx's 502 for a connection the exiting
//! replica reset before reading it (nginx does not re-send a POST it already sent; a
//! client cannot tell that such a call never ran: docs/deployment.md). A session call
//! longer than the drain is handed on: another replica runs it again on the same stream,
//! and its client sees the first run's events, exact, a note, then the whole new run and
//! its result; every durable task completes, handed on to another replica by each restart
//! that stops its own. `scripts/rolling-restart` runs it longer.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::nginx::Nginx;
use common::redis::{RedisServer, free_port};
use common::stateless::Stateless;
use common::{Binary, Client, SseReader, Transcript, eventually, within};
use otpmcp::server::HANDED_ON_NOTE;
use serde_json::{Value, json};

const REPLICAS: usize = 3;

/// Times each replica is restarted: 2 in CI, more from `scripts/rolling-restart`
/// (`ROLLING_ROUNDS`).
fn rounds() -> usize {
    std::env::var("ROLLING_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}
/// Each streamed call: 10 progress events 30 ms apart, well inside the drain (2 s).
const EVENTS: u64 = 10;
/// Streamed calls completed between two restarts: about 3 s of the load.
const CALLS_BETWEEN: u64 = 40;
/// A long call, and a task: 100 events 30 ms apart, longer than the drain.
const LONG_EVENTS: u64 = 100;

async fn replica(redis: &str, port: u16) -> Binary {
    Binary::start(
        &[
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
            "--bind",
            &format!("127.0.0.1:{port}"),
        ],
        &[
            ("OTPMCP__STORE__REDIS_URL", redis),
            ("OTPMCP__STORE__LEASE_TTL", "1s"),
            (
                "OTPMCP__STATELESS__REQUEST_STATE_KEY",
                "rolling-restart-test-key-0123456789",
            ),
        ],
    )
    .await
}

/// What the load saw.
#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    resumes: AtomicU64,
    /// Requests refused before they ran and sent again: 502 from nginx, 503 from a
    /// draining replica.
    refused: [AtomicU64; 2],
    stateless: AtomicU64,
    /// Long session calls that ended with their result where they began, and those
    /// handed on by a drain (run again on another replica) first.
    long: [AtomicU64; 2],
    /// Tasks completed, and of those, handed on by a restart at least once.
    tasks: [AtomicU64; 2],
    /// How long each session call and each 2026-07-28 call took, whole.
    latencies: [std::sync::Mutex<Vec<Duration>>; 2],
}

impl Tally {
    fn took(&self, era: usize, since: Instant) {
        if let Some(all) = self.latencies.get(era) {
            let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
            all.push(since.elapsed());
        }
    }

    fn p99(&self, era: usize) -> Duration {
        let mut all = self.latencies[era]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        all.sort();
        all.get(all.len() * 99 / 100).copied().unwrap_or_default()
    }
}

/// Whether a request was refused before it ran: a draining replica's 503, or nginx's 502
/// for a connection the exiting replica reset unread.
fn refused(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502 | 503)
}

/// Sends the request `request` builds until a replica takes it.
async fn taken(tally: &Tally, request: impl Fn() -> reqwest::RequestBuilder) -> reqwest::Response {
    for _ in 0..50 {
        let resp = Client::send(request()).await;
        if !refused(resp.status()) {
            return resp;
        }
        let index = usize::from(resp.status().as_u16() == 503);
        tally.refused[index].fetch_add(1, Ordering::Relaxed);
        // A client's back-off before sending again (Retry-After is in seconds; the
        // drain's other replicas take it at once).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("no replica took the request in 50 tries");
}

/// A session that makes streamed calls of `events` events until `stop`, checking each
/// event by event. A call longer than the drain may be handed on: each run exact.
async fn session_load(url: String, events: u64, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut client = Client::new(&url);
    loop {
        let body = json!({"jsonrpc": "2.0", "id": client.id(), "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "rolling-restart", "version": "0"}}});
        let resp = taken(&tally, || client.post(&body)).await;
        assert_eq!(resp.status(), 200, "initialize");
        client.session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let resp = taken(&tally, || client.post(&note)).await;
        if resp.status() == 202 {
            break;
        }
    }
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        let body = json!({"jsonrpc": "2.0", "id": client.id(), "method": "tools/call", "params": {
            "name": "stream_events", "arguments": {"count": events, "interval_ms": 30},
            "_meta": {"progressToken": "p"}}});
        let resp = taken(&tally, || client.post(&body)).await;
        assert_eq!(resp.status(), 200, "tools/call");
        let mut reader = SseReader::new(resp);
        let mut t = Transcript::default();
        while !t.read_to_response(&mut reader).await {
            // Cut by a restart: resume where the stream stopped, on any replica.
            let last = reader.last_id.clone().unwrap_or_default();
            assert!(!last.is_empty(), "a cut stream had given an event id");
            tally.resumes.fetch_add(1, Ordering::Relaxed);
            let resp = taken(&tally, || client.get(Some(&last))).await;
            assert_eq!(resp.status(), 200, "resume from {last}");
            reader = SseReader::new(resp);
            reader.last_id = Some(last);
        }
        let mut ids = t.ids.clone();
        ids.dedup();
        assert_eq!(ids.len(), t.ids.len(), "no event id twice");
        let response = t.response.clone().unwrap_or_default();
        assert!(response.get("result").is_some(), "{response}");
        // Each run exact: one, or a clean prefix per handover and then the whole new run.
        t.assert_runs(HANDED_ON_NOTE, events);
        let handed_on = t.runs(HANDED_ON_NOTE).len() > 1;
        if events > EVENTS {
            tally.long[usize::from(handed_on)].fetch_add(1, Ordering::Relaxed);
        } else {
            tally.calls.fetch_add(1, Ordering::Relaxed);
            tally.took(0, started);
        }
    }
}

/// Sends `method` through nginx until a replica takes it; its whole answer.
async fn ask(client: &Stateless, tally: &Tally, method: &str, params: Value) -> Value {
    let id = std::sync::atomic::AtomicI64::new(0);
    let resp = taken(tally, || {
        let (sent, request) = client.post(method, params.clone());
        id.store(sent, Ordering::Relaxed);
        request
    })
    .await;
    Stateless::read(method, id.load(Ordering::Relaxed), resp)
        .await
        .message
}

/// Durable tasks until `stop`, each polled to its end on whichever replica nginx picks:
/// every one completes, however many restarts stop the replica running it.
async fn task_load(url: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let client = Stateless::new(&url).with_tasks();
    while !stop.load(Ordering::Relaxed) {
        let arguments = json!({"count": LONG_EVENTS, "interval_ms": 30});
        let params = json!({"name": "stream_events", "arguments": arguments});
        let started = ask(&client, &tally, "tools/call", params).await;
        let id = started["result"]["taskId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!id.is_empty(), "a task: {started}");
        let mut handed_on = false;
        loop {
            let task = ask(&client, &tally, "tasks/get", json!({"taskId": id})).await;
            let task = &task["result"];
            handed_on |= task["statusMessage"] == "restarted after its replica shut down";
            match task["status"].as_str() {
                Some("completed") => {
                    let text = &task["result"]["content"][0]["text"];
                    assert_eq!(text, &format!("streamed {LONG_EVENTS} events"));
                    break;
                }
                Some("working") => {
                    // The client's poll interval.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => panic!("task {id} did not complete: {task}"),
            }
        }
        tally.tasks[0].fetch_add(1, Ordering::Relaxed);
        if handed_on {
            tally.tasks[1].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// 2026-07-28 calls until `stop`, each answered on a stream of its own after its
/// progress notes.
async fn stateless_load(url: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let http = reqwest::Client::new();
    let mut id = 0;
    while !stop.load(Ordering::Relaxed) {
        id += 1;
        let started = Instant::now();
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
            "name": "stream_events", "arguments": {"count": 5, "interval_ms": 30},
            "_meta": {"progressToken": "s",
                      "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientCapabilities": {}}}});
        let request = || {
            http.post(&url)
                .header("content-type", "application/json")
                .header("accept", "application/json, text/event-stream")
                .header("mcp-protocol-version", "2026-07-28")
                .header("mcp-method", "tools/call")
                .header("mcp-name", "stream_events")
                .body(body.to_string())
        };
        let resp = taken(&tally, request).await;
        assert_eq!(resp.status(), 200, "a stateless call");
        let mut t = Transcript::default();
        let mut reader = SseReader::new(resp);
        while let Some(f) = reader.next_event().await {
            if t.add(&f) {
                break;
            }
        }
        assert_eq!(t.progress, [1, 2, 3, 4, 5], "the call's notes, whole");
        let answer: Value = t.response.unwrap_or_default();
        assert!(answer.get("result").is_some(), "{answer}");
        tally.stateless.fetch_add(1, Ordering::Relaxed);
        tally.took(1, started);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; ./scripts/test runs it"]
async fn replicas_restarted_in_turn_behind_nginx_lose_no_call() {
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let ports: Vec<u16> = (0..REPLICAS).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    for port in &ports {
        replicas.push(Some(replica(&redis_url, *port).await));
    }
    let nginx = Nginx::start(&ports).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..4 {
        load.spawn(session_load(
            nginx.url.clone(),
            EVENTS,
            stop.clone(),
            tally.clone(),
        ));
    }
    load.spawn(session_load(
        nginx.url.clone(),
        LONG_EVENTS,
        stop.clone(),
        tally.clone(),
    ));
    load.spawn(task_load(nginx.url.clone(), stop.clone(), tally.clone()));
    for _ in 0..2 {
        load.spawn(stateless_load(
            nginx.url.clone(),
            stop.clone(),
            tally.clone(),
        ));
    }
    let done = |tally: &Tally| tally.calls.load(Ordering::Relaxed);
    for _round in 0..rounds() {
        for (n, port) in ports.iter().enumerate() {
            // A rolling restart's pace: the calls of a few seconds complete between two
            // restarts (nginx leaves a replica that refused connections out for its
            // `fail_timeout`, 2 s; restarting all three within it left none).
            let before = done(&tally);
            eventually("calls to complete", || async {
                (done(&tally) >= before + CALLS_BETWEEN).then_some(())
            })
            .await;
            if let Some(old) = replicas[n].take() {
                let code = old.terminate().await;
                assert_eq!(code, Some(0), "replica {n} drained and exited cleanly");
            }
            replicas[n] = Some(replica(&redis_url, *port).await);
        }
    }
    let before = done(&tally);
    eventually("calls to complete after the restarts", || async {
        (done(&tally) >= before + 4).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    while let Some(joined) = within("the load to finish", load.join_next()).await {
        if let Err(e) = joined {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    eprintln!(
        "rolling restart: {} restarts; {} session calls exact ({} resumes), p99 {:?}; {} 2026-07-28 calls exact, p99 {:?}; long calls: {} whole, {} handed on and whole; {} tasks completed ({} seen handed on); refused and sent again: {} (502), {} (503)",
        rounds() * REPLICAS,
        tally.calls.load(Ordering::Relaxed),
        tally.resumes.load(Ordering::Relaxed),
        tally.p99(0),
        tally.stateless.load(Ordering::Relaxed),
        tally.p99(1),
        tally.long[0].load(Ordering::Relaxed),
        tally.long[1].load(Ordering::Relaxed),
        tally.tasks[0].load(Ordering::Relaxed),
        tally.tasks[1].load(Ordering::Relaxed),
        tally.refused[0].load(Ordering::Relaxed),
        tally.refused[1].load(Ordering::Relaxed),
    );
    assert!(tally.stateless.load(Ordering::Relaxed) > 0);
    assert!(
        tally.tasks[0].load(Ordering::Relaxed) > 0,
        "tasks completed"
    );
    drop(nginx);
}
