//! Shared test fixtures: a real server on a free loopback port, and a small MCP client
//! over real HTTP that reads SSE frames as they arrive.
#![allow(
    dead_code,
    unreachable_pub,
    missing_docs,
    unused_macros,
    unused_imports
)]

use otpmcp::config::NonZeroDuration;
use std::future::Future;
use std::time::Duration;

use otpmcp::config::Config;
use otpmcp::session::SessionId;
use otpmcp::{App, McpServer};
use serde_json::{Value, json};

pub mod anthropic;
pub mod hosts;
pub mod issuer;
pub mod nginx;
pub mod outage;
pub mod redis;
pub mod relay;
pub mod responses;
pub mod rolling;
pub mod stateless;
pub mod stdio;

/// Longest any single wait in a test may take before the test fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Configuration for tests: port 0 on loopback, short timers.
pub fn test_config() -> Config {
    let mut c = Config::default();
    c.server.bind = "127.0.0.1:0".parse().unwrap_or(c.server.bind);
    c.server.shutdown_timeout = Duration::from_secs(2);
    c.sse.keepalive_interval = NonZeroDuration::from_secs(5);
    c.sse.retry_timeout = Duration::from_millis(100);
    c.sse.cleanup_interval = NonZeroDuration::from_millis(50);
    c.supervisor.max_restarts = 5;
    c.supervisor.max_window = NonZeroDuration::from_secs(10);
    c
}

/// Turns the admin listener on, on a free loopback port.
pub fn admin_on(c: &mut Config) {
    c.admin.enabled = true;
    c.admin.bind = "127.0.0.1:0".parse().unwrap_or(c.admin.bind);
}

/// An SSE stream at `url` (resumed after `last_event_id`), which must answer 200 with
/// `text/event-stream`.
pub async fn sse_get(url: &str, last_event_id: Option<&str>) -> SseReader {
    let mut req = reqwest::Client::new()
        .get(url)
        .header("accept", "text/event-stream");
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id);
    }
    let resp = within("an SSE stream", req.send())
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    assert_eq!(resp.status(), 200, "GET {url}");
    sse_reader(resp)
}

/// Reads `resp`, which must be an SSE stream.
pub fn sse_reader(resp: reqwest::Response) -> SseReader {
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("text/event-stream")
    );
    SseReader::new(resp)
}

/// A running server.
pub struct TestServer {
    pub app: App,
    pub url: String,
}

impl TestServer {
    /// Starts the default server with `tweak` applied to [`test_config`].
    pub async fn start(tweak: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(tweak, McpServer::default()).await
    }

    pub async fn start_with(tweak: impl FnOnce(&mut Config), server: McpServer) -> Self {
        let mut config = test_config();
        tweak(&mut config);
        let app = otpmcp::start_with(config, server)
            .await
            .unwrap_or_else(|e| panic!("server did not start: {e}"));
        let url = app.url();
        Self { app, url }
    }

    pub fn client(&self) -> Client {
        Client::new(&self.url)
    }

    /// The URL of `path` on the admin listener, which must be on.
    pub fn admin_url(&self, path: &str) -> String {
        let Some(admin) = self.app.admin_addr() else {
            panic!("the admin listener is on");
        };
        format!("http://{admin}{path}")
    }

    pub async fn shutdown(self) {
        self.app.shutdown().await;
    }
}

/// Runs `fut` with the test-wide timeout.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out waiting for {what}"),
    }
}

