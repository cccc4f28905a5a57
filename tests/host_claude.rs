//! Claude Code (`@anthropic-ai/claude-code`, pinned by `scripts/setup-clients`) against
//! the real `otpmcp` binary, as a user adds it: `claude mcp add` over HTTP and over stdio
//! in a throwaway `HOME`, `claude mcp list`, tool calls with `claude -p`, and the
//! interactive mode on a terminal running `stream_events` as a task. The model is the
//! only fake: a loopback stand-in of the Messages API (tests/common/anthropic.rs) that
//! has Claude Code call the tool. Each test checks on otpmcp's side that the call
//! arrived: otpmcp's own metrics (`/metrics` on its admin listener, which a stdio server
//! runs too) count the `tools/call` of that tool and the `tasks/get` polls, and over HTTP
//! the test asks otpmcp for the task itself with `tasks/get`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Binary;
use common::anthropic::{StandIn, last_texts};
use common::redis::free_port;
use common::stateless::Stateless;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::process::Command;

/// Longest one Claude Code command may take; it takes 0.5 to 3 s here, more on a loaded
/// machine.
const LIMIT: Duration = Duration::from_secs(90);
/// The key Claude Code sends the stand-in; any will do, none reaches Anthropic.
const API_KEY: &str = "sk-ant-otpmcp-test-key-0000";
const OTPMCP: &str = env!("CARGO_BIN_EXE_otpmcp");

fn claude() -> PathBuf {
    common::hosts::cached("claude-code/node_modules/.bin/claude")
}

/// A throwaway `HOME` for Claude Code, with a project folder `work` to run it in and its
/// first-run questions answered in `~/.claude.json`: onboarding done, the theme chosen,
/// the API key accepted, the folder trusted.
struct Host {
    home: PathBuf,
    work: PathBuf,
}

impl Host {
    fn new(name: &str) -> Self {
        let home =
            std::env::temp_dir().join(format!("otpmcp-claude-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&home);
        let work = home.join("work");
        std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("{}: {e}", work.display()));
        // Claude Code keys its projects by the folder's real path.
        let work = work
            .canonicalize()
            .unwrap_or_else(|e| panic!("{}: {e}", work.display()));
        let key_tail = &API_KEY[API_KEY.len() - 20..];
        let mut projects = serde_json::Map::new();
        projects.insert(
            work.display().to_string(),
            json!({"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true}),
        );
        let settings = json!({
            "hasCompletedOnboarding": true,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [key_tail], "rejected": []},
            "projects": projects,
        });
        std::fs::write(home.join(".claude.json"), settings.to_string())
            .unwrap_or_else(|e| panic!("~/.claude.json: {e}"));
        Self { home, work }
    }

    /// `program args`, in the project folder, with only the environment Claude Code
    /// needs here (nothing of the caller's, which may be a Claude Code session itself),
    /// the model at `model` when given.
    fn command(&self, program: &Path, args: &[&str], model: Option<&StandIn>) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args)
            .current_dir(&self.work)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("TERM", "xterm-256color")
            .env("LANG", "C.UTF-8")
            // Otherwise MCP tools hide behind a tool-search tool the stand-in would have
            // to drive.
            .env("ENABLE_TOOL_SEARCH", "false")
            // No telemetry, update checks or other calls home.
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // Only with a model: with an API key `claude mcp list` also asks something of
        // api.anthropic.com, and without a network waits 18 s for it.
        if let Some(model) = model {
            cmd.env("ANTHROPIC_API_KEY", API_KEY)
                .env("ANTHROPIC_BASE_URL", &model.url);
        }
        cmd
    }

    /// Runs `claude args` to its end, which must be a success; returns its stdout.
    async fn run(&self, args: &[&str], model: Option<&StandIn>) -> String {
        let child = self
            .command(&claude(), args, model)
            .spawn()
            .unwrap_or_else(|e| panic!("claude {args:?}: {e}"));
        finish(child, args).await
    }
}

impl Host {
    /// `claude mcp add otpmcp URL` (HTTP).
    async fn add_http(&self, url: &str) {
        self.run(&["mcp", "add", "--transport", "http", "otpmcp", url], None)
            .await;
    }

