//! The workloads. Each prints its figures as `name value` lines on stdout (one metric a
//! line, so scripts can pick them with `awk`); problems go to stderr and count as errors.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::time::{sleep, timeout};

use crate::client::{Conn, Target};
use crate::mcp::{self, Session};
use crate::{Error, Result, procfs};

/// Longest any single request (or session set-up) may take before it counts as failed.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed request, so that a dead server is not hammered in a tight loop.
pub(crate) const ERROR_PAUSE: Duration = Duration::from_millis(50);

/// What every workload needs: the server and, when known, its pid.
pub(crate) struct Ctx {
    /// The server under test.
    pub(crate) target: Arc<Target>,
    /// The server's pid, for CPU time and RSS; without it those figures are skipped.
    pub(crate) pid: Option<u32>,
    /// Calls speak the stateless revision (2026-07-28): no sessions are opened.
    pub(crate) stateless: bool,
}

impl Ctx {
    pub(crate) fn cpu(&self) -> Option<u64> {
        self.pid.and_then(|pid| procfs::cpu_ticks(pid).ok())
    }

    /// The load tool's own CPU ticks: figures it reports alongside the server's show
    /// whether the generator, not the server, was the limit.
    pub(crate) fn own_cpu(&self) -> Option<u64> {
        procfs::cpu_ticks(std::process::id()).ok()
    }

    fn rss(&self) -> Option<u64> {
        self.pid.and_then(|pid| procfs::rss_kb(pid).ok())
    }
}

/// Writes one metric line; a reader that went away (`| head`) is not an error of ours.
fn emit(line: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stdout(), "{line}");
}

/// Prints metrics and counts errors. Shared by reference (the count is a `Cell`) so a
/// workload and the code reporting its failure can both hold it.
#[derive(Debug, Default)]
pub(crate) struct Out {
    errors: Cell<u64>,
}

impl Out {
    /// Prints a numeric metric.
    pub(crate) fn num(&self, name: &str, value: f64) {
        let text = if value.abs() >= 100.0 {
            format!("{value:.0}")
        } else if value.abs() >= 1.0 {
            format!("{value:.2}")
        } else {
            format!("{value:.4}")
        };
        emit(format_args!("{name} {text}"));
    }

    /// Prints a textual metric (a resume verdict).
    pub(crate) fn text(&self, name: &str, value: &str) {
        emit(format_args!("{name} {value}"));
    }

    /// Errors reported so far.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.get()
    }

    /// Reports an error of workload `name`.
    pub(crate) fn error(&self, name: &str, message: &str) {
        self.errors.set(self.errors.get() + 1);
        eprintln!("error: {name}: {message}");
    }
}

pub(crate) fn timed_out<T>(
    r: std::result::Result<Result<T>, tokio::time::error::Elapsed>,
) -> Result<T> {
    r.unwrap_or_else(|_| Err("timed out".into()))
}

