//! `soak`: a mixed load for a long time against one or more replicas, in which every call
//! is checked. Progress events must arrive once each and in order across disconnects and
//! resumes, on whichever replica the client comes back to; every request must be answered,
//! or refused with a clear error (an HTTP status, a JSON-RPC error, a connection the peer
//! closed), never left hanging. `scripts/soak` runs it beside the faults it injects and
//! watches the servers' memory and file descriptors.
//!
//! The mix, each in its own loop until the time is up:
//! - churn: a session, three echo calls, then DELETE or (half the time) nothing;
//! - resumes: `stream_events`, a disconnect after a random number of events, a random
//!   pause, then `Last-Event-ID` on a random replica until the reply;
//! - a slow reader: a fast stream read slowly, so that the server cuts it as too slow
//!   and it resumes;
//! - with `--admin`, a panic in one of the supervised actors every `--panic-every`.
//!
//! A call that lost events while Redis was being restarted (its events were delivered
//! live, unstored, then missed by a disconnect) is counted apart when `--faults` names a
//! file of the outages (`start_ms end_ms` per line, Unix milliseconds): the server cannot
//! replay what it could not store. Any other loss, any duplicate and any hang fails.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use serde_json::Value;
use tokio::time::{sleep, timeout};

use crate::client::{Conn, Target};
use crate::mcp::{self, Messages};
use crate::workloads::Out;
use crate::{Error, Result};

/// Longest one churn round or one call (with its resumes) may take.
const ROUND_TIMEOUT: Duration = Duration::from_secs(60);
/// How many times one call is resumed before it counts as hung.
const MAX_PIECES: usize = 20;

/// What the soak is told.
#[derive(Debug)]
pub(crate) struct Soak {
    /// The replicas' MCP endpoints; each request picks one at random.
    pub(crate) targets: Vec<Arc<Target>>,
    /// Their admin listeners, for `/fault/panic` (empty: no panics).
    pub(crate) admins: Vec<Arc<Target>>,
    pub(crate) duration: Duration,
    pub(crate) panic_every: Duration,
    /// Outages of Redis, written by whoever caused them.
    pub(crate) faults: Option<String>,
}

/// What happened, counted as it happens.
#[derive(Debug, Default)]
struct Tally {
    sessions: AtomicU64,
    deleted: AtomicU64,
    calls: AtomicU64,
    exact: AtomicU64,
    resumes: AtomicU64,
    hung: AtomicU64,
    duplicated: AtomicU64,
    panics: AtomicU64,
    /// Clear refusals, by kind.
    refused: Mutex<BTreeMap<String, u64>>,
    /// Calls that lost events: when they ran (Unix ms) and what was missing.
    lost: Mutex<Vec<(u64, u64, String)>>,
}

impl Tally {
    fn refused(&self, error: &Error) {
        let text = error.to_string();
        let kind = if let Some(rest) = text.strip_prefix("HTTP ") {
            format!("http_{}", rest.split(' ').next().unwrap_or("?"))
        } else if text.starts_with("JSON-RPC error") {
            "jsonrpc_error".to_owned()
        } else if text.contains("refused") {
            "connection_refused".to_owned()
        } else if text.contains("closed") || text.contains("reset") || text.contains("canceled") {
            "connection_closed".to_owned()
        } else {
            format!("other: {}", text.chars().take(60).collect::<String>())
        };
        if let Ok(mut refused) = self.refused.lock() {
            *refused.entry(kind).or_default() += 1;
        }
    }
}

/// A small xorshift generator: the soak needs variety, not quality, and no dependency.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64);
        Self((nanos ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len() as u64) as usize]
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs the soak; reports its figures and an error for each call it cannot excuse.
pub(crate) async fn soak(soak: Soak, out: &Out) {
    let soak = Arc::new(soak);
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + soak.duration;
    let started = Instant::now();
    let mut workers = Vec::new();
    for seed in 0..2 {
        workers.push(tokio::spawn(churn(
            soak.clone(),
            tally.clone(),
            deadline,
            seed,
        )));
    }
    for seed in 2..5 {
        let call = Call {
            count: 50,
            interval_ms: 20,
            slow: false,
        };
        workers.push(tokio::spawn(calls(
            soak.clone(),
            tally.clone(),
            deadline,
            seed,
            call,
        )));
    }
    let slow = Call {
        count: 2_000,
        interval_ms: 0,
        slow: true,
    };
    workers.push(tokio::spawn(calls(
        soak.clone(),
        tally.clone(),
        deadline,
        5,
        slow,
    )));
    if !soak.admins.is_empty() {
        workers.push(tokio::spawn(panics(soak.clone(), tally.clone(), deadline)));
    }
    for worker in workers {
        let _ = worker.await;
    }
    report(&soak, &tally, out, started.elapsed());
}