/// Polls `check` until it returns `Some`, or fails the test after [`WAIT`]. For waiting on
/// state that has no event to await (expiry, a restart having happened).
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    within(what, async {
        loop {
            if let Some(v) = check().await {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
}

impl TestServer {
    /// Waits until POST stream `stream` of `session` has stored its response, which is
    /// event `count + 1` after `count` progress notifications.
    pub async fn wait_for_response_stored(&self, session: SessionId, stream: u64, count: u64) {
        eventually("the call to store its response", || async {
            let info = self.app.session_info(session).await.ok()?;
            info.last_event
                .iter()
                .any(|(s, last)| s.0 == stream && *last == count + 1)
                .then_some(())
        })
        .await;
    }
}

/// The real `otpmcp` binary, started with `config/test.toml` (a free port) plus `args`
/// and `env`, with its URL read from the line it prints.
pub struct Binary {
    pub child: std::process::Child,
    pub url: String,
}

impl Binary {
    pub async fn start(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(args, env, std::process::Stdio::null()).await
    }

    /// Like [`Binary::start`], with its stderr (the log) readable at `child.stderr`.
    pub async fn start_logging(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::spawn(args, env, std::process::Stdio::piped()).await
    }

    async fn spawn(args: &[&str], env: &[(&str, &str)], stderr: std::process::Stdio) -> Self {
        let program = std::path::Path::new(env!("CARGO_BIN_EXE_otpmcp"));
        let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/test.toml");
        Self::launch(program, std::path::Path::new(config), args, env, stderr).await
    }

    /// Another build's binary at `program`, started as [`Binary::start`] starts this
    /// build's, with `test_config` (that build's `config/test.toml`) first and its log
    /// (stderr) to `stderr`.
    pub async fn launch(
        program: &std::path::Path,
        test_config: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: std::process::Stdio,
    ) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new(program)
            .arg("--config")
            .arg(test_config)
            .args(args)
            .envs(env.iter().copied())
            .current_dir(std::env::temp_dir())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn: {e}"));
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let line = within(
            "the URL line",
            tokio::task::spawn_blocking(move || {
                let mut line = String::new();
                let _ = std::io::BufReader::new(stdout).read_line(&mut line);
                line
            }),
        )
        .await
        .unwrap_or_default();
        let url = line
            .trim()
            .strip_prefix("otpmcp serving MCP at ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .to_owned();
        Self { child, url }
    }

    /// Sends SIGTERM and returns the exit code.
    pub async fn terminate(mut self) -> Option<i32> {
        assert!(
            sigterm(self.child.id()),
            "kill: {}",
            std::io::Error::last_os_error()
        );
        within(
            "the process to exit",
            tokio::task::spawn_blocking(move || self.child.wait()),
        )
        .await
        .ok()
        .and_then(|r| r.ok())
        .and_then(|s| s.code())
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        stop(&mut self.child);
    }
}

/// Sends SIGTERM to `pid` (with kill(2): the `kill` program is procps', which a minimal
/// system may lack); whether it was sent.
#[allow(unsafe_code)]
pub fn sigterm(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: kill takes a pid and a signal number, and touches no memory of ours.
    unsafe { libc::kill(pid, libc::SIGTERM) == 0 }
}

/// Stops a child process as an operator would: SIGTERM, then SIGKILL if it has not
/// exited within five seconds. A clean exit is also what lets an instrumented build
/// (`scripts/coverage`) write the profile of what the process ran.
pub fn stop(child: &mut std::process::Child) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    let _ = sigterm(child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    // Polls the exit (a blocking wait could not give up); the deadline bounds it.
    while std::time::Instant::now() < deadline {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One SSE frame as a client sees it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Frame {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
    pub retry: Option<u64>,
    pub comment: Option<String>,
}

impl Frame {
    pub fn json(&self) -> Option<Value> {
        serde_json::from_str(self.data.as_deref()?).ok()
    }

    /// The `progress` of a progress notification.
    pub fn progress(&self) -> Option<u64> {
        let v = self.json()?;
        (v["method"] == "notifications/progress").then(|| v["params"]["progress"].as_u64())?
    }

    /// True for the JSON-RPC response (has an id and a result or error).
    pub fn is_response(&self) -> bool {
        self.json().is_some_and(|v| {
            v.get("id").is_some() && (v.get("result").is_some() || v.get("error").is_some())
        })
    }

    /// True for the priming frame (id, empty data).
    pub fn is_priming(&self) -> bool {
        self.data.as_deref() == Some("") && self.event.is_none()
    }
}

/// Reads SSE frames from a streaming HTTP response.
pub struct SseReader {
    resp: reqwest::Response,
    buf: String,
    pub last_id: Option<String>,
}

impl SseReader {
    pub fn new(resp: reqwest::Response) -> Self {
        Self {
            resp,
            buf: String::new(),
            last_id: None,
        }
    }

    /// The next frame, or `None` at end of stream.
    pub async fn next(&mut self) -> Option<Frame> {
        within("an SSE frame", async {
            loop {
                if let Some(end) = self.buf.find("\n\n") {
                    let block: String = self.buf.drain(..end + 2).collect();
                    let frame = parse_block(&block);
                    if let Some(id) = &frame.id {
                        self.last_id = Some(id.clone());
                    }
                    return Some(frame);
                }
                match self.resp.chunk().await {
                    Ok(Some(bytes)) => self.buf.push_str(&String::from_utf8_lossy(&bytes)),
                    Ok(None) | Err(_) => return None,
                }
            }
        })
        .await
    }

    /// The next frame that is not a comment.
    pub async fn next_event(&mut self) -> Option<Frame> {
        loop {
            let f = self.next().await?;
            if f.comment.is_none() {
                return Some(f);
            }
        }
    }

    /// The next non-comment frame's JSON (`Null` at the end of the stream).
    pub async fn next_json(&mut self) -> Value {
        self.next_event()
            .await
            .and_then(|f| f.json())
            .unwrap_or_default()
    }

    /// Reads to the end of the stream.
    pub async fn rest(&mut self) -> Vec<Frame> {
        let mut out = Vec::new();
        while let Some(f) = self.next().await {
            out.push(f);
        }
        out
    }
}

fn parse_block(block: &str) -> Frame {
    let mut f = Frame::default();
    for line in block.lines() {
        if let Some(c) = line.strip_prefix(':') {
            f.comment = Some(c.trim().to_owned());
            continue;
        }
        let (field, value) = match line.split_once(':') {
            Some((k, v)) => (k, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "id" => f.id = Some(value.to_owned()),
            "event" => f.event = Some(value.to_owned()),
            "retry" => f.retry = value.parse().ok(),
            "data" => {
                f.data = Some(match f.data.take() {
                    Some(prev) => format!("{prev}\n{value}"),
                    None => value.to_owned(),
                })
            }
            _ => {}
        }
    }
    f
}

/// An HTTP client that sends `Authorization: Bearer <token>` on every request.
pub fn bearer_client(token: &str) -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Ok(value) = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap_or_default()
}

/// A minimal MCP client over reqwest.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    /// The protocol revision this client asks for and then announces in its headers.
    pub version: String,
    next_id: std::sync::Arc<std::sync::atomic::AtomicI64>,
}

pub const ACCEPT_BOTH: &str = "application/json, text/event-stream";

impl Client {
    pub fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            version: "2025-11-25".into(),
            next_id: Default::default(),
        }
    }

    /// The same client sending `Authorization: Bearer <token>` on every request.
    pub fn with_token(mut self, token: &str) -> Self {
        self.http = bearer_client(token);
        self
    }

    pub fn id(&self) -> i64 {
        self.next_id
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1
    }

    pub fn session_id(&self) -> SessionId {
        self.session
            .as_deref()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no session"))
    }

    /// A POST with the headers a well-behaved client sends.
    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", ACCEPT_BOTH)
            .body(body.to_string());
        if let Some(s) = &self.session {
            req = req
                .header("mcp-session-id", s)
                .header("mcp-protocol-version", &self.version);
        }
        req
    }

    /// DELETE of the session.
    pub fn delete(&self) -> reqwest::RequestBuilder {
        let mut req = self.http.delete(&self.url);
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        req
    }

    /// A GET of the standalone stream, or a resume from `last_event_id`.
    pub fn get(&self, last_event_id: Option<&str>) -> reqwest::RequestBuilder {
        let mut req = self
            .http
            .get(&self.url)
            .header("accept", "text/event-stream");
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s);
        }
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        req
    }

    pub async fn send(req: reqwest::RequestBuilder) -> reqwest::Response {
        within("an HTTP response", req.send())
            .await
            .unwrap_or_else(|e| panic!("request failed: {e}"))
    }

    /// `initialize` + `notifications/initialized`; remembers the session.
    pub async fn initialize(&mut self) -> Value {
        self.initialize_with(json!({})).await
    }

    /// [`Client::initialize`], declaring `capabilities`.
    pub async fn initialize_with(&mut self, capabilities: Value) -> Value {
        let body = json!({
            "jsonrpc": "2.0", "id": self.id(), "method": "initialize",
            "params": {
                "protocolVersion": self.version,
                "capabilities": capabilities,
                "clientInfo": {"name": "otpmcp-tests", "version": "0"}
            }
        });
        let resp = Self::send(self.post(&body)).await;
        assert_eq!(resp.status(), 200, "initialize");
        let session = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        assert!(session.is_some(), "initialize returns Mcp-Session-Id");
        self.session = session;
        let result: Value =
            serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let resp = Self::send(self.post(&note)).await;
        assert_eq!(resp.status(), 202, "notifications/initialized");
        result
    }

    /// Sends request `method` and returns the JSON-RPC response read from its stream
    /// (`Null` if none came).
    pub async fn ask(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": self.id(), "method": method, "params": params});
        let mut reader = SseReader::new(Self::send(self.post(&body)).await);
        let frames = reader.rest().await;
        frames
            .iter()
            .find(|f| f.is_response())
            .and_then(|f| f.json())
            .unwrap_or_default()
    }

    /// Starts `tools/call` and returns its SSE stream.
    pub async fn call_stream(&self, tool: &str, args: Value, token: Option<&str>) -> SseReader {
        let mut params = json!({"name": tool, "arguments": args});
        if let Some(t) = token {
            params["_meta"] = json!({"progressToken": t});
        }
        let body =
            json!({"jsonrpc": "2.0", "id": self.id(), "method": "tools/call", "params": params});
        let resp = Self::send(self.post(&body)).await;
        assert_eq!(resp.status(), 200, "tools/call");
        sse_reader(resp)
    }

    /// `tools/call echo(text)`, checking that `text` comes back.
    pub async fn echo(&self, text: &str) {
        let answer = self
            .ask(
                "tools/call",
                json!({"name": "echo", "arguments": {"text": text}}),
            )
            .await;
        assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
    }

    /// Resumes with GET and `Last-Event-ID`, expecting 200.
    pub async fn resume(&self, last_event_id: &str) -> SseReader {
        let resp = Self::send(self.get(Some(last_event_id))).await;
        assert_eq!(resp.status(), 200, "resume with {last_event_id}");
        SseReader::new(resp)
    }
}