pub(crate) fn median(mut values: Vec<Duration>) -> Option<Duration> {
    values.sort_unstable();
    values.get(values.len() / 2).copied()
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    let last = sorted.len().checked_sub(1)?;
    sorted.get(((last as f64) * p).round() as usize).copied()
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// State shared by the workers of a rate workload and the task that measures them.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// True inside the measured window: workers record latencies only then.
    pub(crate) measuring: AtomicBool,
    pub(crate) done: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl Shared {
    pub(crate) fn fail(&self, error: &Error) {
        self.errors.fetch_add(1, Relaxed);
        if let Ok(mut first) = self.first_error.lock()
            && first.is_none()
        {
            *first = Some(error.to_string());
        }
    }

    pub(crate) fn report(&self, out: &Out, name: &str) {
        let errors = self.errors.load(Relaxed);
        if errors > 0 {
            let first = self
                .first_error
                .lock()
                .ok()
                .and_then(|f| f.clone())
                .unwrap_or_default();
            out.error(name, &format!("{errors} failed requests; first: {first}"));
        }
    }
}

/// Completed operations, wall time, and server and load-tool CPU ticks inside the
/// measured window.
pub(crate) struct Window {
    pub(crate) count: u64,
    pub(crate) secs: f64,
    pub(crate) cpu_ticks: Option<u64>,
    pub(crate) own_ticks: Option<u64>,
}

impl Window {
    /// Prints `<name>.<per_s>`, then the server's and the load tool's CPU µs per operation.
    pub(crate) fn report(&self, out: &Out, name: &str, per_s: &str, per_op: &str) {
        out.num(&format!("{name}.{per_s}"), self.count as f64 / self.secs);
        if self.count == 0 {
            return;
        }
        let us = |ticks: u64| ticks as f64 * procfs::TICK_US / self.count as f64;
        if let Some(ticks) = self.cpu_ticks {
            out.num(&format!("{name}.cpu_us_per_{per_op}"), us(ticks));
        }
        if let Some(ticks) = self.own_ticks {
            out.num(&format!("{name}.load_cpu_us_per_{per_op}"), us(ticks));
        }
    }
}

pub(crate) fn delta(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    a.zip(b).map(|(a, b)| b.saturating_sub(a))
}

/// Lets the workers warm up, measures them for `duration`, then tells them to stop.
pub(crate) async fn window(
    ctx: &Ctx,
    shared: &Shared,
    warmup: Duration,
    duration: Duration,
) -> Window {
    sleep(warmup).await;
    let (count0, cpu0, own0) = (shared.done.load(Relaxed), ctx.cpu(), ctx.own_cpu());
    let t0 = Instant::now();
    shared.measuring.store(true, Relaxed);
    sleep(duration).await;
    shared.measuring.store(false, Relaxed);
    let (count1, cpu1, own1) = (shared.done.load(Relaxed), ctx.cpu(), ctx.own_cpu());
    let secs = t0.elapsed().as_secs_f64();
    shared.stop.store(true, Relaxed);
    Window {
        count: count1 - count0,
        secs,
        cpu_ticks: delta(cpu0, cpu1),
        own_ticks: delta(own0, own1),
    }
}

/// Waits for workers that were told to stop; one stuck past its call timeout is aborted.
pub(crate) async fn join<T>(handles: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut results = Vec::with_capacity(handles.len());
    for mut handle in handles {
        match timeout(CALL_TIMEOUT + Duration::from_secs(5), &mut handle).await {
            Ok(Ok(value)) => results.push(value),
            Ok(Err(_)) => {}
            Err(_) => handle.abort(),
        }
    }
    results
}

/// Opens `n` sessions over `parallel` connections.
async fn open_sessions(ctx: &Ctx, n: usize, parallel: usize) -> Result<Vec<Session>> {
    if ctx.stateless {
        return Ok((0..n).map(|_| Session::stateless()).collect());
    }
    let parallel = parallel.clamp(1, n.max(1));
    let mut handles = Vec::with_capacity(parallel);
    for i in 0..parallel {
        let share = n / parallel + usize::from(i < n % parallel);
        let target = ctx.target.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = Conn::open(&target).await?;
            let mut sessions = Vec::with_capacity(share);
            for _ in 0..share {
                sessions.push(timed_out(
                    timeout(CALL_TIMEOUT, mcp::initialize(&mut conn, &target)).await,
                )?);
            }
            Ok::<_, Error>(sessions)
        }));
    }
    let mut all = Vec::with_capacity(n);
    for handle in handles {
        all.extend(handle.await??);
    }
    Ok(all)
}

/// Deletes sessions over `parallel` connections, best effort: the workload is over.
async fn close_sessions(ctx: &Ctx, sessions: Vec<Session>, parallel: usize) {
    let parallel = parallel.clamp(1, sessions.len().max(1));
    let mut chunks: Vec<Vec<Session>> = (0..parallel).map(|_| Vec::new()).collect();
    for (i, session) in sessions.into_iter().enumerate() {
        if let Some(chunk) = chunks.get_mut(i % parallel) {
            chunk.push(session);
        }
    }
    let mut handles = Vec::with_capacity(parallel);
    for chunk in chunks {
        let target = ctx.target.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = None;
            for session in &chunk {
                let r = timeout(CALL_TIMEOUT, async {
                    let c = match &mut conn {
                        Some(c) => c,
                        None => conn.insert(Conn::open(&target).await?),
                    };
                    mcp::delete(c, &target, session).await
                })
                .await;
                if timed_out(r).is_err() {
                    conn = None;
                }
            }
        }));
    }
    join(handles).await;
}