fn report(soak: &Soak, tally: &Tally, out: &Out, elapsed: Duration) {
    let n = |c: &AtomicU64| c.load(Relaxed) as f64;
    out.num("soak.seconds", elapsed.as_secs_f64());
    out.num("soak.sessions", n(&tally.sessions));
    out.num("soak.sessions_deleted", n(&tally.deleted));
    out.num("soak.calls", n(&tally.calls));
    out.num("soak.calls_exact", n(&tally.exact));
    out.num("soak.resumes", n(&tally.resumes));
    out.num("soak.panics", n(&tally.panics));
    if let Ok(refused) = tally.refused.lock() {
        for (kind, count) in refused.iter() {
            out.num(
                &format!("soak.refused.{}", kind.replace(' ', "_")),
                *count as f64,
            );
        }
    }
    let outages = soak.faults.as_deref().map(outages).unwrap_or_default();
    let (mut excused, mut lost) = (0u64, 0u64);
    if let Ok(calls) = tally.lost.lock() {
        for (from, to, what) in calls.iter() {
            if outages.iter().any(|(a, b)| from <= b && a <= to) {
                excused += 1;
            } else {
                lost += 1;
                // When, so that it can be set beside the replicas' logs and the faults.
                out.error(
                    "soak.lost",
                    &format!("{what} (call from {from} to {to}, Unix ms)"),
                );
            }
        }
    }
    out.num("soak.lost_during_redis_outage", excused as f64);
    out.num("soak.lost", lost as f64);
    out.num("soak.duplicated", n(&tally.duplicated));
    out.num("soak.hung", n(&tally.hung));
    if tally.duplicated.load(Relaxed) > 0 {
        out.error("soak.duplicated", "events were delivered twice");
    }
    if tally.hung.load(Relaxed) > 0 {
        out.error("soak.hung", "requests got no answer within their timeout");
    }
}

/// The outages listed in `path`; none if it cannot be read.
fn outages(path: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace().map(str::parse::<u64>);
            match (parts.next(), parts.next()) {
                (Some(Ok(a)), Some(Ok(b))) => Some((a, b)),
                _ => None,
            }
        })
        .collect()
}

/// Sessions that come and go, deleted or abandoned.
async fn churn(soak: Arc<Soak>, tally: Arc<Tally>, deadline: Instant, seed: u64) {
    let mut rng = Rng::new(seed);
    let mut id = 0u64;
    while Instant::now() < deadline {
        let target = rng.pick(&soak.targets).clone();
        let delete = rng.below(2) == 0;
        // How far the round got, for the message of a hang.
        let step = AtomicU64::new(0);
        let round = timeout(ROUND_TIMEOUT, async {
            let mut conn = Conn::open(&target).await?;
            step.store(1, Relaxed);
            let session = mcp::initialize(&mut conn, &target).await?;
            tally.sessions.fetch_add(1, Relaxed);
            for _ in 0..3 {
                step.fetch_add(1, Relaxed);
                id += 1;
                mcp::echo(&mut conn, &target, &session, id).await?;
            }
            if delete {
                step.fetch_add(1, Relaxed);
                mcp::delete(&mut conn, &target, &session).await?;
                tally.deleted.fetch_add(1, Relaxed);
            }
            Ok::<(), Error>(())
        })
        .await;
        let what = format!(
            "a churn round on {} (at step {} of connect, initialize, 3 calls, delete)",
            target.authority,
            step.load(Relaxed)
        );
        settle(&tally, round, &what).await;
    }
}

/// Counts a round's outcome; pauses after a failure so a dead replica is not hammered.
/// `what` names the round in the message of a hang, to set beside the replicas' logs.
async fn settle(
    tally: &Tally,
    round: std::result::Result<Result<()>, tokio::time::error::Elapsed>,
    what: &str,
) {
    match round {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            tally.refused(&e);
            sleep(Duration::from_millis(50)).await;
        }
        Err(_) => {
            tally.hung.fetch_add(1, Relaxed);
            eprintln!(
                "soak: {what} got no answer within {ROUND_TIMEOUT:?} (at {} Unix ms)",
                unix_ms()
            );
        }
    }
}