/// Collects a tool call's frames across disconnects: progress values, the response.
#[derive(Debug, Default)]
pub struct Transcript {
    pub progress: Vec<u64>,
    pub response: Option<Value>,
    pub ids: Vec<String>,
    /// Log messages (`notifications/message` data), each with how many progress values
    /// had arrived before it.
    pub notes: Vec<(usize, String)>,
}

impl Transcript {
    /// Adds a frame; returns true once the response arrived.
    pub fn add(&mut self, f: &Frame) -> bool {
        if f.is_priming() || f.comment.is_some() || f.data.is_none() {
            return false;
        }
        if let Some(id) = &f.id {
            self.ids.push(id.clone());
        }
        if let Some(p) = f.progress() {
            self.progress.push(p);
        }
        if let Some(v) = f.json().filter(|v| v["method"] == "notifications/message") {
            let text = v["params"]["data"].as_str().unwrap_or_default().to_owned();
            self.notes.push((self.progress.len(), text));
        }
        if f.is_response() {
            self.response = f.json();
            return true;
        }
        false
    }

    /// Adds what `reader` gives until the response; false if the stream ended first
    /// (cut, or closed for polling: the caller resumes).
    pub async fn read_to_response(&mut self, reader: &mut SseReader) -> bool {
        while let Some(f) = reader.next_event().await {
            if self.add(&f) {
                return true;
            }
        }
        false
    }

