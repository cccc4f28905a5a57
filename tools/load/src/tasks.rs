//! The task workloads (issue 23): `stream_events` run as a task of the stateless revision
//! (2026-07-28, the tasks extension declared in `_meta`) and followed with `tasks/stream`
//! (SEP-2694): live events/s, the replay of missed events with `after`, and tasks
//! created and completed per second across replicas.
//!
//! Every stream read here is checked as it is read: sequence numbers run on one by one
//! from the cursor, progress values one by one, and the stream ends with the task's
//! `completed` status event, then the request's result. A figure is printed only for a
//! stream that passed.

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::time::{sleep, timeout};

use crate::client::{Conn, Target};
use crate::mcp::{self, Messages};
use crate::workloads::{
    CALL_TIMEOUT, Ctx, Delivered, ERROR_PAUSE, Out, Shared, join, ms, percentile, timed_out, window,
};
use crate::{Error, Result};

/// The type of a task's status events (docs/tasks.md).
const STATUS: &str = "dev.otpmcp.task.status";
/// The type of a task's progress events.
const PROGRESS: &str = "dev.otpmcp.progress";
/// How often the resume workload asks whether the cut task has finished.
const POLL: Duration = Duration::from_millis(10);

/// Starts `stream_events(count, interval_ms)` as a task (request `id`); returns its id.
async fn start_task(
    conn: &mut Conn,
    target: &Target,
    id: u64,
    count: u64,
    interval_ms: u64,
) -> Result<String> {
    let params = format!(
        r#""name":"stream_events","arguments":{{"count":{count},"interval_ms":{interval_ms}}}"#
    );
    let mut msgs = mcp::post_stateless(
        conn,
        target,
        id,
        "tools/call",
        "stream_events",
        &params,
        true,
    )
    .await?;
    let reply = mcp::await_reply(&mut msgs, id).await?;
    msgs.drain().await?;
    let result = mcp::result_of(&reply)?;
    if result.get("resultType").and_then(Value::as_str) != Some("task") {
        return Err(format!("the call did not become a task: {result}").into());
    }
    result
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("a task without taskId: {result}").into())
}

/// The status of task `task` as `tasks/get` shows it.
async fn task_status(conn: &mut Conn, target: &Target, id: u64, task: &str) -> Result<String> {
    let params = format!(r#""taskId":"{task}""#);
    let mut msgs = mcp::post_stateless(conn, target, id, "tasks/get", task, &params, true).await?;
    let reply = mcp::await_reply(&mut msgs, id).await?;
    msgs.drain().await?;
    let result = mcp::result_of(&reply)?;
    result
        .get("status")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| format!("a task without status: {result}").into())
}

