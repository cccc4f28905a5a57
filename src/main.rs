//! The `otpmcp` command: `otpmcp [serve] [--config FILE]... [--bind ADDR:PORT]`,
//! `otpmcp stdio [--config FILE]...`, `otpmcp config check [FILE]...`, `otpmcp config docs`,
//! `otpmcp proxy` (docs/proxy.md) and `otpmcp tasks watch` (docs/tasks.md).
//!
//! Exit codes: 0 after a clean stop (SIGINT/SIGTERM), 1 when the supervision tree gives
//! up (restart intensity exceeded) or the server cannot start, 2 for bad usage or
//! configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use otpmcp::{Config, Exit};

/// The process's allocator. With glibc's, a quarter of the server's CPU under many
/// `tools/call` at once went to malloc and free (mostly coalescing freed chunks); with
/// mimalloc that cost all but disappears (docs/performance.md has both figures). Built
/// without transparent huge pages (`no_thp`): with them, idle streams and sessions took
/// half as much memory again. Only the binary chooses: an embedder keeps its own.
#[global_allocator]
static ALLOCATOR: Mimalloc = Mimalloc;

/// mimalloc, asked as its C API expects: plain `mi_malloc` for every alignment its blocks
/// have anyway, its aligned calls only past that. The `mimalloc` crate asks for an aligned
/// block every time, which mimalloc serves on a slow path past 1 KiB (a boxed handler
/// future, a connection's buffers), over-allocated: about 5% of a session's instructions.
struct Mimalloc;

/// What `mi_malloc` aligns every block of at least this size to (`MI_MAX_ALIGN_SIZE`).
const MI_MAX_ALIGN_SIZE: usize = 16;

/// Whether `mi_malloc` alone gives `size` bytes at `align`: its blocks of a multiple of
/// 16 bytes start at multiples of 16, smaller ones at multiples of 8. A Rust type's size
/// is always a multiple of its alignment, so only hand-made layouts take the slow path.
fn plain(align: usize, size: usize) -> bool {
    align <= MI_MAX_ALIGN_SIZE && align <= size && size.is_multiple_of(align)
}