    /// The progress values of each run, split at the handover notes (`note`): one run
    /// when the call was never handed on.
    pub fn runs(&self, note: &str) -> Vec<&[u64]> {
        let mut runs = Vec::new();
        let mut from = 0;
        for (at, _) in self.notes.iter().filter(|(_, text)| text == note) {
            runs.push(&self.progress[from..*at]);
            from = *at;
        }
        runs.push(&self.progress[from..]);
        runs
    }

    /// Checks that the progress values are 1, 2, ... each once, in order; their count.
    pub fn assert_exact_prefix(&self) -> u64 {
        let n = self.progress.len() as u64;
        let expected: Vec<u64> = (1..=n).collect();
        assert_eq!(self.progress, expected, "every event once, in order");
        n
    }

    /// Checks that each run of a call is exact: the ones a handover ended a clean prefix
    /// (1, 2, ...), the last one `1..=events`.
    pub fn assert_runs(&self, note: &str, events: u64) {
        let runs = self.runs(note);
        for (i, run) in runs.iter().enumerate() {
            let n = if i + 1 == runs.len() {
                events
            } else {
                run.len() as u64
            };
            assert_eq!(
                run.to_vec(),
                (1..=n).collect::<Vec<u64>>(),
                "run {i} of {}",
                runs.len()
            );
        }
    }

