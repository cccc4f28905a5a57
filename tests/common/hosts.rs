//! What the host tests (Codex, Copilot CLI) share: the pinned hosts under
//! `.cache/hosts/` (scripts/setup-clients), a throwaway home for each run, a host
//! command run to its end under a limit, and an otpmcp whose `stamp` tool tells the
//! test each call it answered.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use otpmcp::McpServer;
use otpmcp::handler::builtin::{echo, stream_events};
use otpmcp::handler::{ToolRegistry, tool};
use otpmcp::protocol::methods::{CallToolResult, TaskSupport};
use otpmcp::session::{SessionHandle, SessionId};

/// The longest a host may take for one command: starting it, its MCP servers and a
/// turn or two of the stand-in model take a few seconds; a task's polling more.
pub const HOST_LIMIT: Duration = Duration::from_secs(120);

/// A file the pinned hosts' npm install put under `.cache/hosts/node_modules/`.
pub fn installed(path: &str) -> PathBuf {
    cached(&format!("hosts/node_modules/{path}"))
}

/// A file `scripts/setup-clients` put under `.cache/`.
pub fn cached(path: &str) -> PathBuf {
    let full = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".cache")
        .join(path);
    assert!(
        full.exists(),
        "{} is missing: run ./scripts/setup-clients (./scripts/test does)",
        full.display()
    );
    full
}

/// The otpmcp binary the hosts start over stdio.
pub fn otpmcp_bin() -> &'static str {
    env!("CARGO_BIN_EXE_otpmcp")
}

/// A home directory of the host's own, empty at first, removed afterwards. Under
/// target/tmp, not /tmp: Codex will not put its helpers under a temporary directory.
pub struct Home {
    pub dir: PathBuf,
}

impl Home {
    pub fn new(name: &str) -> Self {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("host-{name}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        Self { dir }
    }

    /// `program` with this home and none of the caller's settings: only `PATH` of the
    /// environment, so no token or configuration of the user running the tests leaks in.
    pub fn command(&self, program: &Path) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.dir)
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs `cmd` to its end within [`HOST_LIMIT`] (killed past it) and returns its output,
/// which must be a success.
pub async fn run_host(mut cmd: tokio::process::Command) -> Output {
    let out = match tokio::time::timeout(HOST_LIMIT, cmd.output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => panic!("the host could not run: {e}"),
        Err(_) => panic!("the host ran past {HOST_LIMIT:?}"),
    };
    assert!(
        out.status.success(),
        "the host failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Stdout and stderr of `out`, for messages.
pub fn printed(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// One call `stamp` answered, as otpmcp saw it.
#[derive(Debug, Clone)]
pub struct Stamped {
    /// What it returned: made on otpmcp, known to nobody else before the host got it.
    pub stamp: String,
    /// The call's session: `Some` for a 2025 session, `None` for a stateless 2026-07-28
    /// request (or a task).
    pub session: Option<SessionId>,
    /// The session's revision, where otpmcp's session manager was given to
    /// [`stamping_server`].
    pub revision: Option<String>,
    /// Whether the call became a task.
    pub task: bool,
}

/// The default server's tools plus `stamp`, which returns a fresh random stamp and
/// records it in `calls`, with its session's revision once `sessions` is set (to the
/// started server's `App::sessions`). It may run as a task (`Optional`), and becomes one
/// itself so that it knows whether it did.
pub fn stamping_server(
    calls: Arc<Mutex<Vec<Stamped>>>,
    sessions: Arc<OnceLock<SessionHandle>>,
) -> McpServer {
    let mut tools = ToolRegistry::default();
    tools.register(echo()).register(stream_events()).register(
        tool("stamp", move |(), ctx| {
            let (calls, sessions) = (calls.clone(), sessions.clone());
            async move {
                let task = ctx.start_task().await.unwrap_or(false);
                let revision = match (ctx.session(), sessions.get()) {
                    (Some(id), Some(sessions)) => sessions.info(id).await.ok(),
                    _ => None,
                };
                let stamp = format!("stamp-{}", uuid::Uuid::new_v4().simple());
                calls
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(Stamped {
                        stamp: stamp.clone(),
                        session: ctx.session(),
                        revision: revision.map(|info| info.protocol_version.to_string()),
                        task,
                    });
                Ok(CallToolResult::text(stamp))
            }
        })
        .description("Returns a stamp that only this server knows.")
        .task_support(TaskSupport::Optional)
        .starting_task_itself(),
    );
    McpServer::new(tools)
}

/// A `count` for `stream_events` that the test picks at random, so that its result,
/// `streamed COUNT events`, could only have come from otpmcp running this call.
pub fn random_count() -> u64 {
    2 + (uuid::Uuid::new_v4().as_u128() % 90) as u64
}