/// Sessions per second: each loop initializes a session and deletes it again (so the
/// server's session count stays flat however long the run), over `connections`
/// connections at once.
pub(crate) async fn initialize_rate(
    ctx: &Ctx,
    out: &Out,
    connections: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<()> {
    let shared = Arc::new(Shared::default());
    let mut handles = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (target, shared) = (ctx.target.clone(), shared.clone());
        handles.push(tokio::spawn(async move {
            let mut conn = None;
            while !shared.stop.load(Relaxed) {
                let r = timeout(CALL_TIMEOUT, async {
                    let c = match &mut conn {
                        Some(c) => c,
                        None => conn.insert(Conn::open(&target).await?),
                    };
                    let session = mcp::initialize(c, &target).await?;
                    mcp::delete(c, &target, &session).await
                })
                .await;
                match timed_out(r) {
                    Ok(()) => {
                        shared.done.fetch_add(1, Relaxed);
                    }
                    Err(e) => {
                        shared.fail(&e);
                        conn = None;
                        sleep(ERROR_PAUSE).await;
                    }
                }
            }
        }));
    }
    let w = window(ctx, &shared, warmup, duration).await;
    join(handles).await;
    w.report(out, "initialize", "sessions_per_s", "session");
    shared.report(out, "initialize");
    Ok(())
}

/// One in-flight slot of the `tools/call` workload: echo calls back to back on its own
/// connection, reconnecting after a failure.
async fn echo_worker(
    target: Arc<Target>,
    shared: Arc<Shared>,
    session: Arc<Session>,
    conn: Conn,
    first_id: u64,
) -> Vec<Duration> {
    let mut conn = Some(conn);
    let mut latencies = Vec::new();
    let mut id = first_id;
    while !shared.stop.load(Relaxed) {
        id += 1;
        let measuring = shared.measuring.load(Relaxed);
        let started = Instant::now();
        let r = timeout(CALL_TIMEOUT, async {
            let c = match &mut conn {
                Some(c) => c,
                None => conn.insert(Conn::open(&target).await?),
            };
            mcp::echo(c, &target, &session, id).await
        })
        .await;
        match timed_out(r) {
            Ok(()) => {
                shared.done.fetch_add(1, Relaxed);
                if measuring {
                    latencies.push(started.elapsed());
                }
            }
            Err(e) => {
                shared.fail(&e);
                conn = None;
                sleep(ERROR_PAUSE).await;
            }
        }
    }
    latencies
}

/// `tools/call` of `echo` from `sessions` sessions with `in_flight` calls in flight each
/// (one connection per call in flight): calls/s, server CPU per call, latency.
pub(crate) async fn call_rate(
    ctx: &Ctx,
    out: &Out,
    name: &str,
    sessions: usize,
    in_flight: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<()> {
    let list: Vec<Arc<Session>> = open_sessions(ctx, sessions, 4)
        .await?
        .into_iter()
        .map(Arc::new)
        .collect();
    let shared = Arc::new(Shared::default());
    // Connect every slot before any call, so that connecting is not part of the window.
    let mut conns = Vec::with_capacity(list.len() * in_flight);
    for _ in 0..list.len() * in_flight {
        conns.push(Conn::open(&ctx.target).await?);
    }
    let mut handles = Vec::with_capacity(conns.len());
    for (i, conn) in conns.into_iter().enumerate() {
        let Some(session) = list.get(i % list.len()) else {
            break;
        };
        // Ids must be unique within a session; give every slot its own range.
        let first_id = (i as u64) << 32;
        handles.push(tokio::spawn(echo_worker(
            ctx.target.clone(),
            shared.clone(),
            session.clone(),
            conn,
            first_id,
        )));
    }
    let w = window(ctx, &shared, warmup, duration).await;
    let mut latencies: Vec<Duration> = join(handles).await.into_iter().flatten().collect();
    close_sessions(ctx, list.iter().map(|s| Session::clone(s)).collect(), 4).await;
    w.report(out, name, "calls_per_s", "call");
    latencies.sort_unstable();
    if let (Some(p50), Some(p99)) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99)) {
        out.num(&format!("{name}.p50_ms"), ms(p50));
        out.num(&format!("{name}.p99_ms"), ms(p99));
    }
    shared.report(out, name);
    Ok(())
}

