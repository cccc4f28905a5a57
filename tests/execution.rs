//! Supervised execution (`[exec]`) with real processes: output order and separation,
//! limits (wall time, SIGTERM ignored, fork bomb, memory, output), large and binary
//! output, resume mid-execution, polling, cancel, and no process left behind.

mod common;

use std::time::Duration;

use base64::Engine as _;
use common::{Client, SseReader, TestServer, eventually, within};
use otpmcp::config::{Config, ProgramConfig};
use otpmcp::exec::process::group_alive;
use serde_json::{Value, json};

const PYTHON: &str = "/usr/bin/python3";

fn python(tweak: impl FnOnce(&mut ProgramConfig)) -> ProgramConfig {
    let mut p = ProgramConfig {
        command: vec![PYTHON.into(), "-c".into()],
        shell: true,
        wall_time: Duration::from_secs(20),
        ..ProgramConfig::default()
    };
    tweak(&mut p);
    p
}

fn exec_on(c: &mut Config) {
    c.exec.enabled = true;
    c.exec.kill_grace = Duration::from_millis(300);
    c.exec.heartbeat = Duration::from_millis(200);
    c.exec.poll_interval = Duration::from_millis(20);
    let programs = &mut c.exec.programs;
    programs.insert("python".into(), python(|_| {}));
    // RLIMIT_NPROC is not enforced for root: the bomb runs as nobody.
    programs.insert(
        "bomb".into(),
        python(|p| {
            p.uid = Some(65534);
            p.processes = 24;
            p.wall_time = Duration::from_secs(2);
        }),
    );
    programs.insert(
        "small".into(),
        python(|p| {
            p.memory_bytes = 256 << 20;
            p.output_bytes = 1 << 20;
        }),
    );
}

async fn server() -> (TestServer, Client) {
    let server = TestServer::start(exec_on).await;
    let mut client = server.client();
    client.initialize().await;
    (server, client)
}

/// What one `execute` sent: its notifications and its response.
#[derive(Debug, Default)]
struct Run {
    id: Option<String>,
    chunks: Vec<Value>,
    response: Option<Value>,
    last_event: Option<String>,
}

impl Run {
    fn add(&mut self, frame: &common::Frame) {
        if frame.id.is_some() {
            self.last_event = frame.id.clone();
        }
        let Some(message) = frame.json() else { return };
        match message["method"].as_str() {
            Some("notifications/otpmcp/execution_started") => {
                self.id = message["params"]["executionId"].as_str().map(str::to_owned);
            }
            Some("notifications/otpmcp/execution_output") => {
                self.chunks.push(message["params"].clone());
            }
            _ if frame.is_response() => self.response = Some(message),
            _ => {}
        }
    }

    async fn read(&mut self, reader: &mut SseReader) {
        for frame in within("the execution to end", reader.rest()).await {
            self.add(&frame);
        }
    }

    fn result(&self) -> &Value {
        match &self.response {
            Some(r) => &r["result"]["structuredContent"],
            None => panic!("no response after {} chunks", self.chunks.len()),
        }
    }

    /// The bytes of `stream`, chunk after chunk.
    fn bytes(&self, stream: &str) -> Vec<u8> {
        self.chunks
            .iter()
            .filter(|c| c["stream"] == stream)
            .flat_map(chunk_bytes)
            .collect()
    }
}

fn chunk_bytes(chunk: &Value) -> Vec<u8> {
    match (chunk["text"].as_str(), chunk["base64"].as_str()) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap_or_else(|e| panic!("bad base64: {e}")),
        _ => panic!("a chunk without bytes: {chunk}"),
    }
}

async fn execute(client: &Client, program: &str, code: &str, extra: Value) -> Run {
    let mut args = json!({"program": program, "args": [code]});
    if let (Some(args), Some(extra)) = (args.as_object_mut(), extra.as_object()) {
        args.extend(extra.clone());
    }
    let mut reader = client.call_stream("execute", args, None).await;
    let mut run = Run::default();
    run.read(&mut reader).await;
    // A connection the server cut (a slow reader) is resumed, as clients do.
    while run.response.is_none() {
        let last = run
            .last_event
            .clone()
            .unwrap_or_else(|| panic!("no event id"));
        run.read(&mut client.resume(&last).await).await;
    }
    run
}