/// One kind of checked call.
#[derive(Debug, Clone, Copy)]
struct Call {
    count: u64,
    interval_ms: u64,
    /// Read slowly, so that the server cuts the connection as too slow.
    slow: bool,
}

/// Calls that are interrupted and resumed, each checked event by event.
async fn calls(soak: Arc<Soak>, tally: Arc<Tally>, deadline: Instant, seed: u64, call: Call) {
    let mut rng = Rng::new(seed);
    let mut n = 0u64;
    while Instant::now() < deadline {
        n += 1;
        let token = format!("soak-{seed}-{n}");
        let from = unix_ms();
        let trail = Mutex::new(Vec::new());
        let round = timeout(
            ROUND_TIMEOUT,
            one_call(&soak, &tally, &mut rng, call, &token, &trail),
        )
        .await;
        if round.is_err()
            && let Ok(trail) = trail.lock()
        {
            eprintln!("soak: call {token} hung; its steps: {}", trail.join("; "));
        }
        let round = match round {
            Ok(Ok(received)) => {
                tally.calls.fetch_add(1, Relaxed);
                judge(&tally, &received, call.count, from, &token);
                Ok(Ok(()))
            }
            other => other.map(|r| r.map(|_| ())),
        };
        settle(&tally, round, &format!("call {token}")).await;
    }
}

/// Checks that `received` is 1..=count, once each, in order.
fn judge(tally: &Tally, received: &[u64], count: u64, from: u64, token: &str) {
    let mut seen = vec![0u32; count as usize + 1];
    let mut ordered = true;
    for (i, &p) in received.iter().enumerate() {
        if let Some(slot) = seen.get_mut(p as usize) {
            *slot += 1;
        }
        ordered &= i == 0 || p > received[i - 1];
    }
    let duplicated = seen.iter().filter(|s| **s > 1).count();
    let missing = seen.iter().skip(1).filter(|s| **s == 0).count();
    if duplicated > 0 || !ordered {
        tally.duplicated.fetch_add(1, Relaxed);
        eprintln!("soak: {token}: {duplicated} events delivered twice (in order: {ordered})");
    } else if missing > 0 {
        let what = format!("{token}: {missing} of {count} events lost");
        if let Ok(mut lost) = tally.lost.lock() {
            lost.push((from, unix_ms(), what));
        }
    } else {
        tally.exact.fetch_add(1, Relaxed);
    }
}

/// One call: start it, be cut off (by us, or by the server for reading too slowly), then
/// resume on random replicas until the reply. Returns the progress values received.
/// Each step is written to `trail`, which a hang prints.
async fn one_call(
    soak: &Soak,
    tally: &Tally,
    rng: &mut Rng,
    call: Call,
    token: &str,
    trail: &Mutex<Vec<String>>,
) -> Result<Vec<u64>> {
    let step = |what: String| {
        if let Ok(mut trail) = trail.lock() {
            trail.push(format!("{} {what}", unix_ms()));
        }
    };
    let target = rng.pick(&soak.targets).clone();
    step(format!("initialize on {}", target.authority));
    let mut conn = Conn::open(&target).await?;
    let session = mcp::initialize(&mut conn, &target).await?;
    tally.sessions.fetch_add(1, Relaxed);
    step(format!("session {:?}, call started", session.id));
    let mut msgs = mcp::start_stream(
        &mut conn,
        &target,
        &session,
        1,
        call.count,
        call.interval_ms,
        token,
    )
    .await?;
    // Our own disconnect, after this many events (the slow reader waits to be cut).
    let cut_after = if call.slow {
        u64::MAX
    } else {
        1 + rng.below(call.count)
    };
    let mut piece = Piece {
        token,
        slow: call.slow,
        received: Vec::new(),
        last_id: None,
    };
    let mut replied = piece.read(&mut msgs, cut_after).await?;
    step(format!(
        "first piece ended after {} events at {:?}, replied {replied}",
        piece.received.len(),
        piece.last_id
    ));
    drop(msgs);
    drop(conn);
    let mut pieces = 0;
    while !replied {
        pieces += 1;
        if pieces > MAX_PIECES {
            return Err(format!("{token}: no reply after {MAX_PIECES} resumes").into());
        }
        let id = piece
            .last_id
            .clone()
            .ok_or_else(|| format!("{token}: no event id to resume from"))?;
        sleep(Duration::from_millis(rng.below(300))).await;
        let target = rng.pick(&soak.targets).clone();
        step(format!("resume {pieces} on {} from {id}", target.authority));
        let mut conn = Conn::open(&target).await?;
        let mut msgs = mcp::get(&mut conn, &target, &session, Some(&id)).await?;
        tally.resumes.fetch_add(1, Relaxed);
        replied = piece.read(&mut msgs, u64::MAX).await?;
        step(format!(
            "resume {pieces} ended with {} events at {:?}, replied {replied}",
            piece.received.len(),
            piece.last_id
        ));
    }
    if rng.below(2) == 0 {
        let target = rng.pick(&soak.targets).clone();
        let mut conn = Conn::open(&target).await?;
        mcp::delete(&mut conn, &target, &session).await?;
        tally.deleted.fetch_add(1, Relaxed);
    }
    Ok(piece.received)
}