/// One `stream_events` call read to its reply: (first-event latency, events, end time).
async fn one_stream(
    conn: &mut Conn,
    target: &Target,
    session: &Session,
    count: u64,
    token: &str,
) -> Result<(Option<Duration>, u64, Instant)> {
    let sent = Instant::now();
    let mut msgs = mcp::start_stream(conn, target, session, 1, count, 0, token).await?;
    let (mut first, mut n) = (None, 0);
    while let Some(event) = msgs.next().await? {
        if event.data.is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(&event.data)?;
        if let Some(progress) = mcp::progress_of(&msg, token) {
            first.get_or_insert_with(|| sent.elapsed());
            n += 1;
            if progress != n {
                return Err(format!("progress {progress} arrived as event {n}").into());
            }
        } else if mcp::is_reply_to(&msg, 1) {
            let end = Instant::now();
            mcp::result_of(&msg)?;
            if n != count {
                return Err(format!("{n} of {count} events before the reply").into());
            }
            return Ok((first, n, end));
        }
    }
    Err("the stream ended without the reply".into())
}

/// `parallel` calls of `stream_events(count, interval_ms = 0)` at once, each in its own
/// session: events/s over all streams, server CPU per event, first-event latency.
pub(crate) async fn stream(ctx: &Ctx, out: &Out, parallel: usize, count: u64) -> Result<()> {
    let name = format!("stream_{parallel}x{count}");
    let sessions = open_sessions(ctx, parallel, 1).await?;
    let mut conns = Vec::with_capacity(parallel);
    for _ in 0..parallel {
        conns.push(Conn::open(&ctx.target).await?);
    }
    // Generous: even 10 µs of server time per event leaves a wide margin.
    let limit = Duration::from_secs(30) + Duration::from_micros(count.saturating_mul(100));
    let (cpu0, own0, t0) = (ctx.cpu(), ctx.own_cpu(), Instant::now());
    let mut handles = Vec::with_capacity(parallel);
    for (i, (mut conn, session)) in conns.into_iter().zip(sessions.iter().cloned()).enumerate() {
        let target = ctx.target.clone();
        handles.push(tokio::spawn(async move {
            let token = format!("stream-{i}");
            let r = timeout(
                limit,
                one_stream(&mut conn, &target, &session, count, &token),
            )
            .await;
            timed_out(r)
        }));
    }
    let delivered = Delivered::gather(ctx, handles, t0).await;
    close_sessions(ctx, sessions, 1).await;
    delivered.report(out, &name, t0, (cpu0, own0));
    Ok(())
}

/// What one stream of a stream workload gave: the time to its first event, its events,
/// and when it ended.
pub(crate) type StreamOutcome = Result<(Option<Duration>, u64, Instant)>;

/// What the streams of a stream workload delivered together.
pub(crate) struct Delivered {
    firsts: Vec<Duration>,
    events: u64,
    end: Instant,
    failure: Option<String>,
    /// The server's and the load tool's CPU once the last stream ended.
    cpu: (Option<u64>, Option<u64>),
}

impl Delivered {
    /// Waits for every stream of a workload started at `t0`.
    pub(crate) async fn gather(
        ctx: &Ctx,
        handles: Vec<tokio::task::JoinHandle<StreamOutcome>>,
        t0: Instant,
    ) -> Self {
        let (mut firsts, mut events, mut end, mut failure) = (Vec::new(), 0, t0, None);
        for handle in handles {
            match handle.await {
                Ok(Ok((first, n, stream_end))) => {
                    firsts.extend(first);
                    events += n;
                    end = end.max(stream_end);
                }
                Ok(Err(e)) => failure = Some(e.to_string()),
                Err(e) => failure = Some(e.to_string()),
            }
        }
        Self {
            firsts,
            events,
            end,
            failure,
            cpu: (ctx.cpu(), ctx.own_cpu()),
        }
    }

    /// Reports events/s and CPU per event from `t0` and the CPU then (`(server, own)`),
    /// and the median time to the first event, as `name`; or the failure.
    pub(crate) fn report(
        self,
        out: &Out,
        name: &str,
        t0: Instant,
        cpu0: (Option<u64>, Option<u64>),
    ) {
        if let Some(failure) = self.failure {
            out.error(name, &failure);
            return;
        }
        let secs = self.end.duration_since(t0).as_secs_f64();
        if self.events > 0 && secs > 0.0 {
            let w = Window {
                count: self.events,
                secs,
                cpu_ticks: delta(cpu0.0, self.cpu.0),
                own_ticks: delta(cpu0.1, self.cpu.1),
            };
            w.report(out, name, "events_per_s", "event");
        }
        if let Some(first) = median(self.firsts) {
            out.num(&format!("{name}.first_event_ms"), ms(first));
        }
    }
}