async fn tool(client: &Client, name: &str, args: Value) -> Value {
    let answer = client
        .ask("tools/call", json!({"name": name, "arguments": args}))
        .await;
    answer["result"].clone()
}

/// Waits until no process of group `pgid` is left.
async fn no_survivors(pgid: i32) {
    eventually("the process group to be gone", || async move {
        (!group_alive(pgid)).then_some(())
    })
    .await;
}

fn first_line_pid(run: &Run) -> i32 {
    let out = String::from_utf8_lossy(&run.bytes("stdout")).into_owned();
    out.lines()
        .next()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid first: {out:?}"))
}

/// Each write waits until the server has read the one before (FIONREAD on the pipe is
/// 0), so the order of chunks must be the order of writes, across both streams.
const ALTERNATE: &str = r#"
import fcntl, os, struct, termios
def drained(fd):
    while struct.unpack('i', fcntl.ioctl(fd, termios.FIONREAD, b'\0\0\0\0'))[0]:
        pass
for i in range(8):
    fd = 1 if i % 2 == 0 else 2
    os.write(fd, f"line{i}\n".encode())
    drained(fd)
"#;

#[tokio::test]
async fn output_is_ordered_across_streams_and_kept_apart() {
    let (server, client) = server().await;
    let run = execute(&client, "python", ALTERNATE, json!({})).await;
    let order = run
        .chunks
        .iter()
        .map(|c| {
            (
                c["seq"].as_u64().unwrap_or(0),
                c["stream"].as_str().unwrap_or("").to_owned(),
                String::from_utf8_lossy(&chunk_bytes(c)).into_owned(),
            )
        })
        .collect::<Vec<_>>();
    let expected = (0..8)
        .map(|i| {
            (
                i as u64 + 1,
                if i % 2 == 0 { "stdout" } else { "stderr" }.to_owned(),
                format!("line{i}\n"),
            )
        })
        .collect::<Vec<_>>();
    assert_eq!(order, expected);
    let result = run.result();
    assert_eq!(result["status"], "exited");
    assert_eq!(result["exitCode"], 0);
    assert_eq!(result["stdout"], "line0\nline2\nline4\nline6\n");
    assert_eq!(result["stderr"], "line1\nline3\nline5\nline7\n");
    assert_eq!(result["chunks"], 8);
    assert!(
        result["usage"]["maxRssKb"].as_u64().unwrap_or(0) > 0,
        "{result}"
    );

    // The log holds the same chunks with the same ids, readable by another session.
    let mut other = server.client();
    other.initialize().await;
    let id = run.id.clone().unwrap_or_else(|| panic!("no execution id"));
    let page = tool(&other, "get_execution_output", json!({"execution_id": id})).await;
    let page = &page["structuredContent"];
    assert_eq!(page["status"], "exited");
    assert_eq!(page["outcome"]["exitCode"], 0);
    let ids = |chunks: &[Value]| chunks.iter().map(|c| c["id"].clone()).collect::<Vec<_>>();
    let logged = page["chunks"].as_array().cloned().unwrap_or_default();
    assert_eq!(ids(&logged), ids(&run.chunks));
    // After the fourth chunk: the last four.
    let after = run.chunks[3]["id"].as_str().unwrap_or_default();
    let page = tool(
        &other,
        "get_execution_output",
        json!({"execution_id": id, "last_event_id": after}),
    )
    .await;
    let rest = page["structuredContent"]["chunks"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(ids(&rest), ids(&run.chunks[4..]));
    server.shutdown().await;
}

#[tokio::test]
async fn a_program_that_ignores_sigterm_is_killed_and_keeps_its_partial_output() {
    let (server, client) = server().await;
    let code = "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint(os.getpid(), flush=True)\nprint('partial', flush=True)\nwhile True: time.sleep(1)";
    let run = execute(&client, "python", code, json!({"timeout_ms": 500})).await;
    let result = run.result();
    assert_eq!(result["status"], "timeout", "{result}");
    assert_eq!(
        result["signal"], 9,
        "SIGKILL after the grace period: {result}"
    );
    assert!(
        result["stdout"].as_str().unwrap_or("").contains("partial"),
        "{result}"
    );
    no_survivors(first_line_pid(&run)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_fork_bomb_is_held_by_the_process_limit_and_leaves_nothing() {
    let (server, client) = server().await;
    let code = "import os, sys\nprint(os.getpid(), flush=True)\nsaid = False\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        if not said:\n            said = True\n            sys.stderr.write('limited\\n'); sys.stderr.flush()";
    let run = execute(&client, "bomb", code, json!({})).await;
    let result = run.result();
    assert_eq!(result["status"], "timeout", "{result}");
    let stderr = String::from_utf8_lossy(&run.bytes("stderr")).into_owned();
    assert!(stderr.contains("limited"), "fork was refused: {stderr:?}");
    no_survivors(first_line_pid(&run)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_memory_hog_is_stopped_by_its_limit() {
    let (server, client) = server().await;
    let run = execute(&client, "small", "b = bytearray(1 << 30)", json!({})).await;
    let result = run.result();
    assert_eq!(result["status"], "exited", "{result}");
    assert_eq!(result["exitCode"], 1, "{result}");
    assert!(
        result["stderr"]
            .as_str()
            .unwrap_or("")
            .contains("MemoryError"),
        "{result}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn large_binary_output_arrives_whole_in_bounded_chunks() {
    let (server, client) = server().await;
    let size = 3 << 20;
    let code = format!("import sys\nsys.stdout.buffer.write(bytes(range(256)) * ({size} // 256))");
    let run = execute(&client, "python", &code, json!({})).await;
    let result = run.result();
    assert_eq!(result["status"], "exited", "{result}");
    assert_eq!(result["stdoutBytes"], size);
    let expected = (0..size).map(|i| (i % 256) as u8).collect::<Vec<_>>();
    assert_eq!(run.bytes("stdout"), expected);
    assert!(run.chunks.iter().all(|c| chunk_bytes(c).len() <= 16 * 1024));
    assert!(
        run.chunks.iter().any(|c| c.get("base64").is_some()),
        "binary goes as base64"
    );

    // Past output_bytes the execution stops, marked truncated, with exactly the limit kept.
    let code = format!("import sys\nsys.stdout.write('y' * {size})");
    let run = execute(&client, "small", &code, json!({})).await;
    let result = run.result();
    assert_eq!(result["status"], "output_limit", "{result}");
    assert_eq!(result["truncated"], true);
    assert_eq!(run.bytes("stdout").len(), 1 << 20);
    server.shutdown().await;
}

#[tokio::test]
async fn a_dropped_connection_resumes_mid_execution_with_nothing_lost_or_twice() {
    let (server, client) = server().await;
    let code =
        "import time\nfor i in range(40):\n    print(f'line{i}', flush=True)\n    time.sleep(0.01)";
    let args = json!({"program": "python", "args": [code]});
    let mut reader = client.call_stream("execute", args, None).await;
    let mut run = Run::default();
    while run.chunks.len() < 5 {
        let frame = within("a chunk", reader.next()).await;
        run.add(&frame.unwrap_or_else(|| panic!("ended early")));
    }
    drop(reader);
    let last = run
        .last_event
        .clone()
        .unwrap_or_else(|| panic!("no event id"));
    let mut resumed = client.resume(&last).await;
    run.read(&mut resumed).await;
    let seqs = run
        .chunks
        .iter()
        .map(|c| c["seq"].as_u64().unwrap_or(0))
        .collect::<Vec<_>>();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "every chunk once, in order"
    );
    let expected = (0..40).map(|i| format!("line{i}\n")).collect::<String>();
    assert_eq!(String::from_utf8_lossy(&run.bytes("stdout")), expected);
    assert_eq!(run.result()["status"], "exited");
    server.shutdown().await;
}

#[tokio::test]
async fn polling_follows_a_running_execution_and_errors_say_how_to_recover() {
    let (server, client) = server().await;
    let code =
        "import time\nfor i in range(20):\n    print(f'line{i}', flush=True)\n    time.sleep(0.02)";
    let args = json!({"program": "python", "args": [code]});
    let mut reader = client.call_stream("execute", args, None).await;
    let mut run = Run::default();
    while run.id.is_none() {
        let frame = within("the start", reader.next()).await;
        run.add(&frame.unwrap_or_else(|| panic!("ended early")));
    }
    let id = run.id.clone().unwrap_or_default();
    let mut other = server.client();
    other.initialize().await;
    let mut text = Vec::new();
    let mut next = Value::Null;
    let status = loop {
        let mut args = json!({"execution_id": id, "wait_ms": 5000});
        if !next.is_null() {
            args["last_event_id"] = next.clone();
        }
        let answer = tool(&other, "get_execution_output", args).await;
        let page = answer["structuredContent"].clone();
        assert!(page.is_object(), "{answer}");
        for chunk in page["chunks"].as_array().cloned().unwrap_or_default() {
            text.extend(chunk_bytes(&chunk));
        }
        next = page["next"].clone();
        if page["status"] != "running" {
            break page["status"].clone();
        }
    };
    assert_eq!(status, "exited");
    let expected = (0..20).map(|i| format!("line{i}\n")).collect::<String>();
    assert_eq!(String::from_utf8_lossy(&text), expected);
    run.read(&mut reader).await;

    let unknown = tool(
        &other,
        "get_execution_output",
        json!({"execution_id": "0123456789abcdef0123456789abcdef"}),
    )
    .await;
    assert_eq!(unknown["isError"], true);
    assert!(
        unknown["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("unknown execution"),
        "{unknown}"
    );
    let foreign = tool(
        &other,
        "get_execution_output",
        json!({"execution_id": id, "last_event_id": "00000000-1-1"}),
    )
    .await;
    assert_eq!(foreign["isError"], true);
    assert!(
        foreign["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("omit last_event_id"),
        "{foreign}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn cancel_and_list_and_a_deleted_session_kill_the_group() {
    let (server, client) = server().await;
    let code = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)";
    let args = json!({"program": "python", "args": [code]});
    let mut reader = client.call_stream("execute", args.clone(), None).await;
    let mut run = Run::default();
    while run.chunks.is_empty() {
        let frame = within("the pid", reader.next()).await;
        run.add(&frame.unwrap_or_else(|| panic!("ended early")));
    }
    let id = run.id.clone().unwrap_or_default();
    let listed = tool(&client, "list_executions", json!({})).await;
    assert_eq!(
        listed["structuredContent"]["executions"][0]["executionId"],
        id.as_str()
    );
    assert_eq!(
        listed["structuredContent"]["executions"][0]["status"],
        "running"
    );
    let cancelled = tool(&client, "cancel_execution", json!({"execution_id": id})).await;
    assert_eq!(
        cancelled["structuredContent"]["cancelled"], true,
        "{cancelled}"
    );
    run.read(&mut reader).await;
    assert_eq!(run.result()["status"], "cancelled");
    no_survivors(first_line_pid(&run)).await;

    // The session ends mid-execution: the request is dropped, and the group with it.
    let mut reader = client.call_stream("execute", args, None).await;
    let mut run = Run::default();
    while run.chunks.is_empty() {
        let frame = within("the pid", reader.next()).await;
        run.add(&frame.unwrap_or_else(|| panic!("ended early")));
    }
    let resp = Client::send(client.delete()).await;
    assert!(resp.status().is_success());
    no_survivors(first_line_pid(&run)).await;
    server.shutdown().await;
}

#[tokio::test]
async fn bad_calls_get_clear_errors() {
    let (server, client) = server().await;
    let answer = client
        .ask("tools/call", json!({"name": "execute", "arguments": {"program": "python", "args": ["1"], "timeout_ms": 999999}}))
        .await;
    assert_eq!(answer["error"]["code"], -32602, "{answer}");
    let unknown = tool(&client, "execute", json!({"program": "bash"})).await;
    assert_eq!(unknown["isError"], true);
    assert!(
        unknown["content"][0]["text"]
            .as_str()
            .unwrap_or("")
            .contains("no program named `bash`")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_shell_needs_saying_so() {
    let mut config = common::test_config();
    exec_on(&mut config);
    config.exec.programs.insert(
        "sh".into(),
        ProgramConfig {
            command: vec!["/bin/sh".into(), "-c".into()],
            ..ProgramConfig::default()
        },
    );
    let error = config
        .validate()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(error.contains("shell = true"), "{error}");
    if let Some(sh) = config.exec.programs.get_mut("sh") {
        sh.shell = true;
    }
    assert!(config.validate().is_ok());
}

/// A 2026-07-28 client that declares the tasks extension gets a task; the output is
/// read with get_execution_output, the outcome with tasks/get.
#[tokio::test]
async fn an_execution_runs_as_a_durable_task() {
    let server = TestServer::start(exec_on).await;
    let client = common::stateless::Stateless::new(&server.url).with_tasks();
    let code = "for i in range(3): print(f'line{i}')";
    let id = client
        .start_task("execute", json!({"program": "python", "args": [code]}))
        .await;
    let done = client.until_status(&id, "completed").await;
    let outcome = &done["result"]["structuredContent"];
    assert_eq!(outcome["status"], "exited", "{done}");
    assert_eq!(outcome["stdout"], "line0\nline1\nline2\n");
    let execution = outcome["executionId"].as_str().unwrap_or_default();
    let page = client
        .ask(
            "tools/call",
            json!({"name": "get_execution_output", "arguments": {"execution_id": execution}}),
        )
        .await;
    let chunks = page.result()["structuredContent"]["chunks"].clone();
    let text = chunks
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|c| c["text"].as_str())
                .collect::<String>()
        })
        .unwrap_or_default();
    assert_eq!(text, "line0\nline1\nline2\n", "{chunks}");
    server.shutdown().await;
}

/// With `[auth]`, an execution is its principal's: readable and listed from another of
/// its sessions, unknown to anyone else, who cannot cancel it either.
#[tokio::test]
async fn with_auth_an_execution_is_its_principals_only() {
    let issuer = common::issuer::Issuer::start().await;
    let audience = "http://mcp.test/mcp";
    let url = issuer.url.clone();
    let server = TestServer::start(move |c| {
        exec_on(c);
        for program in c.exec.programs.values_mut() {
            program.run_as_server_user = true;
        }
        c.auth.enabled = true;
        c.auth.issuer = url;
        c.auth.audience = audience.into();
    })
    .await;
    let session = |sub: &str| {
        let client = Client::new(&server.url).with_token(&issuer.token(audience, sub, "mcp"));
        async move {
            let mut client = client;
            client.initialize().await;
            client
        }
    };
    let alice = session("alice").await;
    let code =
        "import time\nprint('first', flush=True)\ntime.sleep(0.5)\nprint('second', flush=True)";
    let args = json!({"program": "python", "args": [code]});
    let mut reader = alice.call_stream("execute", args, None).await;
    let mut run = Run::default();
    while run.chunks.is_empty() {
        let frame = within("the first chunk", reader.next()).await;
        run.add(&frame.unwrap_or_else(|| panic!("ended early")));
    }
    let id = run.id.clone().unwrap_or_default();

    let again = session("alice").await;
    let page = tool(&again, "get_execution_output", json!({"execution_id": id})).await;
    assert_eq!(
        page["structuredContent"]["chunks"][0]["text"], "first\n",
        "{page}"
    );
    let listed = tool(&again, "list_executions", json!({})).await;
    assert_eq!(
        listed["structuredContent"]["executions"][0]["executionId"],
        id.as_str()
    );

    let bob = session("bob").await;
    for (name, args) in [
        ("get_execution_output", json!({"execution_id": id})),
        ("cancel_execution", json!({"execution_id": id})),
    ] {
        let answer = tool(&bob, name, args).await;
        assert_eq!(answer["isError"], true, "{name}: {answer}");
        let text = answer["content"][0]["text"].as_str().unwrap_or_default();
        assert!(text.contains("unknown execution"), "{name}: {text}");
    }
    let listed = tool(&bob, "list_executions", json!({})).await;
    assert_eq!(listed["structuredContent"]["executions"], json!([]));
    run.read(&mut reader).await;
    assert_eq!(run.result()["status"], "exited", "not cancelled by bob");
    server.shutdown().await;
}