    /// `claude mcp add otpmcp -- otpmcp stdio`, with otpmcp's admin listener (for its
    /// metrics) on `admin` set through Claude Code's `-e`.
    async fn add_stdio(&self, admin: &str) {
        let bind = format!("OTPMCP__ADMIN__BIND={admin}");
        let args = [
            "mcp",
            "add",
            "otpmcp",
            "-e",
            "OTPMCP__ADMIN__ENABLED=true",
            "-e",
            &bind,
            "--",
            OTPMCP,
            "stdio",
        ];
        self.run(&args, None).await;
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// Waits for `child` (`claude args`) to end, which must be a success; returns its stdout.
async fn finish(child: tokio::process::Child, args: &[&str]) -> String {
    let out = tokio::time::timeout(LIMIT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("claude {args:?} did not end within {LIMIT:?}"))
        .unwrap_or_else(|e| panic!("claude {args:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "claude {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The real binary serving HTTP, with its admin listener (for `/metrics`) on `admin`.
async fn otpmcp_http(admin: &str) -> Binary {
    Binary::start(
        &[],
        &[
            ("OTPMCP__ADMIN__ENABLED", "true"),
            ("OTPMCP__ADMIN__BIND", admin),
        ],
    )
    .await
}

/// A free loopback address for an admin listener.
fn admin_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// What otpmcp's `/metrics` at `admin` counts of `method` (on `tool`, if given): the
/// number of operations, and the protocol revisions they came in.
async fn operations(admin: &str, method: &str, tool: Option<&str>) -> (u64, Vec<String>) {
    let url = format!("http://{admin}/metrics");
    let text = common::within("otpmcp's metrics", async {
        reqwest::get(&url).await?.text().await
    })
    .await
    .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let method = format!("mcp_method_name=\"{method}\"");
    let tool = tool.map(|t| format!("gen_ai_tool_name=\"{t}\""));
    let mut count = 0;
    let mut versions = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("mcp_server_operation_duration_seconds_count{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let labels: Vec<&str> = labels.split(',').collect();
        if !labels.contains(&method.as_str())
            || tool.as_ref().is_some_and(|t| !labels.contains(&t.as_str()))
        {
            continue;
        }
        count += value.trim().parse::<u64>().unwrap_or(0);
        let version = labels
            .iter()
            .find_map(|l| l.strip_prefix("mcp_protocol_version=\""))
            .map(|v| v.trim_end_matches('"').to_owned());
        if let Some(version) = version.filter(|v| !versions.contains(v)) {
            versions.push(version);
        }
    }
    (count, versions)
}

/// The line of `claude mcp list` about server `name`.
fn listed<'a>(list: &'a str, name: &str) -> &'a str {
    list.lines()
        .find(|l| l.starts_with(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("`claude mcp list` has no {name}:\n{list}"))
}

#[tokio::test]
#[ignore = "needs Claude Code (scripts/setup-clients); ./scripts/test runs it"]
async fn claude_code_adds_otpmcp_over_http_and_stdio_and_both_connect() {
    let admin = admin_addr();
    let server = otpmcp_http(&admin).await;
    let host = Host::new("list");
    host.add_http(&server.url).await;
    host.run(&["mcp", "add", "otpmcp-stdio", "--", OTPMCP, "stdio"], None)
        .await;
    let list = host.run(&["mcp", "list"], None).await;
    let http = listed(&list, "otpmcp");
    assert!(
        http.contains(&server.url) && http.contains("(HTTP)"),
        "{http}"
    );
    assert!(http.ends_with("✔ Connected"), "{list}");
    let stdio = listed(&list, "otpmcp-stdio");
    assert!(stdio.contains(&format!("{OTPMCP} stdio")), "{stdio}");
    assert!(stdio.ends_with("✔ Connected"), "{list}");
    // Its health check reached otpmcp, and in the stateless revision.
    let (discovered, versions) = operations(&admin, "server/discover", None).await;
    assert!(discovered >= 1, "no server/discover reached otpmcp");
    assert_eq!(versions, ["2026-07-28"]);
}

#[tokio::test]
#[ignore = "needs Claude Code (scripts/setup-clients); ./scripts/test runs it"]
async fn claude_code_calls_a_tool_over_http() {
    let admin = admin_addr();
    let server = otpmcp_http(&admin).await;
    let host = Host::new("http");
    host.add_http(&server.url).await;
    let nonce = format!("otpmcp-echo-{}", std::process::id());
    let model = StandIn::start("mcp__otpmcp__echo", json!({"text": nonce})).await;
    let args = [
        "-p",
        "Echo a word with otpmcp.",
        "--allowedTools",
        "mcp__otpmcp__echo",
    ];
    let out = host.run(&args, Some(&model)).await;
    assert_eq!(out.trim(), "done", "the stand-in's final text");
    assert_eq!(model.tool_result(LIMIT).await, Some(nonce));
    // otpmcp ran exactly that call, in the stateless revision.
    let (calls, versions) = operations(&admin, "tools/call", Some("echo")).await;
    assert_eq!(calls, 1, "tools/call echo as otpmcp counted it");
    assert_eq!(versions, ["2026-07-28"]);
}

/// Over stdio the server lives only as long as Claude Code's session: the stand-in holds
/// its last answer until the test has read the server's metrics.
#[tokio::test]
#[ignore = "needs Claude Code (scripts/setup-clients); ./scripts/test runs it"]
async fn claude_code_calls_a_tool_over_stdio() {
    let admin = admin_addr();
    let host = Host::new("stdio");
    host.add_stdio(&admin).await;
    let model = StandIn::start(
        "mcp__otpmcp__stream_events",
        json!({"count": 3, "interval_ms": 10}),
    )
    .await;
    model.hold_final_answer();
    let args = [
        "-p",
        "Stream three events with otpmcp.",
        "--allowedTools",
        "mcp__otpmcp__stream_events",
    ];
    let child = host
        .command(&claude(), &args, Some(&model))
        .spawn()
        .unwrap_or_else(|e| panic!("claude: {e}"));
    // The tool's own text: only otpmcp's `stream_events` writes it. Its result, not a
    // task: `claude -p` does not declare the tasks extension.
    let result = model.tool_result(LIMIT).await;
    assert_eq!(result.as_deref(), Some("streamed 3 events"));
    let (calls, _) = operations(&admin, "tools/call", Some("stream_events")).await;
    // In the stateless revision: `server/discover` exists only there, and no session was
    // opened. (Over stdio otpmcp labels its operations' revision `_OTHER`.)
    let (discovered, _) = operations(&admin, "server/discover", None).await;
    let (initialized, _) = operations(&admin, "initialize", None).await;
    let (polls, _) = operations(&admin, "tasks/get", None).await;
    model.release();
    assert_eq!(calls, 1, "tools/call stream_events as otpmcp counted it");
    assert!(discovered >= 1, "no server/discover reached otpmcp");
    assert_eq!(initialized, 0, "Claude Code opened a session");
    assert_eq!(polls, 0, "a task was made");
    let out = finish(child, &args).await;
    assert_eq!(out.trim(), "done", "the stand-in's final text");
}

/// Claude Code's interactive mode declares the tasks extension on its requests, so
/// otpmcp answers `stream_events` with a task; Claude Code moves it to the background,
/// polls it with `tasks/get` and tells the model its result. It runs on a terminal
/// (tests/hosts/terminal.py), in the default permission mode with the tool allowed (its
/// automatic mode asks a server-side classifier the stand-in cannot stand in for).
#[tokio::test]
#[ignore = "needs Claude Code (scripts/setup-clients); ./scripts/test runs it"]
async fn claude_code_interactive_runs_stream_events_as_a_task_over_http() {
    let admin = admin_addr();
    let server = otpmcp_http(&admin).await;
    let host = Host::new("tasks-http");
    host.add_http(&server.url).await;
    let (task_id, stop) = interactive_task(&host, &admin).await;
    let (_, versions) = operations(&admin, "tasks/get", None).await;
    assert_eq!(versions, ["2026-07-28"]);
    // otpmcp has the task, completed with the tool's result.
    let task = Stateless::new(&server.url)
        .with_tasks()
        .task(&task_id)
        .await;
    let task = task.result();
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(
        task["result"]["content"][0]["text"], "streamed 5 events",
        "{task}"
    );
    stop.await;
}

/// Over stdio the server lives as long as the interactive session: the test reads its
/// metrics before ending the session. (The task itself lives in that process, which only
/// Claude Code can ask; its result reached the model in the notification.)
#[tokio::test]
#[ignore = "needs Claude Code (scripts/setup-clients); ./scripts/test runs it"]
async fn claude_code_interactive_runs_stream_events_as_a_task_over_stdio() {
    let admin = admin_addr();
    let host = Host::new("tasks-stdio");
    host.add_stdio(&admin).await;
    let (_, stop) = interactive_task(&host, &admin).await;
    stop.await;
}

/// Runs Claude Code interactively in `host` (its server `otpmcp` added, with metrics on
/// `admin`) to call `stream_events`, which must come back as a task that Claude Code
/// polls to its end. Returns otpmcp's task id, and what ends the session.
async fn interactive_task(
    host: &Host,
    admin: &str,
) -> (String, impl std::future::Future<Output = ()>) {
    let model = StandIn::start(
        "mcp__otpmcp__stream_events",
        json!({"count": 5, "interval_ms": 100}),
    )
    .await;
    let terminal = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hosts/terminal.py");
    let claude = claude().display().to_string();
    let args = [
        terminal.to_str().unwrap_or_default(),
        &claude,
        "Stream five events with otpmcp.",
        "--permission-mode",
        "default",
        "--allowedTools",
        "mcp__otpmcp__stream_events",
    ];
    let mut child = host
        .command(Path::new("/usr/bin/python3"), &args, Some(&model))
        .stdin(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("claude on a terminal: {e}"));
    // What it draws, kept to show when something fails.
    let screen = Arc::new(Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let drawn = screen.clone();
    let reader = tokio::spawn(async move {
        let mut buf = [0u8; 8192];
        while let Ok(n) = stdout.read(&mut buf).await {
            if n == 0 {
                break;
            }
            drawn
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .extend_from_slice(&buf[..n]);
        }
    });
    let shown = || plain(&screen.lock().unwrap_or_else(|e| e.into_inner()));

    // The call's result as Claude Code gave it to the model: the task it started.
    let started = model.tool_result(LIMIT).await;
    let started = started.unwrap_or_else(|| panic!("no tool result; the screen:\n{}", shown()));
    let task_id =
        hex_id(&started).unwrap_or_else(|| panic!("no server-side task id in {started:?}"));
    // Then the notification that the task ended, with its result.
    let ended = model
        .wait_for(LIMIT, |body| {
            let texts = last_texts(body);
            texts.contains("<task-notification>").then_some(texts)
        })
        .await
        .unwrap_or_else(|| panic!("no task notification; the screen:\n{}", shown()));
    assert!(ended.contains("<status>completed</status>"), "{ended}");
    assert!(ended.contains("streamed 5 events"), "{ended}");

    // On otpmcp's side: the call, and Claude Code's polls.
    let (calls, _) = operations(admin, "tools/call", Some("stream_events")).await;
    assert_eq!(calls, 1, "tools/call stream_events as otpmcp counted it");
    let (polls, _) = operations(admin, "tasks/get", None).await;
    assert!(polls >= 1, "Claude Code polled with tasks/get");
    let stop = async move {
        // Ending stdin stops Claude Code (SIGTERM through the terminal's helper).
        drop(child.stdin.take());
        let exited = tokio::time::timeout(LIMIT, child.wait()).await;
        assert!(
            exited.is_ok(),
            "Claude Code did not stop; the screen:\n{}",
            plain(&screen.lock().unwrap_or_else(|e| e.into_inner()))
        );
        let _ = reader.await;
    };
    (task_id, stop)
}

/// The first run of 32 hex digits in `text`: otpmcp's task ids.
fn hex_id(text: &str) -> Option<String> {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .find(|w| w.len() == 32)
        .map(str::to_owned)
}

/// Terminal output without its escape sequences, for reading in a failure message.
fn plain(raw: &[u8]) -> String {
    let text = String::from_utf8_lossy(raw);
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI (`ESC [ ... letter`) or OSC (`ESC ] ... BEL`); other escapes are two chars.
            match chars.next() {
                Some('[') => {
                    for c in chars.by_ref() {
                        if c.is_ascii_alphabetic() || c == '~' {
                            break;
                        }
                    }
                }
                Some(']') => {
                    for c in chars.by_ref() {
                        if c == '\u{7}' {
                            break;
                        }
                    }
                }
                _ => {}
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    let tail = out.len().saturating_sub(4000);
    out[out.floor_char_boundary(tail)..].to_owned()
}