/// Server memory per idle session: RSS before and after opening `n` sessions that then
/// do nothing (their connections closed), divided by `n`.
pub(crate) async fn idle_sessions(ctx: &Ctx, out: &Out, n: usize, settle: Duration) -> Result<()> {
    let rss0 = ctx.rss();
    let sessions = open_sessions(ctx, n, 4).await?;
    sleep(settle).await;
    let rss1 = ctx.rss();
    close_sessions(ctx, sessions, 4).await;
    if let Some((a, b)) = rss0.zip(rss1).filter(|_| n > 0) {
        out.num("idle_session.kb", (b as f64 - a as f64) / n as f64);
    }
    Ok(())
}

/// Server memory per idle standalone GET stream: `n` sessions are opened first, then
/// one GET stream each (its own connection, held open); RSS growth from the streams
/// divided by `n`.
pub(crate) async fn idle_streams(ctx: &Ctx, out: &Out, n: usize, settle: Duration) -> Result<()> {
    let sessions = open_sessions(ctx, n, 4).await?;
    sleep(settle).await;
    let rss0 = ctx.rss();
    let mut streams = Vec::with_capacity(n);
    let mut failure = None;
    for session in &sessions {
        let target = &ctx.target;
        let r = timeout(CALL_TIMEOUT, async {
            let mut conn = Conn::open(target).await?;
            let msgs = mcp::get(&mut conn, target, session, None).await?;
            Ok((conn, msgs))
        })
        .await;
        match timed_out(r) {
            Ok(stream) => streams.push(stream),
            Err(e) => {
                failure = Some(e.to_string());
                break;
            }
        }
    }
    sleep(settle).await;
    let rss1 = ctx.rss();
    let opened = streams.len();
    drop(streams);
    close_sessions(ctx, sessions, 4).await;
    if let Some(failure) = failure {
        out.error("idle_stream", &format!("after {opened} streams: {failure}"));
        return Ok(());
    }
    if let Some((a, b)) = rss0.zip(rss1).filter(|_| opened > 0) {
        out.num("idle_stream.kb", (b as f64 - a as f64) / opened as f64);
    }
    Ok(())
}

/// When the resume workload disconnects and resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Reconnect after the call has finished.
    Finished,
    /// Reconnect while the call is still sending events.
    InFlight,
}

impl Mode {
    /// The name used in metric names and on the command line.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Finished => "finished",
            Mode::InFlight => "in-flight",
        }
    }
}

/// Judges a resumed stream: `received` are the progress values it carried, `after` the
/// last one the client had seen before disconnecting, `count` the call's total.
fn verdict(received: &[u64], after: u64, count: u64, replied: bool, timed_out: bool) -> String {
    let mut seen = vec![false; usize::try_from(count).unwrap_or(0) + 1];
    let (mut duplicated, mut unexpected, mut reordered, mut last) = (0, 0, false, after);
    for &p in received {
        let slot = usize::try_from(p).ok().and_then(|i| seen.get_mut(i));
        match slot {
            _ if p <= after => duplicated += 1,
            Some(true) => duplicated += 1,
            Some(slot) => {
                *slot = true;
                reordered |= p < last;
                last = p;
            }
            None => unexpected += 1,
        }
    }
    let lost = seen
        .iter()
        .enumerate()
        .skip(usize::try_from(after).unwrap_or(0) + 1)
        .filter(|(_, s)| !**s)
        .count();
    let mut parts = Vec::new();
    if lost > 0 {
        parts.push(format!("lost {lost}"));
    }
    if duplicated > 0 {
        parts.push(format!("duplicated {duplicated}"));
    }
    if unexpected > 0 {
        parts.push(format!("{unexpected} unexpected"));
    }
    if reordered {
        parts.push("reordered".to_owned());
    }
    if !replied {
        parts.push(
            if timed_out {
                "no reply (timed out)"
            } else {
                "no reply"
            }
            .to_owned(),
        );
    }
    if parts.is_empty() {
        "exact".to_owned()
    } else {
        parts.join(", ")
    }
}

