//! `stdio-call`: the `tools/call` rate of an MCP server that speaks stdio
//! (newline-delimited JSON-RPC on its stdin and stdout), which this tool starts itself.
//!
//! The server is spawned with piped stdin and stdout (its stderr is this tool's). After
//! the 2025-11-25 `initialize` and `notifications/initialized`, `in_flight` calls of
//! `echo {"text":"hello"}` are kept outstanding: each answer read lets one more request be
//! written, and the requests let loose by the answers read in one go are written in one
//! write. Every answer must be the echo result for an id that is outstanding; anything
//! else counts as an error. After `warmup` and the measured `duration`, no more requests
//! are sent, the outstanding ones are awaited, stdin is closed, and the server must exit
//! (successfully) within [`EXIT_WAIT`].
//!
//! Figures: `stdio_call.calls_per_s`, `stdio_call.cpu_us_per_call` (the server's CPU
//! from `/proc/<pid>/stat` of the spawned process: when the command is `taskset`, that
//! is the server, which taskset execs), `stdio_call.load_cpu_us_per_call`,
//! `stdio_call.p50_ms`, `stdio_call.p99_ms` and `stdio_call.exit_ok` (1 or 0).
//!
//! Writer, reader and clock are three futures joined on this tool's single thread; they
//! share the bookkeeping through `Cell`s, never held across an `await`, and wake each
//! other through [`Wake`] (so the tool needs no tokio `sync` or `macros`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::{Future, poll_fn};
use std::io::Write as _;
use std::pin::pin;
use std::process::Stdio;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, Command};
use tokio::time::{sleep, timeout};

use crate::mcp::{self, PROTOCOL_VERSION};
use crate::workloads::{CALL_TIMEOUT, Out, Window, delta, ms, percentile};
use crate::{Result, procfs};

/// How long the server may take to exit once its stdin is closed.
pub(crate) const EXIT_WAIT: Duration = Duration::from_secs(10);

/// The workload's name, the prefix of its figures.
const NAME: &str = "stdio_call";

/// The text every call echoes.
const TEXT: &str = "hello";

/// What `stdio-call` runs.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Run {
    /// The server's command line: program, then arguments.
    pub(crate) command: Vec<String>,
    pub(crate) in_flight: usize,
    pub(crate) warmup: Duration,
    pub(crate) duration: Duration,
}

/// The request line (with its newline) of echo call `id`.
fn write_call(buf: &mut Vec<u8>, id: u64) {
    // Writing to a Vec cannot fail.
    let _ = writeln!(
        buf,
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{TEXT}"}}}}}}"#
    );
}

/// What one line from the server is.
#[derive(Debug, PartialEq)]
enum Answer {
    /// The echo result of call `id`.
    Echo(u64),
    /// A notification (a log message, say): not an answer, skipped.
    Notification,
}

/// Reads one line from the server: the echo answer to a call, a notification, or an
/// error saying what is wrong with it.
fn classify(line: &[u8]) -> Result<Answer> {
    let msg: Value = serde_json::from_slice(line)
        .map_err(|e| format!("not JSON ({e}): {}", String::from_utf8_lossy(line)))?;
    let id = msg.get("id");
    if msg.get("method").is_some() {
        return match id {
            None => Ok(Answer::Notification),
            // This client declared no capabilities: the server has nothing to ask it.
            Some(id) => Err(format!("a request from the server (id {id}): {msg}").into()),
        };
    }
    let id = id
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("an answer without a numeric id: {msg}"))?;
    let result = mcp::result_of(&msg).map_err(|e| format!("call {id}: {e}"))?;
    if result.get("isError") == Some(&Value::Bool(true)) {
        return Err(format!("call {id}: a tool error: {result}").into());
    }
    let text = result
        .pointer("/content/0/text")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("call {id}: no text content: {result}"))?;
    if text != TEXT {
        return Err(format!("call {id}: echoed {text:?}").into());
    }
    Ok(Answer::Echo(id))
}

/// Calls sent and not yet answered, by id, with when each was sent.
#[derive(Debug, Default)]
struct Outstanding {
    sent: HashMap<u64, Instant>,
    next_id: u64,
}

impl Outstanding {
    /// Takes the next id (from 1; the handshake uses 0) and notes it sent at `at`.
    fn send(&mut self, at: Instant) -> u64 {
        self.next_id += 1;
        self.sent.insert(self.next_id, at);
        self.next_id
    }

    /// The call answered, with its latency; an error for an id not outstanding (never
    /// sent, or answered already).
    fn answer(&mut self, id: u64, at: Instant) -> Result<Duration> {
        match self.sent.remove(&id) {
            Some(sent) => Ok(at.saturating_duration_since(sent)),
            None if id >= 1 && id <= self.next_id => {
                Err(format!("call {id} answered twice").into())
            }
            None => Err(format!("an answer to call {id}, never sent").into()),
        }
    }