    pub fn result_text(&self) -> Option<String> {
        self.response.as_ref()?["result"]["content"][0]["text"]
            .as_str()
            .map(str::to_owned)
    }
}

/// A client connection that reads only when told to: a raw socket with a small receive
/// buffer, so the server sees a slow consumer (reqwest would buffer megabytes).
pub struct SlowSocket {
    stream: tokio::net::TcpStream,
    raw: Vec<u8>,
}

/// A connection to the server at `url` with a 4 KiB receive buffer, so that what the
/// client does not read stays with the server, and the server's address.
pub async fn small_socket(url: &str) -> (tokio::net::TcpStream, std::net::SocketAddr) {
    let addr: std::net::SocketAddr = url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("bad url {url}"));
    let socket = tokio::net::TcpSocket::new_v4().unwrap_or_else(|e| panic!("{e}"));
    socket
        .set_recv_buffer_size(4096)
        .unwrap_or_else(|e| panic!("{e}"));
    let stream = within("connect", socket.connect(addr))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    (stream, addr)
}

impl SlowSocket {
    /// Connects and sends `body` as an MCP POST; reads nothing yet.
    pub async fn post(url: &str, session: &str, body: &Value) -> Self {
        use tokio::io::AsyncWriteExt;
        let (mut stream, addr) = small_socket(url).await;
        let body = body.to_string();
        let request = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: {ACCEPT_BOTH}\r\nmcp-session-id: {session}\r\n\
             content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self {
            stream,
            raw: Vec::new(),
        }
    }

