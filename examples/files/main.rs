//! `files`: a read-only MCP server over one folder, the kind of small service one deploys
//! beside a code base or a documentation tree. Tools: `read_file(path)`, `index` (reads
//! every text file into a search index, reporting progress; a durable task for clients
//! that declare the tasks extension) and `search(query)`; resources `files://index` and
//! `files://file/{path}`; the prompt `review(path)`; with `--skills DIR`, the skills in
//! DIR (the skills extension, SEP-2640: each folder with a `SKILL.md`). No path leaves
//! the folder: `..` and absolute paths are refused, and each file is opened once beneath
//! the folder with no symlink followed (`otpmcp::handler::fs`), then checked on its
//! descriptor: regular, one name (no hard link), at most 1 MiB. Hidden files (`.env`,
//! `.git/`) are neither served nor indexed. File I/O runs on the blocking pool.
//!
//! Run: `cargo run --release --example files -- --root DIR [--skills DIR]
//! [--bind ADDR:PORT | --stdio]`.
//! Over HTTP it prints the URL it serves; with `--stdio` it serves stdin and stdout
//! until stdin closes. The rest of the configuration comes from `./sys.toml` and
//! `OTPMCP__` variables, as for `otpmcp`. Tested by tests/files_example.rs.

mod index;
mod service;

use std::path::PathBuf;
use std::process::ExitCode;

use otpmcp::{Config, Exit};

const USAGE: &str = "usage: files --root DIR [--skills DIR] [--bind ADDR:PORT | --stdio]";

struct Args {
    root: PathBuf,
    skills: Option<PathBuf>,
    bind: Option<std::net::SocketAddr>,
    stdio: bool,
}

fn parse_args() -> Result<Args, String> {
    let (mut root, mut skills, mut bind, mut stdio) = (None, None, None, false);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--root" => root = Some(PathBuf::from(args.next().ok_or("--root needs a folder")?)),
            "--bind" => {
                let value = args.next().ok_or("--bind needs ADDR:PORT")?;
                bind = Some(
                    value
                        .parse()
                        .map_err(|_| format!("--bind: {value:?} is not ADDR:PORT"))?,
                );
            }
            "--skills" => {
                skills = Some(PathBuf::from(args.next().ok_or("--skills needs a folder")?))
            }
            "--stdio" => stdio = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let root = root.ok_or("--root is required")?;
    if stdio && bind.is_some() {
        return Err("--bind and --stdio exclude each other".into());
    }
    Ok(Args {
        root,
        skills,
        bind,
        stdio,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(why) => {
            eprintln!("files: {why}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let root = match index::Root::open(&args.root) {
        Ok(root) => root,
        Err(e) => {
            eprintln!("files: {}: {e}", args.root.display());
            return ExitCode::from(2);
        }
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    // Over stdio a client starts this inside a workspace: no ./sys.toml from there.
    let loaded = match args.stdio {
        true => Config::load_overlays(&[]),
        false => Config::load(&cwd, &[]),
    };
    let mut config = match loaded {
        Ok(config) => config,
        Err(e) => {
            eprintln!("files: {e}");
            return ExitCode::from(2);
        }
    };
    if let Some(bind) = args.bind {
        config.server.bind = bind;
    }
    let skills = match args
        .skills
        .as_deref()
        .map(otpmcp::handler::SkillsDirectory::open)
    {
        None => None,
        Some(Ok(skills)) => Some(skills),
        Some(Err(e)) => {
            eprintln!("files: --skills: {e}");
            return ExitCode::from(2);
        }
    };
    let server = service::server(root, skills);
    if args.stdio {
        return match otpmcp::serve_stdio(config, server).await {
            Ok(Exit::Shutdown) => ExitCode::SUCCESS,
            Ok(Exit::Escalated(why)) => {
                eprintln!("files: {why}");
                ExitCode::FAILURE
            }
            Err(e) => {
                eprintln!("files: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let app = match otpmcp::start_with(config, server).await {
        Ok(app) => app,
        Err(e) => {
            eprintln!("files: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("otpmcp serving MCP at {}", app.url());
    let _ = tokio::signal::ctrl_c().await;
    app.shutdown().await;
    ExitCode::SUCCESS
}