    fn len(&self) -> usize {
        self.sent.len()
    }
}

/// The waker of one future of this thread waiting for another to do something.
#[derive(Default)]
struct Wake(Cell<Option<Waker>>);

impl Wake {
    /// Wakes the waiting future, if any.
    fn wake(&self) {
        if let Some(waker) = self.0.take() {
            waker.wake();
        }
    }

    /// Notes that the future polled with `cx` waits.
    fn wait(&self, cx: &Context<'_>) -> Poll<()> {
        self.0.set(Some(cx.waker().clone()));
        Poll::Pending
    }
}

/// What the writer, the reader and the clock share.
#[derive(Default)]
struct State {
    outstanding: RefCell<Outstanding>,
    /// Calls answered correctly.
    done: Cell<u64>,
    errors: Cell<u64>,
    first_error: RefCell<Option<String>>,
    /// Inside the measured window: latencies are recorded.
    measuring: Cell<bool>,
    latencies: RefCell<Vec<Duration>>,
    /// No more calls are sent.
    stop: Cell<bool>,
    /// Calls the reader has let loose (one per answer) for the writer to send.
    credits: Cell<usize>,
    /// The reader is done: the writer closes stdin.
    reader_done: Cell<bool>,
    writer: Wake,
    /// The conversation broke (end of output, a write failed, a timeout): the clock
    /// stops waiting.
    broken: Cell<bool>,
    clock: Wake,
}

impl State {
    fn fail(&self, message: String) {
        self.errors.set(self.errors.get() + 1);
        self.first_error.borrow_mut().get_or_insert(message);
    }

    fn break_off(&self, message: String) {
        self.fail(message);
        self.stop.set(true);
        self.broken.set(true);
        self.clock.wake();
    }

    /// Lets the writer send `n` more calls.
    fn give(&self, n: usize) {
        self.credits.set(self.credits.get() + n);
        self.writer.wake();
    }

    /// Calls to send (all that have gathered), or `None` once the reader is done.
    async fn take(&self) -> Option<usize> {
        poll_fn(|cx| match self.credits.take() {
            0 if self.reader_done.get() => Poll::Ready(None),
            0 => self.writer.wait(cx).map(|()| None),
            n => Poll::Ready(Some(n)),
        })
        .await
    }
}

/// Writes one line of JSON-RPC to the server and flushes it.
async fn write_line(stdin: &mut ChildStdin, line: &str) -> Result<()> {
    stdin.write_all(format!("{line}\n").as_bytes()).await?;
    stdin.flush().await?;
    Ok(())
}