/// Resume after a disconnect with `missed` events missed: starts `stream_events`, reads
/// the first event(s), drops the connection, waits (until the call must be over, or
/// while it still runs), then GETs with `Last-Event-ID` and checks that exactly the
/// remaining progress values arrive, in order, then the reply. Prints and returns the
/// verdict (`exact`, `lost N`, `duplicated N`, ...).
pub(crate) async fn resume(
    ctx: &Ctx,
    out: &Out,
    missed: u64,
    mode: Mode,
    finished_wait: Duration,
) -> Result<String> {
    let name = format!("resume.{}.{missed}", mode.name());
    let target = &ctx.target;
    let mut conn = Conn::open(target).await?;
    let session = timed_out(timeout(CALL_TIMEOUT, mcp::initialize(&mut conn, target)).await)?;
    // In flight: events 1 ms apart, a head of 10 to see the server's real pace, and a
    // tail long enough that the call is still running when the client comes back.
    let (head, interval_ms, tail) = match mode {
        Mode::Finished => (1, 0, 0),
        Mode::InFlight => (10, 1, (missed / 10).max(100)),
    };
    let count = head + missed + tail;
    let token = "resume";
    let mut last_id: Option<String> = None;
    let (mut t_first, mut t_head) = (None, None);
    let read_head = timeout(CALL_TIMEOUT, async {
        let mut msgs =
            mcp::start_stream(&mut conn, target, &session, 1, count, interval_ms, token).await?;
        let mut seen = 0;
        while seen < head {
            let Some(event) = msgs.next().await? else {
                return Err("the stream ended before its first events".into());
            };
            if event.id.is_some() {
                last_id = event.id;
            }
            if event.data.is_empty() {
                continue;
            }
            let msg: Value = serde_json::from_str(&event.data)?;
            if let Some(p) = mcp::progress_of(&msg, token) {
                seen += 1;
                if p != seen {
                    return Err(format!("progress {p} arrived as event {seen}").into());
                }
                let now = Instant::now();
                t_first.get_or_insert(now);
                t_head = Some(now);
            } else if mcp::is_reply_to(&msg, 1) {
                return Err("the call finished before the disconnect".into());
            }
        }
        Ok::<(), Error>(())
    })
    .await;
    timed_out(read_head)?;
    let last_id = last_id.ok_or("the server sends no event ids: nothing to resume from")?;
    drop(conn); // the disconnect: the socket closes with whatever was still in flight

    let wait = match mode {
        Mode::Finished => finished_wait + Duration::from_micros(missed.saturating_mul(50)),
        Mode::InFlight => {
            let pace = match (t_first, t_head) {
                (Some(a), Some(b)) => b.duration_since(a).as_secs_f64() / (head - 1) as f64,
                _ => 0.0,
            };
            let pace = pace.max(interval_ms as f64 / 1e3);
            Duration::from_secs_f64((pace * missed as f64).min(600.0))
        }
    };
    sleep(wait).await;

    let (mut received, mut replied) = (Vec::new(), false);
    let started = Instant::now();
    let limit = Duration::from_secs(30) + Duration::from_millis(tail * interval_ms * 3);
    let mut conn = Conn::open(target).await?;
    let resumed = timeout(limit, async {
        let mut msgs = mcp::get(&mut conn, target, &session, Some(&last_id)).await?;
        while let Some(event) = msgs.next().await? {
            if event.data.is_empty() {
                continue;
            }
            let msg: Value = serde_json::from_str(&event.data)?;
            if let Some(p) = mcp::progress_of(&msg, token) {
                received.push(p);
            } else if mcp::is_reply_to(&msg, 1) {
                replied = true;
                break;
            }
        }
        Ok::<(), Error>(())
    })
    .await;
    let elapsed = started.elapsed();
    drop(conn);
    let verdict = match resumed {
        Ok(Err(e)) => format!("failed ({e})"),
        Ok(Ok(())) => verdict(&received, head, count, replied, false),
        Err(_) => verdict(&received, head, count, replied, true),
    };
    if let Ok(mut conn) = Conn::open(target).await {
        let _ = timeout(CALL_TIMEOUT, mcp::delete(&mut conn, target, &session)).await;
    }
    out.text(&name, &verdict);
    if mode == Mode::Finished && replied {
        out.num(&format!("{name}.replay_ms"), ms(elapsed));
    }
    Ok(verdict)
}

#[cfg(test)]
mod tests {
    use super::verdict;

    #[test]
    fn verdicts() {
        assert_eq!(verdict(&[2, 3, 4], 1, 4, true, false), "exact");
        assert_eq!(verdict(&[4], 1, 4, true, false), "lost 2");
        assert_eq!(verdict(&[1, 2, 3, 3, 4], 1, 4, true, false), "duplicated 2");
        assert_eq!(
            verdict(&[3, 2, 4], 1, 4, false, true),
            "reordered, no reply (timed out)"
        );
    }
}
