//! `otpmcp-load`: a load generator for any Streamable HTTP MCP server that offers the
//! tools `echo(text)` and `stream_events(count, interval_ms)`.
//!
//! It measures the `initialize` rate, the `tools/call` rate at N calls in flight, the
//! latency of a lone call, streamed calls (events/s, first-event latency), server memory
//! per idle session and per idle GET stream, and whether resuming after a disconnect
//! delivers exactly the missed events; and, for a 2026-07-28 client, the same through
//! tasks and `tasks/stream` (events/s, replay after a cut, tasks/s across replicas:
//! `scripts/bench-tasks`). With `--pid`, server CPU time and RSS come from
//! `/proc/<pid>`. Every figure is printed as one `name value` line. `scripts/bench-peers`
//! runs it against otpmcp and rmcp; `scripts/test` runs its `smoke` against otpmcp.
//!
//! `stdio-call` drives a stdio server instead (newline-delimited JSON-RPC on the stdin
//! and stdout of a process it starts): the `tools/call` rate at N calls in flight, the
//! server's CPU per call, and whether it exits cleanly when its stdin closes
//! (`scripts/bench-stdio`; see [`stdio`]).
//!
//! It runs on a single-threaded runtime with one HTTP/1.1 connection per request in
//! flight: it is meant to be pinned to a core of its own, beside the server's.

mod client;
mod exec;
mod mcp;
mod ports;
mod procfs;
mod soak;
mod sse;
mod stdio;
mod tasks;
mod workloads;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::Target;
use workloads::{Ctx, Mode, Out};

/// Any error; workloads report it with context and go on where they can.
pub(crate) type Error = Box<dyn std::error::Error + Send + Sync>;
/// Result with [`Error`].
pub(crate) type Result<T> = std::result::Result<T, Error>;

const USAGE: &str = "usage: otpmcp-load COMMAND [OPTIONS]
       otpmcp-load stdio-call [--in-flight N] [--duration S] [--warmup S] -- PROGRAM [ARG]...

Drives a Streamable HTTP MCP server offering echo(text) and stream_events(count, interval_ms),
or (stdio-call) a stdio server that it starts.
Prints one `name value` line per figure; errors go to stderr and make the exit status 1.

commands:
  initialize     sessions/s: initialize + initialized + DELETE, --connections at once
  call           tools/call echo: --sessions x --in-flight calls in flight: calls/s, CPU/call
  latency        tools/call echo, one in flight: p50/p99 ms
  stream         --parallel calls of stream_events(--count, 0 ms): events/s, CPU/event,
                 first-event ms
  idle-sessions  KB of server RSS per idle session (--idle-sessions of them; needs --pid)
  idle-streams   KB of server RSS per idle GET stream (--idle-streams of them; needs --pid)
  resume         resume after a disconnect with --missed events missed, --mode
  task-stream    the `stream` workload, then the same as --parallel tasks (2026-07-28, the
                 tasks extension declared) each followed with tasks/stream from its start:
                 events/s of both, CPU/event, first-event ms
  task-resume    a task of --missed events (each of the list) followed to its first
                 progress event, cut, and once completed resumed with tasks/stream `after`:
                 verdict, ms to the first and to the last replayed event
  task-churn     --parallel slots creating one-event tasks on one --url and reading each to
                 its end with tasks/stream on the next (comma-separated replicas, used in
                 turn): tasks/s, p50/p99 ms
  all            everything above with the defaults of scripts/bench-peers
  smoke          about 2 seconds of a little of everything; fails on any error or a
                 resume that is not exact
  soak           --duration of mixed load on every --url (comma-separated replicas):
                 session churn, interrupted and resumed calls checked event by event, a
                 slow reader, and with --admin a panic every --panic-every; fails on a
                 lost or duplicated event (outside --faults windows) or a hung request
  exec           execute(--program, [--bytes]) once: output MB/s through to this client,
                 server CPU ms per MB (needs [exec] and such a program; see
                 config/exec-bench.toml)
  stdio-call     start `PROGRAM [ARG]...` (everything after `--`) with piped stdin and
                 stdout, initialize (2025-11-25), keep --in-flight echo calls in flight as
                 newline-delimited JSON-RPC for --warmup then --duration, check every
                 answer, close stdin and wait for the exit: calls/s, server CPU/call (the
                 spawned pid: under `taskset` that is the server), p50/p99 ms, exit_ok
  free-port      print a free TCP port on 127.0.0.1, below the kernel's ephemeral range
  wait           wait until --url accepts TCP connections (up to --timeout)