/// What a checked call has received so far, across its connections.
struct Piece<'a> {
    token: &'a str,
    /// Read slowly (the slow reader).
    slow: bool,
    /// Progress values, in the order they arrived.
    received: Vec<u64>,
    /// The last event id, to resume from.
    last_id: Option<String>,
}

impl Piece<'_> {
    /// Reads one connection of the call: stops after `cut_after` progress values (a
    /// disconnect of ours) or when the server ends the stream (false: resume), or at the
    /// reply (true).
    async fn read(&mut self, msgs: &mut Messages, cut_after: u64) -> Result<bool> {
        let mut this_piece = 0;
        loop {
            let event = match msgs.next().await {
                Ok(Some(event)) => event,
                // Cut by the server (too slow, polling, a replica going away): resume.
                Ok(None) | Err(_) => return Ok(false),
            };
            if event.id.is_some() {
                self.last_id.clone_from(&event.id);
            }
            if event.data.is_empty() {
                continue;
            }
            let msg: Value = serde_json::from_str(&event.data)?;
            if let Some(p) = mcp::progress_of(&msg, self.token) {
                self.received.push(p);
                this_piece += 1;
                if this_piece >= cut_after {
                    return Ok(false);
                }
                if self.slow {
                    sleep(Duration::from_millis(2)).await;
                }
            } else if mcp::is_reply_to(&msg, 1) {
                mcp::result_of(&msg)?;
                return Ok(true);
            }
        }
    }
}

/// A panic in a supervised actor every `panic_every`, in turn.
async fn panics(soak: Arc<Soak>, tally: Arc<Tally>, deadline: Instant) {
    const CHILDREN: [&str; 3] = ["event_store", "session_manager", "http_listener"];
    let mut rng = Rng::new(99);
    let mut turn = 0;
    loop {
        let next = Instant::now() + soak.panic_every;
        if next >= deadline {
            return;
        }
        sleep(soak.panic_every).await;
        let admin = rng.pick(&soak.admins).clone();
        let child = CHILDREN[turn % CHILDREN.len()];
        turn += 1;
        match timeout(Duration::from_secs(5), inject(&admin, child)).await {
            Ok(Ok(())) => {
                tally.panics.fetch_add(1, Relaxed);
            }
            Ok(Err(e)) => eprintln!("soak: panic in {child} not injected: {e}"),
            Err(_) => eprintln!("soak: the admin listener did not answer"),
        }
    }
}

async fn inject(admin: &Target, child: &str) -> Result<()> {
    let mut conn = Conn::open(admin).await?;
    let req = Request::builder()
        .method(Method::POST)
        .uri(format!("/fault/panic/{child}"))
        .header(hyper::header::HOST, admin.authority.as_str())
        // otpmcp refuses the fault endpoints without it (a browser cannot send it).
        .header("x-otpmcp-fault", "1")
        .body(Full::new(Bytes::new()))?;
    let resp = conn.send(req).await?;
    let status = resp.status();
    resp.into_body().collect().await?;
    if status.as_u16() != 202 {
        return Err(format!("HTTP {status}").into());
    }
    Ok(())
}