// SAFETY: every block comes from mimalloc with at least the layout's size and alignment
// (`plain` admits only what `mi_malloc` guarantees), and goes back to it through `mi_free`.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Mimalloc {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        use libmimalloc_sys::{mi_malloc, mi_malloc_aligned};
        let (size, align) = (layout.size(), layout.align());
        // SAFETY: plain C calls; a null result is the caller's out-of-memory signal.
        unsafe {
            if plain(align, size) {
                mi_malloc(size).cast()
            } else {
                mi_malloc_aligned(size, align).cast()
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, _layout: std::alloc::Layout) {
        // SAFETY: `ptr` came from one of the calls above.
        unsafe { libmimalloc_sys::mi_free(ptr.cast()) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new_size: usize) -> *mut u8 {
        use libmimalloc_sys::{mi_realloc, mi_realloc_aligned};
        let align = layout.align();
        // SAFETY: `ptr` came from one of the calls above; mimalloc keeps its alignment.
        unsafe {
            if plain(align, new_size) {
                mi_realloc(ptr.cast(), new_size).cast()
            } else {
                mi_realloc_aligned(ptr.cast(), new_size, align).cast()
            }
        }
    }
}

const USAGE: &str = "usage: otpmcp [serve] [--config FILE]... [--bind ADDR:PORT]

Serves MCP (Streamable HTTP) with resumable SSE streams.
  --config FILE     overlay FILE on ./sys.toml (repeatable; later wins)
  --bind ADDR:PORT  listen address (overrides server.bind)
Configuration, later sources winning: built-in defaults, ./sys.toml if present, each
--config FILE, then environment overrides OTPMCP__<SECTION>__<KEY>, e.g.
OTPMCP__SSE__KEEPALIVE_INTERVAL=10s (docs/configuration.md).

       otpmcp stdio [--config FILE]...
Serves MCP on stdin and stdout (newline-delimited JSON-RPC, both protocol eras), for
clients that start the server as a subprocess; logs go to stderr. Ends when stdin
closes, after running requests finish (up to server.shutdown_timeout), with exit 0.
Reads only the --config files and the environment, never ./sys.toml: a client starts
it inside a workspace whose files the user may not have written.

       otpmcp config check [--stdio] [FILE]...
Loads the configuration as serve would (./sys.toml, each FILE as a --config overlay,
the environment; with --stdio, as stdio would: no ./sys.toml) and validates it: prints
every key's effective value and where it came from, or the error, naming the key.
Exits 0 if valid, 2 if not.

       otpmcp config docs
Prints the configuration reference (docs/configuration.md): every key, its type,
default and meaning, from the doc comments of the config types.

       otpmcp proxy --upstream URL --record FILE [--overwrite] [--redact H1,H2]
                    [--redact-param P1,P2]
                    [--keep-session-ids] [--bind ADDR:PORT] [--allowed-host H]...
                    [--allowed-origin O]...
       otpmcp proxy --replay FILE [--timing] [--bind ADDR:PORT] [--allowed-host H]...
                    [--allowed-origin O]...
Records every request, response and SSE event of the sessions it forwards to URL, or
serves such a recording as an MCP server (docs/proxy.md). --bind defaults to
127.0.0.1:8090; 127.0.0.1:0 picks a free port. --allowed-host and --allowed-origin
(repeatable) replace the loopback defaults of the Host and Origin allow-lists.

       otpmcp tasks watch --url URL [--url URL]... [--json] [--retry-for DURATION]
                          [--idle-timeout DURATION] TASK_ID
Follows a task's events (tasks/stream) and prints each once as it comes, one line
each (--json: each event's JSON). A cut stream is resumed after the last event
printed, on the next --url in turn (each replica's, or one balancer's). With [auth],
the bearer token comes from the environment variable OTPMCP_TOKEN. Gives up after
--retry-for (default 60s) without reaching a server that streams the task; resumes
a stream silent for --idle-timeout (default 60s). Exits 0 when the task completed
(a tool error included), 3 failed, 4 cancelled, 5 the server refused (unknown or
expired task, token), 6 no server reached, 2 bad usage, 130 on SIGINT or SIGTERM
(the task goes on).";

/// `otpmcp proxy ...`: its mode, address and allow-lists, or a usage error.
fn parse_proxy(
    mut it: impl Iterator<Item = String>,
) -> Result<(otpmcp::proxy::Mode, SocketAddr, otpmcp::proxy::Access), String> {
    let (mut upstream, mut record, mut replay, mut timing) = (None, None, None, false);
    let mut access = otpmcp::proxy::Access::default();
    // What recording takes besides the upstream and the file, filled in as read.
    let mut to = otpmcp::proxy::RecordTo {
        redact: otpmcp::proxy::REDACTED
            .iter()
            .map(|h| (*h).to_owned())
            .collect(),
        ..Default::default()
    };
    let mut bind: SocketAddr = ([127, 0, 0, 1], 8090).into();
    while let Some(arg) = it.next() {
        let mut value = |what: &str| it.next().ok_or(format!("{arg} needs {what}"));
        match arg.as_str() {
            "--upstream" => upstream = Some(value("a URL")?),
            "--record" => record = Some(PathBuf::from(value("a file")?)),
            "--replay" => replay = Some(PathBuf::from(value("a file")?)),
            "--redact" => to.redact.extend(
                value("header names")?
                    .split(',')
                    .map(|h| h.trim().to_ascii_lowercase()),
            ),
            "--redact-param" => to.redact_params.extend(
                value("query parameter names")?
                    .split(',')
                    .map(|p| p.trim().to_ascii_lowercase()),
            ),
            "--bind" => {
                let v = value("ADDR:PORT")?;
                bind = v
                    .parse()
                    .map_err(|_| format!("--bind: {v:?} is not ADDR:PORT"))?;
            }
            "--timing" => timing = true,
            "--overwrite" => to.overwrite = true,
            "--keep-session-ids" => to.keep_session_ids = true,
            "--allowed-host" => access
                .hosts
                .get_or_insert_with(Vec::new)
                .push(value("a host name")?),
            "--allowed-origin" => access
                .origins
                .get_or_insert_with(Vec::new)
                .push(value("an origin")?),
            other => return Err(format!("proxy: unknown argument {other:?}")),
        }
    }
    let mode = match (upstream, record, replay) {
        (Some(upstream), Some(file), None) => {
            otpmcp::proxy::Mode::Record(otpmcp::proxy::RecordTo {
                upstream,
                file,
                ..to
            })
        }
        (None, None, Some(file)) if !to.overwrite && !to.keep_session_ids => {
            otpmcp::proxy::Mode::Replay { file, timing }
        }
        (None, None, Some(_)) => {
            return Err("proxy: --overwrite and --keep-session-ids go with --record".into());
        }
        _ => return Err("proxy: give --upstream URL --record FILE, or --replay FILE".into()),
    };
    // Checked here too, so a bad entry is a usage error before anything is bound.
    access.guard().map_err(|e| format!("proxy: {e}"))?;
    Ok((mode, bind, access))
}

/// Runs `otpmcp proxy` until SIGINT or SIGTERM.
fn proxy(args: impl Iterator<Item = String>) -> ExitCode {
    subcommand(parse_proxy(args), |(mode, bind, access)| async move {
        let telemetry = otpmcp::init_telemetry(&otpmcp::config::TelemetryConfig::default());
        let proxy = match otpmcp::proxy::Proxy::bind(mode, bind, &access).await {
            Ok(proxy) => proxy,
            Err(e) => {
                eprintln!("otpmcp: {e}");
                return ExitCode::from(2);
            }
        };
        let stop = stop_signal();
        println!("otpmcp proxy serving MCP at {}", proxy.url);
        proxy
            .serve(async {
                stop.await;
            })
            .await;
        if let Ok(telemetry) = telemetry {
            telemetry.shutdown();
        }
        ExitCode::SUCCESS
    })
}

struct Args {
    configs: Vec<PathBuf>,
    bind: Option<SocketAddr>,
    stdio: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        configs: Vec::new(),
        bind: None,
        stdio: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "serve" => {}
            "stdio" => args.stdio = true,
            "--config" => args
                .configs
                .push(it.next().ok_or("--config needs a file")?.into()),
            "--bind" => {
                let value = it.next().ok_or("--bind needs ADDR:PORT")?;
                args.bind = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--bind: {value:?} is not ADDR:PORT"))?,
                );
            }
            "-h" | "--help" => return Err(String::new()),
            "-V" | "--version" => {
                println!("otpmcp {}", env!("CARGO_PKG_VERSION"));
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    if args.stdio && args.bind.is_some() {
        return Err("stdio: --bind has no use (no socket is opened)".into());
    }
    Ok(args)
}

/// `otpmcp config check [FILE]...`: the effective configuration with each value's source;
/// `otpmcp config docs`: the configuration reference.
fn config_command(args: impl Iterator<Item = String>) -> ExitCode {
    let mut files = Vec::new();
    let mut stdio = false;
    let mut args = args.peekable();
    match args.next().as_deref() {
        Some("check") => {}
        Some("docs") if args.peek().is_none() => {
            print!("{}", Config::reference());
            return ExitCode::SUCCESS;
        }
        _ => {
            eprintln!("otpmcp: config: the subcommands are `check` and `docs`\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--stdio" => stdio = true,
            "--config" => match args.next() {
                Some(file) => files.push(PathBuf::from(file)),
                None => {
                    eprintln!("otpmcp: --config needs a file");
                    return ExitCode::from(2);
                }
            },
            flag if flag.starts_with('-') => {
                eprintln!("otpmcp: config check: unknown argument {flag:?}\n{USAGE}");
                return ExitCode::from(2);
            }
            file => files.push(PathBuf::from(file)),
        }
    }
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let env: Vec<(String, String)> = std::env::vars().collect();
    let dir = (!stdio).then_some(cwd.as_path());
    match Config::explain(dir, &files, env) {
        Ok((_, effective)) => {
            for e in &effective {
                let line = format!("{} = {}", e.key, e.value);
                println!("{line:<56}  # {}", e.source);
            }
            println!("# valid");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("otpmcp: {e}");
            ExitCode::from(2)
        }
    }
}

/// `otpmcp tasks watch ...`: what to follow, or a usage error.
fn parse_watch(mut it: impl Iterator<Item = String>) -> Result<otpmcp::watch::Watch, String> {
    if it.next().as_deref() != Some("watch") {
        return Err("tasks: the one subcommand is `watch`".into());
    }
    let duration = |flag: &str, value: Option<String>| {
        let value = value.ok_or(format!("{flag} needs a duration"))?;
        otpmcp::config::parse_duration(&value).map_err(|e| format!("{flag}: {e}"))
    };
    let mut watch = otpmcp::watch::Watch {
        urls: Vec::new(),
        task_id: String::new(),
        token: std::env::var(otpmcp::watch::TOKEN_VARIABLE)
            .ok()
            .filter(|t| !t.is_empty()),
        json: false,
        retry_for: std::time::Duration::from_secs(60),
        idle_timeout: std::time::Duration::from_secs(60),
    };
    let mut task = None;
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--url" => watch.urls.push(it.next().ok_or("--url needs a URL")?),
            "--json" => watch.json = true,
            "--retry-for" => watch.retry_for = duration("--retry-for", it.next())?,
            "--idle-timeout" => watch.idle_timeout = duration("--idle-timeout", it.next())?,
            flag if flag.starts_with('-') => {
                return Err(format!("tasks watch: unknown argument {flag:?}"));
            }
            id if task.is_none() => task = Some(id.to_owned()),
            extra => return Err(format!("tasks watch: one task id, not also {extra:?}")),
        }
    }
    watch.task_id = task.ok_or("tasks watch: give the task's id")?;
    if watch.urls.is_empty() {
        return Err("tasks watch: give the server's --url".into());
    }
    if watch.idle_timeout.is_zero() {
        return Err("tasks watch: --idle-timeout must be more than 0".into());
    }
    Ok(watch)
}

/// Runs `otpmcp tasks watch` until the task ends.
fn tasks(args: impl Iterator<Item = String>) -> ExitCode {
    subcommand(parse_watch(args), |watch| async move {
        let mut out = std::io::stdout();
        tokio::select! {
            ended = watch.run(&mut out) => match ended {
                Ok(ending) => ExitCode::from(ending.code()),
                Err(e) => {
                    eprintln!("otpmcp: {e}");
                    ExitCode::from(2)
                }
            },
            signal = stop_signal() => {
                eprintln!("otpmcp: {signal}: stopped watching (the task goes on)");
                ExitCode::from(130)
            }
        }
    })
}

fn main() -> ExitCode {
    match std::env::args().nth(1).as_deref() {
        Some("proxy") => return proxy(std::env::args().skip(2)),
        Some("tasks") => return tasks(std::env::args().skip(2)),
        Some("config") => return config_command(std::env::args().skip(2)),
        _ => {}
    }
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            if msg.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("otpmcp: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    // stdio never reads ./sys.toml: see `Config::load_overlays`.
    let dir = (!args.stdio).then_some(cwd.as_path());
    let files = Config::files(dir, &args.configs);
    let loaded = match dir {
        Some(dir) => Config::load(dir, &args.configs),
        None => Config::load_overlays(&args.configs),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(e) => {
            eprintln!("otpmcp: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(bind) = args.bind {
        config.server.bind = bind;
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    if args.stdio {
        return stdio(runtime, config, files);
    }
    // The batch exporter and the subscriber are set up inside the runtime so that the
    // exporter's HTTP client finds it.
    runtime.block_on(async move {
        let telemetry = match telemetry(&config, &files) {
            Ok(guard) => guard,
            Err(code) => return code,
        };
        let mut app = match otpmcp::start(config).await {
            Ok(app) => app,
            Err(e) => {
                tracing::error!(error = %e, "could not start");
                eprintln!("otpmcp: {e}");
                return ExitCode::FAILURE;
            }
        };
        let stop = stop_signal();
        println!("otpmcp serving MCP at {}", app.url());
        let code = tokio::select! {
            exit = app.wait() => exit_code(exit),
            signal = stop => {
                tracing::info!(signal, "stopping");
                app.shutdown().await;
                tracing::info!("stopped");
                ExitCode::SUCCESS
            }
        };
        telemetry.shutdown();
        code
    })
}

/// `otpmcp stdio`: serves the default server on stdin and stdout until stdin closes (or
/// SIGINT/SIGTERM).
fn stdio(runtime: tokio::runtime::Runtime, config: Config, files: Vec<PathBuf>) -> ExitCode {
    let code = runtime.block_on(async move {
        let telemetry = match telemetry(&config, &files) {
            Ok(guard) => guard,
            Err(code) => return code,
        };
        let stop = async {
            let signal = stop_signal().await;
            tracing::info!(signal, "stopping");
        };
        let code = match otpmcp::serve_stdio_until(config, otpmcp::McpServer::default(), stop).await
        {
            Ok(exit) => exit_code(exit),
            Err(e) => {
                tracing::error!(error = %e, "could not start");
                eprintln!("otpmcp: {e}");
                ExitCode::FAILURE
            }
        };
        telemetry.shutdown();
        code
    });
    // A read of stdin blocks a thread and cannot be cancelled: do not wait for it.
    runtime.shutdown_timeout(std::time::Duration::from_millis(100));
    code
}

/// Sets up telemetry for serving `config` (exit 2 when it cannot be) and logs the
/// configuration `files` read.
fn telemetry(config: &Config, files: &[PathBuf]) -> Result<otpmcp::TelemetryGuard, ExitCode> {
    let guard = otpmcp::init_telemetry(&config.telemetry).map_err(|e| {
        eprintln!("otpmcp: {e}");
        ExitCode::from(2)
    })?;
    log_files(files);
    Ok(guard)
}

/// Says at start-up which files the configuration came from (besides the defaults and
/// the environment), so an operator sees what was read and what was not.
fn log_files(files: &[PathBuf]) {
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    tracing::info!(files = ?names, "configuration loaded");
}

/// The exit code of a tree that ended: 0 after a stop, 1 when it gave up (escalation).
fn exit_code(exit: Exit) -> ExitCode {
    match exit {
        Exit::Shutdown => ExitCode::SUCCESS,
        Exit::Escalated(why) => {
            tracing::error!(reason = %why, "supervision tree gave up; exiting");
            eprintln!("otpmcp: supervision tree gave up: {why}");
            ExitCode::FAILURE
        }
    }
}

/// The multi-threaded runtime both commands run on, or the exit code when it cannot start.
/// Runs a subcommand given its `parsed` arguments (a usage error exits with 2) on a new
/// runtime.
fn subcommand<T, F: Future<Output = ExitCode>>(
    parsed: Result<T, String>,
    run: impl FnOnce(T) -> F,
) -> ExitCode {
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(msg) => {
            eprintln!("otpmcp: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match runtime() {
        Ok(runtime) => runtime.block_on(run(parsed)),
        Err(code) => code,
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("otpmcp: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        })
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed by the call, not when the
/// future is first polled: called before the URL is printed, a signal sent as soon as it
/// is read stops the server gracefully rather than killing it (the default action).
fn stop_signal() -> impl Future<Output = &'static str> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        match (term, int) {
            (Ok(mut term), Ok(mut int)) => tokio::select! {
                _ = int.recv() => "SIGINT",
                _ = term.recv() => "SIGTERM",
            },
            _ => {
                let _ = tokio::signal::ctrl_c().await;
                "SIGINT"
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use super::ALLOCATOR;

    /// Every size up to 4 KiB at every alignment up to 64 comes back aligned, writable,
    /// and stays aligned through a reallocation, on either path (zeroed: `alloc`'s default).
    #[test]
    #[allow(unsafe_code)]
    fn blocks_are_aligned_on_both_paths() {
        for align in [1, 2, 4, 8, 16, 32, 64] {
            for size in (1..=4096)
                .step_by(7)
                .chain([8, 16, 24, 48, 1024, 1040, 4096])
            {
                let Ok(layout) = Layout::from_size_align(size, align) else {
                    continue;
                };
                // SAFETY: a non-zero layout; each block is written within its size and
                // freed once, with the layout it has at that point.
                unsafe {
                    let p = ALLOCATOR.alloc(layout);
                    assert!(
                        !p.is_null() && (p as usize).is_multiple_of(align),
                        "{layout:?}"
                    );
                    p.write_bytes(0xA5, size);
                    let grown = ALLOCATOR.realloc(p, layout, size * 3);
                    assert!((grown as usize).is_multiple_of(align), "{layout:?} grown");
                    assert_eq!(*grown.add(size - 1), 0xA5);
                    let grown_layout = Layout::from_size_align_unchecked(size * 3, align);
                    ALLOCATOR.dealloc(grown, grown_layout);
                }
            }
        }
    }
}