/// Opens `tasks/stream` (request `id`) for `task`, after `after` when given.
async fn open_stream(
    conn: &mut Conn,
    target: &Target,
    id: u64,
    task: &str,
    after: Option<u64>,
) -> Result<Messages> {
    let after = after
        .map(|a| format!(r#","after":{a}"#))
        .unwrap_or_default();
    let params = format!(r#""taskId":"{task}"{after}"#);
    mcp::post_stateless(conn, target, id, "tasks/stream", task, &params, true).await
}

/// What a `tasks/stream` answer carried, as far as it was read.
#[derive(Debug)]
struct Read {
    /// Task events read (of any type).
    events: u64,
    /// Progress events read.
    progress: u64,
    /// When the first event, and the first progress event, arrived.
    first_event: Option<Instant>,
    first_progress: Option<Instant>,
    /// When the last event arrived.
    last_event: Option<Instant>,
    /// The last `seq` read.
    last_seq: Option<u64>,
}

/// Reads `tasks/stream` request `id`'s answer: until the event numbered `until` when
/// given, else to the result (which must follow a `completed` status event). Fails on a
/// gap, a duplicate or a reordering of sequence numbers (which must start right after
/// `after`, or at 0) or of progress values.
async fn read_stream(
    msgs: &mut Messages,
    id: u64,
    after: Option<u64>,
    until: Option<u64>,
) -> Result<Read> {
    let mut read = Read {
        events: 0,
        progress: 0,
        first_event: None,
        first_progress: None,
        last_event: None,
        last_seq: after,
    };
    let (mut last_progress, mut last_status) = (None::<u64>, None::<String>);
    while let Some(event) = msgs.next().await? {
        if event.data.is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(&event.data)?;
        if mcp::is_reply_to(&msg, id) {
            mcp::result_of(&msg)?;
            if until.is_some() {
                return Err("the stream ended before the cut".into());
            }
            return match last_status.as_deref() {
                Some("completed") => Ok(read),
                other => Err(format!(
                    "the result followed status {other:?} (after seq {:?}, {} events)",
                    read.last_seq, read.events
                )
                .into()),
            };
        }
        if msg.get("method").and_then(Value::as_str) != Some("notifications/tasks/event") {
            continue;
        }
        let now = Instant::now();
        let params = msg.get("params").unwrap_or(&Value::Null);
        let seq = params.get("seq").and_then(Value::as_u64);
        let expected = read.last_seq.map_or(0, |s| s + 1);
        if seq != Some(expected) {
            return Err(format!("seq {seq:?} arrived where {expected} was due").into());
        }
        read.last_seq = seq;
        read.events += 1;
        read.first_event.get_or_insert(now);
        read.last_event = Some(now);
        let payload = params.get("payload").unwrap_or(&Value::Null);
        match params.get("type").and_then(Value::as_str) {
            Some(PROGRESS) => {
                let Some(p) = payload.get("progress").and_then(Value::as_f64) else {
                    return Err(format!("progress event without progress: {params}").into());
                };
                let p = p as u64;
                if last_progress.is_some_and(|l| p != l + 1) {
                    return Err(format!("progress {p} after {last_progress:?}").into());
                }
                last_progress = Some(p);
                read.progress += 1;
                read.first_progress.get_or_insert(now);
            }
            Some(STATUS) => {
                last_status = payload
                    .get("status")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
            }
            _ => {}
        }
        if until.is_some() && seq == until {
            return Ok(read);
        }
    }
    Err("the stream ended without its result".into())
}

/// One task of `stream_events(count, 0)` followed with `tasks/stream` from its start:
/// (first progress event's latency from the call, progress events, end time).
async fn one_task_stream(
    conn: &mut Conn,
    target: &Target,
    count: u64,
) -> Result<(Option<Duration>, u64, Instant)> {
    let sent = Instant::now();
    let task = start_task(conn, target, 1, count, 0).await?;
    let mut msgs = open_stream(conn, target, 2, &task, None).await?;
    let read = read_stream(&mut msgs, 2, None, None).await?;
    let end = Instant::now();
    if read.progress != count {
        return Err(format!("{} of {count} progress events", read.progress).into());
    }
    Ok((read.first_progress.map(|t| t - sent), read.progress, end))
}

/// `parallel` tasks of `stream_events(count, interval_ms = 0)` at once, each followed
/// with `tasks/stream` on its own connection as soon as it is created: progress events/s
/// over all of them (from the first call to the last result), server CPU per event, and
/// the first progress event's latency from the call. The figures match the session
/// `stream` workload's, to be read beside them.
pub(crate) async fn task_stream(ctx: &Ctx, out: &Out, parallel: usize, count: u64) -> Result<()> {
    let name = format!("task_stream_{parallel}x{count}");
    let mut conns = Vec::with_capacity(parallel);
    for _ in 0..parallel {
        conns.push(Conn::open(&ctx.target).await?);
    }
    let limit = Duration::from_secs(30) + Duration::from_micros(count.saturating_mul(100));
    let (cpu0, own0, t0) = (ctx.cpu(), ctx.own_cpu(), Instant::now());
    let mut handles = Vec::with_capacity(parallel);
    for mut conn in conns {
        let target = ctx.target.clone();
        handles.push(tokio::spawn(async move {
            timed_out(timeout(limit, one_task_stream(&mut conn, &target, count)).await)
        }));
    }
    Delivered::gather(ctx, handles, t0)
        .await
        .report(out, &name, t0, (cpu0, own0));
    Ok(())
}

/// Replay of `missed` task events: a task of `stream_events(missed, 0)` is followed until
/// its first progress event (seq 1), cut, and once `tasks/get` says it completed (the
/// remaining progress events and the `completed` status, `missed` events in all, are
/// then only in the store) resumed with `after` = 1. Prints `exact` (every seq once, in
/// order, then the result), ms from the resuming request to its first event and to its
/// last, and returns the verdict.
pub(crate) async fn task_resume(ctx: &Ctx, out: &Out, missed: u64) -> Result<String> {
    let name = format!("task_resume.{missed}");
    let target = &ctx.target;
    let mut conn = Conn::open(target).await?;
    let task = timed_out(timeout(CALL_TIMEOUT, start_task(&mut conn, target, 1, missed, 0)).await)?;
    let head = timeout(CALL_TIMEOUT, async {
        let mut msgs = open_stream(&mut conn, target, 2, &task, None).await?;
        read_stream(&mut msgs, 2, None, Some(1)).await
    })
    .await;
    timed_out(head)?;
    drop(conn); // the cut: the socket closes with whatever was still in flight

    let limit = CALL_TIMEOUT + Duration::from_micros(missed.saturating_mul(100));
    let mut conn = Conn::open(target).await?;
    let finished = timeout(limit, async {
        let mut id = 3;
        loop {
            id += 1;
            match task_status(&mut conn, target, id, &task).await?.as_str() {
                "completed" => return Ok::<(), Error>(()),
                "working" => sleep(POLL).await,
                other => return Err(format!("the task ended {other}").into()),
            }
        }
    })
    .await;
    timed_out(finished)?;

    let started = Instant::now();
    let resumed = timeout(limit, async {
        let mut msgs = open_stream(&mut conn, target, 100, &task, Some(1)).await?;
        read_stream(&mut msgs, 100, Some(1), None).await
    })
    .await;
    let verdict = match timed_out(resumed) {
        Ok(read) if read.events == missed => {
            let since = |t: Option<Instant>| t.map(|t| ms(t - started));
            out.text(&name, "exact");
            if let Some(first) = since(read.first_event) {
                out.num(&format!("{name}.first_event_ms"), first);
            }
            if let Some(last) = since(read.last_event) {
                out.num(&format!("{name}.replay_ms"), last);
            }
            return Ok("exact".to_owned());
        }
        Ok(read) => format!("{} of {missed} events", read.events),
        Err(e) => format!("failed ({e})"),
    };
    out.text(&name, &verdict);
    Ok(verdict)
}

/// One churn slot: creates a `stream_events(1, 0)` task on one target and follows it to
/// its result with `tasks/stream` on the next one, over and over, moving on one target
/// each time (with two replicas: created on A and read on B, then the other way round).
async fn churn_worker(
    targets: Arc<Vec<Arc<Target>>>,
    shared: Arc<Shared>,
    slot: usize,
) -> Vec<Duration> {
    let mut conns: Vec<Option<Conn>> = targets.iter().map(|_| None).collect();
    let mut latencies = Vec::new();
    let mut turn = slot;
    while !shared.stop.load(Relaxed) {
        turn += 1;
        let (a, b) = (turn % targets.len(), (turn + 1) % targets.len());
        let measuring = shared.measuring.load(Relaxed);
        let started = Instant::now();
        let r = timeout(CALL_TIMEOUT, async {
            let (Some(ta), Some(tb)) = (targets.get(a), targets.get(b)) else {
                return Err::<(), Error>("no target".into());
            };
            let ca = match conns.get_mut(a) {
                Some(Some(c)) => c,
                Some(slot) => slot.insert(Conn::open(ta).await?),
                None => return Err("no connection slot".into()),
            };
            let task = start_task(ca, ta, 1, 1, 0).await?;
            let cb = match conns.get_mut(b) {
                Some(Some(c)) => c,
                Some(slot) => slot.insert(Conn::open(tb).await?),
                None => return Err("no connection slot".into()),
            };
            let mut msgs = open_stream(cb, tb, 2, &task, None).await?;
            read_stream(&mut msgs, 2, None, None).await?;
            msgs.drain().await
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
                conns.iter_mut().for_each(|c| *c = None);
                sleep(ERROR_PAUSE).await;
            }
        }
    }
    latencies
}

/// Tasks created and completed per second: `parallel` slots, each creating a one-event
/// task on one of `targets` and reading it to its end with `tasks/stream` on the next
/// (alternating replicas when there are two). Prints tasks/s, the server's CPU per task
/// when `ctx` knows its pid (with several replicas, that one's share only), and the
/// p50/p99 ms from the call to the stream's result.
pub(crate) async fn task_churn(
    ctx: &Ctx,
    out: &Out,
    targets: Vec<Arc<Target>>,
    parallel: usize,
    warmup: Duration,
    duration: Duration,
) -> Result<()> {
    let name = format!("task_churn_{}r", targets.len());
    if targets.is_empty() {
        return Err("no --url".into());
    }
    let targets = Arc::new(targets);
    let shared = Arc::new(Shared::default());
    let handles = (0..parallel)
        .map(|slot| tokio::spawn(churn_worker(targets.clone(), shared.clone(), slot)))
        .collect();
    let w = window(ctx, &shared, warmup, duration).await;
    let mut latencies: Vec<Duration> = join(handles).await.into_iter().flatten().collect();
    w.report(out, &name, "tasks_per_s", "task");
    latencies.sort_unstable();
    if let (Some(p50), Some(p99)) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99)) {
        out.num(&format!("{name}.p50_ms"), ms(p50));
        out.num(&format!("{name}.p99_ms"), ms(p99));
    }
    shared.report(out, &name);
    Ok(())
}