options (defaults in brackets):
  --url URL            MCP endpoint [http://127.0.0.1:8080/mcp]; soak and task-churn take
                       several, comma-separated (replicas)
  --pid PID            server pid, for CPU time (/proc/PID/stat) and RSS (/proc/PID/status)
  --duration SECS      measured window of initialize, call, latency, stdio-call [5]
  --warmup SECS        unmeasured lead-in of those [1]
  --connections N      initialize: connections at once [4]
  --sessions N         call: sessions [16]
  --in-flight N        call: calls in flight per session; stdio-call: calls in flight [16]
  --count N            stream, task-stream: events per call [10000]
  --parallel N         stream, task-stream: calls at once; task-churn: slots [1]
  --idle-sessions N    idle-sessions: sessions [2000]; 0: `all` skips it
  --idle-streams N     idle-streams: streams [1000]; 0: `all` skips it
  --missed LIST        resume, task-resume: missed events, comma-separated [100,1000,10000];
                       empty: no resume workloads
  --mode MODE          resume: finished, in-flight or both [both]
  --timeout SECS       wait: how long [10]
  --program NAME       exec: the program [yes]
  --bytes N            exec: output bytes [104857600]
  --admin URLS         soak: admin listeners (http://host:port), comma-separated
  --panic-every SECS   soak: between injected panics [60]
  --faults FILE        soak: Redis outages, `start_ms end_ms` a line
  --era ERA            call, latency: `session` (2025-11-25: initialize, then calls in a
                       session) or `stateless` (2026-07-28: every call carries its own
                       _meta and routing headers, no session) [session]";

/// Most events a `stream_events` call may ask for (otpmcp's limit).
const MAX_EVENTS: u64 = 100_000;

struct Opts {
    command: String,
    url: String,
    pid: Option<u32>,
    duration: Duration,
    warmup: Duration,
    connections: usize,
    sessions: usize,
    in_flight: usize,
    count: u64,
    parallel: usize,
    idle_sessions: usize,
    idle_streams: usize,
    missed: Vec<u64>,
    modes: Vec<Mode>,
    timeout: Duration,
    stateless: bool,
    admins: Vec<String>,
    panic_every: Duration,
    faults: Option<String>,
    program: String,
    bytes: u64,
    /// stdio-call: the server's command line, everything after `--`.
    argv: Vec<String>,
}

fn secs(value: &str) -> std::result::Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .filter(|d| *d <= Duration::from_secs(3600))
        .ok_or_else(|| format!("{value:?} is not a number of seconds (0 to 3600)"))
}

fn number<T: std::str::FromStr + PartialOrd + From<u8>>(
    value: &str,
    max: T,
) -> std::result::Result<T, String> {
    value
        .parse::<T>()
        .ok()
        .filter(|n| *n >= T::from(1) && *n <= max)
        .ok_or_else(|| format!("{value:?} is not a whole number from 1 up"))
}

/// Like [`number`], but 0 is allowed.
fn count(value: &str, max: usize) -> std::result::Result<usize, String> {
    value
        .parse::<usize>()
        .ok()
        .filter(|n| *n <= max)
        .ok_or_else(|| format!("{value:?} is not a whole number from 0 up"))
}

/// Parses the command line after the program's name.
fn parse_args(args: impl IntoIterator<Item = String>) -> std::result::Result<Opts, String> {
    let mut args = args.into_iter();
    let command = args.next().ok_or("")?;
    let mut o = Opts {
        command,
        url: "http://127.0.0.1:8080/mcp".to_owned(),
        pid: None,
        duration: Duration::from_secs(5),
        warmup: Duration::from_secs(1),
        connections: 4,
        sessions: 16,
        in_flight: 16,
        count: 10_000,
        parallel: 1,
        idle_sessions: 2000,
        idle_streams: 1000,
        missed: vec![100, 1000, 10_000],
        modes: vec![Mode::Finished, Mode::InFlight],
        timeout: Duration::from_secs(10),
        stateless: false,
        admins: Vec::new(),
        panic_every: Duration::from_secs(60),
        faults: None,
        program: "yes".into(),
        bytes: 100 << 20,
        argv: Vec::new(),
    };
    while let Some(flag) = args.next() {
        if flag == "--" {
            o.argv = args.by_ref().collect();
            break;
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let value = value.as_str();
        let bad = |e: String| format!("{flag}: {e}");
        match flag.as_str() {
            "--url" => o.url = value.to_owned(),
            "--admin" => o.admins = value.split(',').map(str::to_owned).collect(),
            "--panic-every" => o.panic_every = secs(value).map_err(bad)?,
            "--faults" => o.faults = Some(value.to_owned()),
            "--program" => o.program = value.to_owned(),
            "--bytes" => o.bytes = number(value, 1 << 40).map_err(bad)?,
            "--pid" => o.pid = Some(number(value, u32::MAX).map_err(bad)?),
            "--duration" => o.duration = secs(value).map_err(bad)?,
            "--warmup" => o.warmup = secs(value).map_err(bad)?,
            "--timeout" => o.timeout = secs(value).map_err(bad)?,
            "--connections" => o.connections = number(value, 1024).map_err(bad)?,
            "--sessions" => o.sessions = number(value, 10_000).map_err(bad)?,
            "--in-flight" => o.in_flight = number(value, 1024).map_err(bad)?,
            "--count" => o.count = number(value, MAX_EVENTS).map_err(bad)?,
            "--parallel" => o.parallel = number(value, 1024).map_err(bad)?,
            // 0: `all` skips the workload (bench-peers measures memory on fresh servers).
            "--idle-sessions" => o.idle_sessions = count(value, 100_000).map_err(bad)?,
            "--idle-streams" => o.idle_streams = count(value, 100_000).map_err(bad)?,
            "--missed" => {
                // Empty: no resume workloads (a server that keeps no events).
                o.missed = value
                    .split(',')
                    .filter(|m| !m.is_empty())
                    .map(|m| number(m, MAX_EVENTS / 2))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(bad)?;
            }
            "--era" => {
                o.stateless = match value {
                    "session" => false,
                    "stateless" => true,
                    _ => return Err(bad("session or stateless".to_owned())),
                }
            }
            "--mode" => {
                o.modes = match value {
                    "finished" => vec![Mode::Finished],
                    "in-flight" => vec![Mode::InFlight],
                    "both" => vec![Mode::Finished, Mode::InFlight],
                    _ => return Err(bad("finished, in-flight or both".to_owned())),
                }
            }
            _ => return Err(format!("unknown option {flag:?}")),
        }
    }
    if (o.command == "stdio-call") == o.argv.is_empty() {
        return Err("stdio-call, and only it, needs `-- PROGRAM [ARG]...`".to_owned());
    }
    if o.sessions * o.in_flight > 16_384 {
        return Err("--sessions x --in-flight must be at most 16384 connections".to_owned());
    }
    Ok(o)
}

/// A short pause between workloads, so that one's clean-up is not billed to the next.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// Runs one workload; a fatal error of it is reported and the run goes on.
fn report(out: &Out, name: &str, result: Result<()>) {
    if let Err(e) = result {
        out.error(name, &e.to_string());
    }
}

async fn resume_all(ctx: &Ctx, out: &Out, o: &Opts, wait: Duration, strict: bool) {
    for &mode in &o.modes {
        for &missed in &o.missed {
            let name = format!("resume.{}.{missed}", mode.name());
            match workloads::resume(ctx, out, missed, mode, wait).await {
                Ok(verdict) if strict && verdict != "exact" => out.error(&name, &verdict),
                Ok(_) => {}
                Err(e) => out.error(&name, &e.to_string()),
            }
            settle().await;
        }
    }
}

async fn all(ctx: &Ctx, out: &Out, o: &Opts) {
    // Memory first, while the server is fresh: RSS grows most readably from a baseline
    // that earlier workloads have not already inflated.
    let settle_rss = Duration::from_millis(500);
    if o.idle_sessions > 0 {
        report(
            out,
            "idle_session",
            workloads::idle_sessions(ctx, out, o.idle_sessions, settle_rss).await,
        );
        settle().await;
    }
    if o.idle_streams > 0 {
        report(
            out,
            "idle_stream",
            workloads::idle_streams(ctx, out, o.idle_streams, settle_rss).await,
        );
        settle().await;
    }
    report(
        out,
        "initialize",
        workloads::initialize_rate(ctx, out, o.connections, o.warmup, o.duration).await,
    );
    settle().await;
    let call = workloads::call_rate(
        ctx,
        out,
        "call",
        o.sessions,
        o.in_flight,
        o.warmup,
        o.duration,
    );
    report(out, "call", call.await);
    settle().await;
    let latency = workloads::call_rate(ctx, out, "latency", 1, 1, o.warmup, o.duration);
    report(out, "latency", latency.await);
    settle().await;
    report(out, "stream", workloads::stream(ctx, out, 1, 10_000).await);
    settle().await;
    report(out, "stream", workloads::stream(ctx, out, 8, 2_000).await);
    settle().await;
    resume_all(ctx, out, o, Duration::from_secs(1), false).await;
}

async fn smoke(ctx: &Ctx, out: &Out) {
    let started = Instant::now();
    let ms = Duration::from_millis;
    report(
        out,
        "initialize",
        workloads::initialize_rate(ctx, out, 2, ms(50), ms(200)).await,
    );
    report(
        out,
        "call",
        workloads::call_rate(ctx, out, "call", 2, 4, ms(50), ms(250)).await,
    );
    report(
        out,
        "latency",
        workloads::call_rate(ctx, out, "latency", 1, 1, ms(50), ms(150)).await,
    );
    let stateless = Ctx {
        target: ctx.target.clone(),
        pid: ctx.pid,
        stateless: true,
    };
    report(
        out,
        "call_stateless",
        workloads::call_rate(&stateless, out, "call_stateless", 2, 4, ms(50), ms(250)).await,
    );
    report(out, "stream", workloads::stream(ctx, out, 1, 500).await);
    report(out, "stream", workloads::stream(ctx, out, 4, 100).await);
    report(
        out,
        "idle_session",
        workloads::idle_sessions(ctx, out, 20, ms(20)).await,
    );
    report(
        out,
        "idle_stream",
        workloads::idle_streams(ctx, out, 10, ms(20)).await,
    );
    for (missed, mode) in [(100, Mode::Finished), (50, Mode::InFlight)] {
        let name = format!("resume.{}.{missed}", mode.name());
        match workloads::resume(ctx, out, missed, mode, ms(100)).await {
            Ok(verdict) if verdict != "exact" => out.error(&name, &verdict),
            Ok(_) => {}
            Err(e) => out.error(&name, &e.to_string()),
        }
    }
    report(
        out,
        "task_stream",
        tasks::task_stream(ctx, out, 2, 200).await,
    );
    match tasks::task_resume(ctx, out, 100).await {
        Ok(verdict) if verdict != "exact" => out.error("task_resume.100", &verdict),
        Ok(_) => {}
        Err(e) => out.error("task_resume.100", &e.to_string()),
    }
    let churn = tasks::task_churn(ctx, out, vec![ctx.target.clone()], 2, ms(50), ms(200));
    report(out, "task_churn", churn.await);
    out.num("smoke.seconds", started.elapsed().as_secs_f64());
}

async fn wait(target: &Target, limit: Duration) -> Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        match tokio::net::TcpStream::connect(target.addr).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("{} not reachable: {e}", target.addr).into());
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn run(o: Opts) -> Result<u64> {
    if o.command == "free-port" {
        println!("{}", ports::free_port()?);
        return Ok(0);
    }
    if o.command == "stdio-call" {
        let out = Out::default();
        let run = stdio::Run {
            command: o.argv,
            in_flight: o.in_flight,
            warmup: o.warmup,
            duration: o.duration,
        };
        report(&out, "stdio_call", stdio::call_rate(&out, &run).await);
        return Ok(out.errors());
    }
    if o.command == "soak" {
        let parse = |urls: &str| -> Result<Vec<Arc<Target>>> {
            urls.split(',')
                .filter(|u| !u.is_empty())
                .map(|u| Target::parse(u).map(Arc::new))
                .collect()
        };
        let out = Out::default();
        let run = soak::Soak {
            targets: parse(&o.url)?,
            admins: parse(&o.admins.join(","))?,
            duration: o.duration,
            panic_every: o.panic_every,
            faults: o.faults.clone(),
        };
        soak::soak(run, &out).await;
        return Ok(out.errors());
    }
    // task-churn takes several URLs; the first is the one the other figures speak of.
    let first_url = o.url.split(',').next().unwrap_or_default();
    let target = Arc::new(Target::parse(first_url)?);
    if o.command == "wait" {
        wait(&target, o.timeout).await?;
        return Ok(0);
    }
    if let Some(pid) = o.pid {
        procfs::cpu_ticks(pid).map_err(|e| format!("--pid {pid}: {e}"))?;
    }
    let ctx = Ctx {
        target,
        pid: o.pid,
        stateless: o.stateless,
    };
    let out = Out::default();
    let out_ = &out;
    let settle_rss = Duration::from_millis(500);
    match o.command.as_str() {
        "initialize" => {
            let r = workloads::initialize_rate(&ctx, out_, o.connections, o.warmup, o.duration);
            report(out_, "initialize", r.await);
        }
        "call" => {
            let r = workloads::call_rate(
                &ctx,
                out_,
                "call",
                o.sessions,
                o.in_flight,
                o.warmup,
                o.duration,
            );
            report(out_, "call", r.await);
        }
        "latency" => {
            let r = workloads::call_rate(&ctx, out_, "latency", 1, 1, o.warmup, o.duration);
            report(out_, "latency", r.await);
        }
        "stream" => {
            let r = workloads::stream(&ctx, out_, o.parallel, o.count);
            report(out_, "stream", r.await);
        }
        "idle-sessions" => {
            let r = workloads::idle_sessions(&ctx, out_, o.idle_sessions, settle_rss);
            report(out_, "idle_session", r.await);
        }
        "idle-streams" => {
            let r = workloads::idle_streams(&ctx, out_, o.idle_streams, settle_rss);
            report(out_, "idle_stream", r.await);
        }
        "resume" => resume_all(&ctx, out_, &o, Duration::from_secs(1), false).await,
        "task-stream" => {
            // The session stream first, in the same run: the target is a ratio of the two.
            let r = workloads::stream(&ctx, out_, o.parallel, o.count);
            report(out_, "stream", r.await);
            settle().await;
            let r = tasks::task_stream(&ctx, out_, o.parallel, o.count);
            report(out_, "task_stream", r.await);
        }
        "task-resume" => {
            for &missed in &o.missed {
                let name = format!("task_resume.{missed}");
                match tasks::task_resume(&ctx, out_, missed).await {
                    Ok(verdict) if verdict != "exact" => out_.error(&name, &verdict),
                    Ok(_) => {}
                    Err(e) => out_.error(&name, &e.to_string()),
                }
                settle().await;
            }
        }
        "task-churn" => {
            let targets = o
                .url
                .split(',')
                .filter(|u| !u.is_empty())
                .map(|u| Target::parse(u).map(Arc::new))
                .collect::<Result<Vec<_>>>()?;
            let r = tasks::task_churn(&ctx, out_, targets, o.parallel, o.warmup, o.duration);
            report(out_, "task_churn", r.await);
        }
        "all" => all(&ctx, out_, &o).await,
        "exec" => {
            let r = exec::throughput(&ctx, out_, &o.program, o.bytes);
            report(out_, "exec", r.await);
        }
        "smoke" => smoke(&ctx, out_).await,
        other => return Err(format!("unknown command {other:?}\n{USAGE}").into()),
    }
    Ok(out.errors())
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(opts) => opts,
        Err(msg) => {
            if !msg.is_empty() {
                eprintln!("{msg}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(opts)) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(errors) => {
            eprintln!("{errors} error(s)");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> std::result::Result<Opts, String> {
        parse_args(line.split_whitespace().map(str::to_owned))
    }

    #[test]
    fn stdio_call_takes_the_command_after_a_double_dash() {
        let o = parse("stdio-call --in-flight 32 --duration 2 -- taskset -c 0 otpmcp stdio --x")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.in_flight, 32);
        assert_eq!(o.duration, Duration::from_secs(2));
        assert_eq!(o.argv, ["taskset", "-c", "0", "otpmcp", "stdio", "--x"]);
    }

    #[test]
    fn only_stdio_call_takes_a_command() {
        assert!(parse("stdio-call --in-flight 4").is_err());
        assert!(parse("stdio-call --").is_err());
        assert!(parse("call --in-flight 4 -- otpmcp").is_err());
        assert!(parse("call --in-flight 4").is_ok_and(|o| o.argv.is_empty()));
    }
}