    /// Reads until EOF or a reset, returning the raw bytes (status line, headers, body).
    pub async fn raw(mut self) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 65536];
        within("the slow response", async {
            loop {
                match self.stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.raw.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        self.raw
    }

    /// Reads to EOF and returns the SSE frames of the (chunked) body.
    pub async fn frames(mut self) -> Vec<Frame> {
        use tokio::io::AsyncReadExt;
        within("the slow response", self.stream.read_to_end(&mut self.raw))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8_lossy(&self.raw).into_owned();
        let (head, mut rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        assert!(head.starts_with("HTTP/1.1 200"), "status line: {head}");
        let mut body = String::new();
        while let Some((size, after)) = rest.split_once("\r\n") {
            let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
                break;
            };
            if n == 0 || after.len() < n {
                break;
            }
            body.push_str(&after[..n]);
            rest = after[n..].trim_start_matches("\r\n");
        }
        body.split_inclusive("\n\n")
            .filter(|b| b.ends_with("\n\n"))
            .map(parse_block)
            .collect()
    }
}

/// A round-robin TCP load balancer on loopback: each new connection goes to the next
/// backend, with no stickiness (what an L4 balancer in front of replicas does).
pub struct Balancer {
    pub addr: std::net::SocketAddr,
    /// Connections handed to each backend so far.
    pub connections: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    pub async fn start(backends: Vec<std::net::SocketAddr>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("balancer bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("balancer addr: {e}"));
        let connections: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>> =
            std::sync::Arc::new(backends.iter().map(|_| Default::default()).collect());
        let counts = connections.clone();
        let task = tokio::spawn(async move {
            let mut next = 0usize;
            while let Ok((mut inbound, _)) = listener.accept().await {
                let i = next % backends.len();
                let backend = backends[i];
                counts[i].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                next += 1;
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(backend).await {
                        let _ = inbound.set_nodelay(true);
                        let _ = outbound.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Self {
            addr,
            connections,
            task,
        }
    }

    /// Connections each backend received.
    pub fn spread(&self) -> Vec<usize> {
        self.connections
            .iter()
            .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// The MCP endpoint through the balancer.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A tool `ask` that asks the client for a sampling result and returns its text (or
/// fails with the client's refusal).
pub fn ask_tool() -> otpmcp::handler::Tool {
    use otpmcp::handler::{ClientRequestError, ToolError};
    use otpmcp::protocol::methods::CallToolResult;
    otpmcp::handler::tool("ask", |(), ctx| async move {
            let params = json!({"messages": [{"role": "user", "content": {"type": "text", "text": "2+2?"}}],
                                "maxTokens": 10});
            match ctx.request("sampling/createMessage", Some(params)).await {
                Ok(answer) => Ok(CallToolResult::text(
                    answer["content"]["text"].as_str().unwrap_or("(no text)"),
                )),
                Err(ClientRequestError::Rejected(e)) => {
                    Err(ToolError::Failed(format!("refused: {}", e.message)))
                }
                Err(e) => Err(ToolError::Failed(e.to_string())),
            }
        }).description("Asks the client's model a question.")
}

/// A non-zero integer literal for the configuration's `NonZero*` keys, checked at compile
/// time: `c.server.max_sessions = nz!(3)`.
macro_rules! nz {
    ($n:expr) => {
        const {
            match ::std::num::NonZero::new($n) {
                Some(n) => n,
                None => panic!("zero"),
            }
        }
    };
}
pub(crate) use nz;

/// The resident set of process `pid`, in bytes.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

/// A mebibyte.
pub const MIB: u64 = 1024 * 1024;

pub use outage::{call_through_outage, finish_through_outage};

/// Python that prints, for the process that calls `me()`, its PID namespace and its pid
/// there (`pid:[N]/P`): in a PID namespace with a `/proc` of its own, a program cannot
/// learn its pid on the host; [`NsPid::host`] finds it.
pub const PY_ME: &str =
    "import os\ndef me(): return f\"{os.readlink('/proc/self/ns/pid')}/{os.getpid()}\"\n";

/// A process as a program names it: its PID namespace (as `/proc/self/ns/pid` reads)
/// and its pid there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NsPid {
    pub namespace: String,
    pub pid: i32,
}

impl NsPid {
    /// From `pid:[N]/P`.
    pub fn parse(token: &str) -> Option<Self> {
        let (namespace, pid) = token.rsplit_once('/')?;
        Some(Self {
            namespace: namespace.to_owned(),
            pid: pid.parse().ok()?,
        })
    }

    /// Its pid on the host, while it exists: the process in that namespace whose last
    /// `NSpid` is `pid`. `None` once it is gone (reaped, or its namespace with it).
    pub fn host(&self) -> Option<i32> {
        std::fs::read_dir("/proc")
            .ok()?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .find(|host| {
                let ns = std::fs::read_link(format!("/proc/{host}/ns/pid")).ok();
                if ns.is_none_or(|ns| ns.to_string_lossy() != self.namespace) {
                    return false;
                }
                let status =
                    std::fs::read_to_string(format!("/proc/{host}/status")).unwrap_or_default();
                status
                    .lines()
                    .find_map(|l| l.strip_prefix("NSpid:"))
                    .and_then(|ids| ids.split_whitespace().last()?.parse::<i32>().ok())
                    == Some(self.pid)
            })
    }
}