/// Reads lines until the answer to `initialize` (id 0), skipping notifications.
async fn await_initialized<R: AsyncRead + Unpin>(stdout: &mut BufReader<R>) -> Result<()> {
    let mut line = Vec::new();
    loop {
        line.clear();
        if stdout.read_until(b'\n', &mut line).await? == 0 {
            return Err("the server closed its stdout before answering initialize".into());
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg: Value = serde_json::from_slice(&line)?;
        if mcp::is_reply_to(&msg, 0) {
            let result = mcp::result_of(&msg)?;
            if result
                .get("protocolVersion")
                .and_then(Value::as_str)
                .is_none()
            {
                return Err(format!("initialize: no protocolVersion in {result}").into());
            }
            return Ok(());
        }
        if msg.get("method").is_none() || msg.get("id").is_some() {
            return Err(format!("before the initialize answer: {msg}").into());
        }
    }
}

/// Sends a call for every credit (all credits waiting at once in one write) until the
/// reader is done; then closes stdin by dropping it. Credits given before the stop are
/// still honoured after it: the reader, blocked on the answer they will bring, counts on
/// them (it gives none after the stop).
async fn write_calls(state: &State, mut stdin: ChildStdin) {
    let mut buf = Vec::with_capacity(16 * 1024);
    while let Some(n) = state.take().await {
        buf.clear();
        {
            let now = Instant::now();
            let mut outstanding = state.outstanding.borrow_mut();
            for _ in 0..n {
                write_call(&mut buf, outstanding.send(now));
            }
        }
        let written = async {
            stdin.write_all(&buf).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            state.break_off(format!("writing to the server's stdin: {e}"));
        }
    }
}

/// Reads answers, giving the writer a credit for each until told to stop, and returns
/// once nothing is outstanding after the stop (or the conversation broke).
async fn read_answers<R: AsyncRead + Unpin>(state: &State, stdout: BufReader<R>) {
    read_until_done(state, stdout).await;
    state.reader_done.set(true);
    state.writer.wake();
}

async fn read_until_done<R: AsyncRead + Unpin>(state: &State, mut stdout: BufReader<R>) {
    let mut line = Vec::with_capacity(256);
    let mut owed = 0;
    loop {
        // Everything already buffered is read before the writer is woken: the calls it
        // lets loose go out in one write.
        if owed > 0 && stdout.buffer().is_empty() {
            state.give(std::mem::take(&mut owed));
        }
        // Done once every call is answered, those the writer has yet to send included.
        if state.stop.get() && state.outstanding.borrow().len() == 0 && state.credits.get() == 0 {
            return;
        }
        line.clear();
        let read = match timeout(CALL_TIMEOUT, stdout.read_until(b'\n', &mut line)).await {
            Ok(Ok(0)) => Err("the server closed its stdout".to_owned()),
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("reading the server's stdout: {e}")),
            Err(_) => Err(format!(
                "no answer for {CALL_TIMEOUT:?} ({} calls outstanding)",
                state.outstanding.borrow().len()
            )),
        };
        if let Err(e) = read {
            state.break_off(e);
            return;
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let at = Instant::now();
        let id = match classify(&line) {
            Ok(Answer::Notification) => continue,
            Ok(Answer::Echo(id)) => Ok(id),
            // An error answer still ends its call; find its id to keep the count right.
            Err(e) => Err((serde_json::from_slice::<Value>(&line).ok(), e)),
        };
        match id {
            Ok(id) => match state.outstanding.borrow_mut().answer(id, at) {
                Ok(latency) => {
                    state.done.set(state.done.get() + 1);
                    if state.measuring.get() {
                        state.latencies.borrow_mut().push(latency);
                    }
                }
                Err(e) => {
                    state.fail(e.to_string());
                    continue;
                }
            },
            Err((msg, e)) => {
                state.fail(e.to_string());
                let id = msg
                    .as_ref()
                    .and_then(|m| m.get("id"))
                    .and_then(Value::as_u64);
                match id {
                    Some(id) if state.outstanding.borrow_mut().answer(id, at).is_ok() => {}
                    _ => continue,
                }
            }
        }
        if !state.stop.get() {
            owed += 1;
        }
    }
}

/// Lets the calls warm up, measures `duration`, then stops the sending; `None` if the
/// conversation broke first.
async fn clock(
    state: &State,
    pid: Option<u32>,
    warmup: Duration,
    duration: Duration,
) -> Option<Window> {
    let cpu = || pid.and_then(|pid| procfs::cpu_ticks(pid).ok());
    let own = || procfs::cpu_ticks(std::process::id()).ok();
    let measured = async {
        sleep(warmup).await;
        let (count0, cpu0, own0, t0) = (state.done.get(), cpu(), own(), Instant::now());
        state.measuring.set(true);
        sleep(duration).await;
        state.measuring.set(false);
        let (count1, cpu1, own1) = (state.done.get(), cpu(), own());
        Window {
            count: count1 - count0,
            secs: t0.elapsed().as_secs_f64(),
            cpu_ticks: delta(cpu0, cpu1),
            own_ticks: delta(own0, own1),
        }
    };
    let mut measured = pin!(measured);
    let window = poll_fn(|cx| {
        if state.broken.get() {
            return Poll::Ready(None);
        }
        match measured.as_mut().poll(cx) {
            Poll::Ready(w) => Poll::Ready(Some(w)),
            Poll::Pending => state.clock.wait(cx).map(|()| None),
        }
    })
    .await;
    state.stop.set(true);
    window
}

/// Runs `a`, `b` and `c` to completion concurrently on this task; `a`'s output.
async fn join3<T>(
    a: impl Future<Output = T>,
    b: impl Future<Output = ()>,
    c: impl Future<Output = ()>,
) -> T {
    let (mut a, mut b, mut c) = (pin!(a), pin!(b), pin!(c));
    let (mut a_out, mut b_done, mut c_done) = (None, false, false);
    poll_fn(|cx| {
        if a_out.is_none()
            && let Poll::Ready(out) = a.as_mut().poll(cx)
        {
            a_out = Some(out);
        }
        b_done = b_done || b.as_mut().poll(cx).is_ready();
        c_done = c_done || c.as_mut().poll(cx).is_ready();
        match a_out.take() {
            Some(out) if b_done && c_done => Poll::Ready(out),
            out => {
                a_out = out;
                Poll::Pending
            }
        }
    })
    .await
}

/// Runs the workload and prints its figures; errors are reported on `out`.
pub(crate) async fn call_rate(out: &Out, run: &Run) -> Result<()> {
    let (program, args) = run.command.split_first().ok_or("stdio-call: no command")?;
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {program:?}: {e}"))?;
    let pid = child.id();
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("the child's pipes are missing".into());
    };
    let mut stdout = BufReader::with_capacity(64 * 1024, stdout);
    let initialize = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{{"name":"otpmcp-load","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    );
    let handshake = async {
        write_line(&mut stdin, &initialize).await?;
        await_initialized(&mut stdout).await?;
        write_line(
            &mut stdin,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await
    };
    timeout(CALL_TIMEOUT, handshake)
        .await
        .map_err(|_| "the initialize handshake timed out")?
        .map_err(|e| format!("the initialize handshake: {e}"))?;

    let state = State::default();
    state.give(run.in_flight);
    let window = join3(
        clock(&state, pid, run.warmup, run.duration),
        write_calls(&state, stdin),
        read_answers(&state, stdout),
    )
    .await;

    // stdin is closed (the writer dropped it): the server should exit on its own.
    let exit_ok = match timeout(EXIT_WAIT, child.wait()).await {
        Ok(Ok(status)) if status.success() => true,
        Ok(Ok(status)) => {
            out.error(NAME, &format!("the server exited with {status}"));
            false
        }
        Ok(Err(e)) => {
            out.error(NAME, &format!("waiting for the server: {e}"));
            false
        }
        Err(_) => {
            out.error(
                NAME,
                &format!(
                    "the server was still running {EXIT_WAIT:?} after its stdin closed; killed"
                ),
            );
            let _ = child.kill().await;
            false
        }
    };

    if let Some(w) = window {
        w.report(out, NAME, "calls_per_s", "call");
    }
    let mut latencies = state.latencies.take();
    latencies.sort_unstable();
    if let (Some(p50), Some(p99)) = (percentile(&latencies, 0.5), percentile(&latencies, 0.99)) {
        out.num(&format!("{NAME}.p50_ms"), ms(p50));
        out.num(&format!("{NAME}.p99_ms"), ms(p99));
    }
    out.text(&format!("{NAME}.exit_ok"), if exit_ok { "1" } else { "0" });
    let errors = state.errors.get();
    if errors > 0 {
        let first = state.first_error.take().unwrap_or_default();
        out.error(
            NAME,
            &format!("{errors} bad answers or failures; first: {first}"),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_is_one_line_of_json_rpc() {
        let mut buf = Vec::new();
        write_call(&mut buf, 7);
        write_call(&mut buf, 8);
        let text = String::from_utf8(buf).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(text.ends_with('\n'));
        let msg: Value = serde_json::from_str(lines[0]).unwrap_or_default();
        assert_eq!(msg["id"], 7);
        assert_eq!(msg["method"], "tools/call");
        assert_eq!(msg["params"]["name"], "echo");
        assert_eq!(msg["params"]["arguments"]["text"], TEXT);
    }

    #[test]
    fn the_echo_result_is_an_answer() {
        let line = br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"hello"}],"isError":false}}"#;
        assert_eq!(classify(line).ok(), Some(Answer::Echo(42)));
        let no_flag =
            br#"{"jsonrpc":"2.0","id":3,"result":{"content":[{"type":"text","text":"hello"}]}}"#;
        assert_eq!(classify(no_flag).ok(), Some(Answer::Echo(3)));
    }

    #[test]
    fn notifications_are_skipped() {
        let line = br#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        assert_eq!(classify(line).ok(), Some(Answer::Notification));
    }

    #[test]
    fn wrong_answers_are_errors() {
        for line in [
            &br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"bye"}]}}"#[..],
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"hello"}],"isError":true}}"#,
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}"#,
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            br#"{"jsonrpc":"2.0","id":"1","result":{"content":[{"type":"text","text":"hello"}]}}"#,
            br#"{"jsonrpc":"2.0","id":9,"method":"roots/list"}"#,
            b"not json",
        ] {
            assert!(classify(line).is_err(), "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn each_sent_call_is_answered_once() {
        let mut o = Outstanding::default();
        let t0 = Instant::now();
        let (a, b) = (o.send(t0), o.send(t0));
        assert_eq!((a, b), (1, 2));
        assert_eq!(o.len(), 2);
        let later = t0 + Duration::from_millis(3);
        assert_eq!(o.answer(b, later).ok(), Some(Duration::from_millis(3)));
        assert!(o.answer(b, later).is_err(), "answered twice");
        assert!(o.answer(5, later).is_err(), "never sent");
        assert!(o.answer(0, later).is_err(), "the handshake's id");
        assert!(o.answer(a, later).is_ok());
        assert_eq!(o.len(), 0);
    }
}
