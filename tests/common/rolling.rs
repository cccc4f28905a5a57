//! The load of the tests that replace replicas behind nginx while clients keep working
//! (tests/rolling_restart.rs, tests/upgrade.rs), what it saw, and a starter for a replica
//! of a given build. Each load function runs until `stop`, checking every answer as it
//! comes: a request refused before it ran (nginx's 502, a draining replica's 503) is sent
//! again, as a client would.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use otpmcp::server::HANDED_ON_NOTE;
use serde_json::{Value, json};

use super::stateless::Stateless;
use super::{Binary, Client, SseReader, Transcript};

/// Each streamed call: 10 progress events 30 ms apart, well inside the drain (2 s).
pub const EVENTS: u64 = 10;
/// Streamed calls completed between two replacements: about 3 s of the load.
pub const CALLS_BETWEEN: u64 = 40;
/// A long call, and a task: 100 events 30 ms apart, longer than the drain.
pub const LONG_EVENTS: u64 = 100;
/// What a handed-on task's status says when a drain stopped its replica.
pub const TASK_HANDED_ON: &str = "restarted after its replica shut down";

/// A build of otpmcp: its binary, and the source tree whose `config/` it reads (a
/// release's keys may differ from another's).
#[derive(Debug, Clone)]
pub struct Build {
    pub program: PathBuf,
    pub tree: PathBuf,
}

impl Build {
    /// The build under test.
    pub fn current() -> Self {
        Self {
            program: PathBuf::from(env!("CARGO_BIN_EXE_otpmcp")),
            tree: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        }
    }

    /// A replica of this build on `redis`, at 127.0.0.1:`port`, with a short lease and
    /// the stateless key every replica shares; its log (stderr, warnings and worse, which
    /// tests/upgrade.rs reads) to `log`.
    pub async fn replica(&self, redis: &str, port: u16, log: std::process::Stdio) -> Binary {
        let config = self.tree.join("config");
        let redis_toml = config.join("redis.toml");
        Binary::launch(
            &self.program,
            &config.join("test.toml"),
            &[
                "--config",
                &redis_toml.to_string_lossy(),
                "--bind",
                &format!("127.0.0.1:{port}"),
            ],
            &[
                ("OTPMCP__STORE__REDIS_URL", redis),
                ("OTPMCP__STORE__LEASE_TTL", "1s"),
                ("OTPMCP__TELEMETRY__LOG_FILTER", "warn"),
                (
                    "OTPMCP__STATELESS__REQUEST_STATE_KEY",
                    "rolling-restart-test-key-0123456789",
                ),
            ],
            log,
        )
        .await
    }
}

/// What the load saw.
#[derive(Default)]
pub struct Tally {
    pub calls: AtomicU64,
    pub resumes: AtomicU64,
    /// Requests refused before they ran and sent again: 502 from nginx, 503 from a
    /// draining replica.
    pub refused: [AtomicU64; 2],
    pub stateless: AtomicU64,
    /// Long session calls that ended with their result where they began, and those
    /// handed on by a drain (run again on another replica) first.
    pub long: [AtomicU64; 2],
    /// Tasks completed, and of those, handed on by a restart at least once.
    pub tasks: [AtomicU64; 2],
    /// Task event streams read to their end, and the times one was opened again after
    /// a cut: the reader's own, and a draining replica's.
    pub task_streams: [AtomicU64; 3],
    /// How long each session call and each 2026-07-28 call took, whole.
    pub latencies: [std::sync::Mutex<Vec<Duration>>; 2],
}

impl Tally {
    pub fn took(&self, era: usize, since: Instant) {
        if let Some(all) = self.latencies.get(era) {
            let mut all = all.lock().unwrap_or_else(|e| e.into_inner());
            all.push(since.elapsed());
        }
    }

    pub fn p99(&self, era: usize) -> Duration {
        let mut all = self.latencies[era]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        all.sort();
        all.get(all.len() * 99 / 100).copied().unwrap_or_default()
    }

    /// Session calls completed so far: what a test waits on between two replacements.
    pub fn done(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
}

/// Whether a request was refused before it ran: a draining replica's 503, or nginx's 502
/// for a connection the exiting replica reset unread.
pub fn refused(status: reqwest::StatusCode) -> bool {
    matches!(status.as_u16(), 502 | 503)
}

/// Sends the request `request` builds until a replica takes it.
pub async fn taken(
    tally: &Tally,
    request: impl Fn() -> reqwest::RequestBuilder,
) -> reqwest::Response {
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
pub async fn session_load(url: String, events: u64, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
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
pub async fn ask(client: &Stateless, tally: &Tally, method: &str, params: Value) -> Value {
    let id = AtomicI64::new(0);
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

/// Starts a durable `stream_events` task of [`LONG_EVENTS`] events through nginx; its id.
async fn start_task(client: &Stateless, tally: &Tally) -> String {
    let arguments = json!({"count": LONG_EVENTS, "interval_ms": 30});
    let params = json!({"name": "stream_events", "arguments": arguments});
    let started = ask(client, tally, "tools/call", params).await;
    let id = started["result"]["taskId"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!id.is_empty(), "a task: {started}");
    id
}

/// Durable tasks until `stop`, each polled to its end on whichever replica nginx picks:
/// every one completes, however many restarts stop the replica running it.
pub async fn task_load(url: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let client = Stateless::new(&url).with_tasks();
    while !stop.load(Ordering::Relaxed) {
        let id = start_task(&client, &tally).await;
        let mut handed_on = false;
        loop {
            let task = ask(&client, &tally, "tasks/get", json!({"taskId": id})).await;
            let task = &task["result"];
            handed_on |= task["statusMessage"] == TASK_HANDED_ON;
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

/// Durable tasks until `stop`, each followed with `tasks/stream` through nginx from its
/// start to its end, the reader cutting its own connection every few events and the
/// drains cutting others, resuming each time after the last seq it read: every seq once,
/// in order; each run of the task exact (a handover restarts it); its end `completed`.
pub async fn task_stream_load(url: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let client = Stateless::new(&url).with_tasks();
    // A small deterministic generator for where the reader cuts.
    let mut cuts: u64 = 0x2694;
    while !stop.load(Ordering::Relaxed) {
        let id = start_task(&client, &tally).await;
        let mut events: Vec<Value> = Vec::new();
        loop {
            let mut params = json!({"taskId": id});
            if let Some(last) = events.last() {
                params["after"] = last["seq"].clone();
            }
            let rid = AtomicI64::new(0);
            let resp = taken(&tally, || {
                let (sent, request) = client.post("tasks/stream", params.clone());
                rid.store(sent, Ordering::Relaxed);
                request
            })
            .await;
            let rid = json!(rid.load(Ordering::Relaxed));
            let sse = resp
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            if resp.status() != 200 || !sse {
                let status = resp.status();
                let body = resp.text().await.unwrap_or_default();
                panic!("tasks/stream {id} after {params}: {status} {body}");
            }
            let mut stream = SseReader::new(resp);
            cuts = cuts
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let most = 1 + (cuts >> 33) % 40;
            let mut read = 0;
            let mut drained = false;
            let ended = loop {
                let message = stream.next_json().await;
                // Cut by a drain (a `retry:` hint, then the end of the stream).
                if message.is_null() {
                    drained = true;
                    break false;
                }
                if message["id"] == rid {
                    assert_eq!(message["result"]["resultType"], "complete", "{message}");
                    break true;
                }
                assert_eq!(message["method"], "notifications/tasks/event", "{message}");
                let event = message["params"].clone();
                assert_eq!(
                    event["seq"],
                    json!(events.len()),
                    "task {id}: gap or duplicate: {event}"
                );
                assert_eq!(event["taskId"], json!(id), "{event}");
                events.push(event);
                read += 1;
                if read == most {
                    break false;
                }
            };
            if ended {
                break;
            }
            // Dropping the reader closes the connection mid-stream.
            drop(stream);
            tally.task_streams[1 + usize::from(drained)].fetch_add(1, Ordering::Relaxed);
        }
        assert_task_stream(&id, &events);
        tally.task_streams[0].fetch_add(1, Ordering::Relaxed);
    }
}

/// A task's whole event stream: `working` first, then its runs (a handover's status
/// starts a new one), each a clean prefix of 1, 2, ... and the last one whole, and
/// `completed` with the task's result last.
fn assert_task_stream(id: &str, events: &[Value]) {
    let first = events.first().cloned().unwrap_or_default();
    assert_eq!(first["payload"]["status"], "working", "task {id}: {first}");
    let last = events.last().cloned().unwrap_or_default();
    assert_eq!(last["type"], "dev.otpmcp.task.status", "task {id}: {last}");
    assert_eq!(last["payload"]["status"], "completed", "task {id}: {last}");
    assert_eq!(
        last["payload"]["result"]["content"][0]["text"],
        format!("streamed {LONG_EVENTS} events"),
        "task {id}: {last}"
    );
    let mut runs: Vec<Vec<u64>> = vec![Vec::new()];
    for event in events {
        if event["payload"]["statusMessage"] == TASK_HANDED_ON {
            runs.push(Vec::new());
        }
        if event["type"] == "dev.otpmcp.progress"
            && let (Some(run), Some(p)) = (runs.last_mut(), event["payload"]["progress"].as_f64())
        {
            run.push(p as u64);
        }
    }
    let whole = runs.len() - 1;
    for (i, run) in runs.iter().enumerate() {
        let n = if i == whole {
            LONG_EVENTS
        } else {
            run.len() as u64
        };
        assert_eq!(
            run,
            &(1..=n).collect::<Vec<u64>>(),
            "task {id}: run {i} of {}",
            runs.len()
        );
    }
}

/// 2026-07-28 calls until `stop`, each answered on a stream of its own after its
/// progress notes.
pub async fn stateless_load(url: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
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

/// How many clients of each long-lived kind a load has, beside its four sessions of
/// short streamed calls and two clients of 2026-07-28 calls: sessions of long calls,
/// pollers of durable tasks, and followers of task event streams. The more there are,
/// the likelier a drain stops one mid-way and hands it on.
#[derive(Debug, Clone, Copy)]
pub struct Mix {
    pub long: usize,
    pub tasks: usize,
    pub task_streams: usize,
}

/// Starts the load of `mix` on the replicas behind `url`.
pub fn start_load(
    url: &str,
    mix: Mix,
    stop: &Arc<AtomicBool>,
    tally: &Arc<Tally>,
) -> tokio::task::JoinSet<()> {
    let mut load = tokio::task::JoinSet::new();
    for _ in 0..4 {
        load.spawn(session_load(
            url.to_owned(),
            EVENTS,
            stop.clone(),
            tally.clone(),
        ));
    }
    for _ in 0..mix.long {
        load.spawn(session_load(
            url.to_owned(),
            LONG_EVENTS,
            stop.clone(),
            tally.clone(),
        ));
    }
    for _ in 0..mix.tasks {
        load.spawn(task_load(url.to_owned(), stop.clone(), tally.clone()));
    }
    for _ in 0..mix.task_streams {
        load.spawn(task_stream_load(
            url.to_owned(),
            stop.clone(),
            tally.clone(),
        ));
    }
    for _ in 0..2 {
        load.spawn(stateless_load(url.to_owned(), stop.clone(), tally.clone()));
    }
    load
}

/// Waits until `more` session calls complete: a rolling replacement's pace (nginx leaves
/// a replica that refused connections out for its `fail_timeout`, 2 s; replacing all
/// three within it left none).
pub async fn calls_complete(tally: &Tally, more: u64) {
    let before = tally.done();
    super::eventually("calls to complete", || async {
        (tally.done() >= before + more).then_some(())
    })
    .await;
}

/// Stops the load and waits for every client to finish its call, re-raising a failed
/// check.
pub async fn finish(stop: &AtomicBool, mut load: tokio::task::JoinSet<()>) {
    stop.store(true, Ordering::Relaxed);
    while let Some(joined) = super::within("the load to finish", load.join_next()).await {
        if let Err(e) = joined {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}
