//! An upgrade and a rollback behind Debian's nginx on one Redis, under load: three
//! replicas of the previous release (the commit in `deploy/previous-release`, built by
//! `scripts/upgrade-test`, started with its own tree's config files), each replaced in
//! turn by the current build (SIGTERM, drain, exit, start on the same port), then one
//! rolled back to the previous release and upgraded again. Both releases serve the same
//! sessions, streams and tasks meanwhile, each reading what the other wrote.
//!
//! The load is tests/rolling_restart.rs's (tests/common/rolling.rs) plus task event
//! streams: every streamed session call exact, resumed across any cut (a long call handed
//! on and run again whole counts as exact), every 2026-07-28 call answered, every task
//! completed, every task stream read exactly once through its cuts. No replica may log
//! that it could not read or decode a record or message another wrote.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::nginx::Nginx;
use common::redis::{RedisServer, free_port};
use common::rolling::{self, Build, CALLS_BETWEEN, Mix, Tally};
use common::{Client, eventually};

const REPLICAS: usize = 3;

/// What a replica logs when it cannot read what another replica wrote (lower case):
/// today's warnings on undecodable bus messages and unreadable shared sessions, and the
/// words a format check's would use. A panic is counted too.
const UNREADABLE: &[&str] = &[
    "undecodable",
    "malformed",
    "could not read",
    "could not decode",
    "cannot decode",
    "cannot read",
    "unknown format",
    "unsupported format",
    "newer format",
    "panicked",
];

/// What a replica logs when it runs a task a drain stopped elsewhere (counted for the
/// summary only: how often a task crossed from one replica to another).
const HANDED_ON_LOG: &str = "runs again here";

/// The previous release, from the environment `scripts/upgrade-test` sets.
fn previous() -> Build {
    let var = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("{name} is not set: run scripts/upgrade-test"))
    };
    let build = Build {
        program: var("OTPMCP_PREVIOUS_BIN"),
        tree: var("OTPMCP_PREVIOUS_TREE"),
    };
    assert!(build.program.is_file(), "no binary at {:?}", build.program);
    assert!(
        build.tree.join("config/redis.toml").is_file(),
        "no config/redis.toml under {:?}",
        build.tree
    );
    build
}

/// Replicas' logs, a file each, in a folder of the test's own.
struct Logs {
    dir: PathBuf,
    files: Vec<PathBuf>,
}

impl Logs {
    fn new() -> Self {
        let dir = std::env::temp_dir().join(format!("otpmcp-upgrade-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{dir:?}: {e}"));
        Self {
            dir,
            files: Vec::new(),
        }
    }

    /// A new log file for replica `n` running `release`.
    fn next(&mut self, n: usize, release: &str) -> std::process::Stdio {
        let path = self
            .dir
            .join(format!("{:02}-replica-{n}-{release}.log", self.files.len()));
        let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        self.files.push(path);
        std::process::Stdio::from(file)
    }

    /// The lines of every log that `matching` picks, each after its file's name.
    fn lines(&self, matching: impl Fn(&str) -> bool) -> Vec<String> {
        let mut found = Vec::new();
        for path in &self.files {
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            found.extend(
                text.lines()
                    .filter(|line| matching(line))
                    .map(|line| format!("{name}: {line}")),
            );
        }
        found
    }

    /// The lines that say a record or message could not be read.
    fn unreadable(&self) -> Vec<String> {
        self.lines(|line| {
            let lower = line.to_lowercase();
            UNREADABLE.iter().any(|word| lower.contains(word))
        })
    }

    /// The panics of [`PREVIOUS_PANIC`] in the previous release's logs, each after its
    /// file's name; any other panic counts as unreadable.
    fn previous_known_panics(&self) -> Vec<String> {
        let mut found = Vec::new();
        for path in &self.files {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            if !name.ends_with("-previous.log") {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
            let lines: Vec<&str> = text.lines().collect();
            for pair in lines.windows(2) {
                if pair[0].contains(PREVIOUS_PANIC.0) && pair[1].trim() == PREVIOUS_PANIC.1 {
                    found.push(format!("{name}: {}", pair[0]));
                }
            }
        }
        found
    }
}

/// A panic of the previous release (0.1.0) that this one fixed: at shutdown, a stream's
/// writer whose store had stopped for good polled a finished answer again (tokio's
/// oneshot panics). Nothing is lost by it (the store is gone, the stream ends), and the
/// old binary cannot change, so it is reported, not failed; `StreamWriter::resend` has the
/// fix and `a_store_gone_for_good_fails_the_flush_without_a_panic` its test. The panic
/// line's place and the message on the next line.
const PREVIOUS_PANIC: (&str, &str) = (
    "tokio-1.54.1/src/sync/oneshot.rs:1291:13",
    "called after complete",
);

impl Drop for Logs {
    /// Kept for a failed run to be read; gone after a passing one.
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The version a session opened now on the replica at `url` is written in: its hash's
/// `format` field, absent in format 1.
async fn session_format(redis: &str, url: &str) -> u8 {
    let mut client = Client::new(url);
    client.initialize().await;
    let session = client.session.clone().unwrap_or_default();
    let client = redis::Client::open(redis).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let format: Option<u8> = redis::cmd("HGET")
        .arg(format!("otpmcp:{{{session}}}:session"))
        .arg("format")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    format.unwrap_or(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx and the previous release's binary; scripts/upgrade-test runs it"]
async fn an_upgrade_and_a_rollback_behind_nginx_lose_nothing() {
    let previous = previous();
    let current = Build::current();
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let mut logs = Logs::new();
    let ports: Vec<u16> = (0..REPLICAS).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    let mut releases = ["previous"; REPLICAS];
    let mut formats = Vec::new();
    for (n, port) in ports.iter().enumerate() {
        let log = logs.next(n, "previous");
        replicas.push(Some(previous.replica(&redis_url, *port, log).await));
    }
    let nginx = Nginx::start(&ports).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    // More long-lived clients than tests/rolling_restart.rs has, so that each drain
    // likely hands some on from one release to the other.
    let mix = Mix {
        long: 2,
        tasks: 2,
        task_streams: 3,
    };
    let load = rolling::start_load(&nginx.url, mix, &stop, &tally);
    // Each replica upgraded in turn; the first rolled back, then upgraded again.
    let steps = [
        (0, "current", &current),
        (1, "current", &current),
        (2, "current", &current),
        (0, "previous", &previous),
        (0, "current", &current),
    ];
    for (n, release, build) in steps {
        // A rolling upgrade's pace: the calls of a few seconds complete between two steps.
        rolling::calls_complete(&tally, CALLS_BETWEEN).await;
        if let Some(old) = replicas[n].take() {
            let code = old.terminate().await;
            assert_eq!(code, Some(0), "replica {n} drained and exited cleanly");
        }
        let log = logs.next(n, release);
        replicas[n] = Some(build.replica(&redis_url, ports[n], log).await);
        releases[n] = release;
        eprintln!("upgrade: replica {n} now runs the {release} release");
        // The current release writes the previous release's format while a replica of
        // it lives, and its own once none does (store.write_format = "auto").
        let expected = if releases.contains(&"previous") { 1 } else { 2 };
        let at = releases.iter().position(|r| *r == "current");
        if let Some(url) = at
            .and_then(|at| replicas[at].as_ref())
            .map(|r| r.url.clone())
        {
            eventually(
                "the current release to write the expected format",
                || async { (session_format(&redis_url, &url).await == expected).then_some(()) },
            )
            .await;
            formats.push(expected);
        }
    }
    assert_eq!(
        formats,
        [1, 1, 2, 1, 2],
        "the formats written after each step"
    );
    rolling::calls_complete(&tally, 4).await;
    rolling::finish(&stop, load).await;
    for (n, replica) in replicas.iter_mut().enumerate() {
        if let Some(replica) = replica.take() {
            assert_eq!(replica.terminate().await, Some(0), "replica {n} exited");
        }
    }
    eprintln!(
        "upgrade: {} replacements (3 upgraded, 1 rolled back, 1 upgraded again); {} session calls exact ({} resumes), p99 {:?}; {} 2026-07-28 calls exact, p99 {:?}; long calls: {} whole, {} handed on and whole; {} tasks completed ({} seen handed on; the replicas logged {} runs of a stopped replica's task); {} task streams exactly once (resumed after {} cuts of their own, {} by a drain); refused and sent again: {} (502), {} (503)",
        steps.len(),
        tally.calls.load(Ordering::Relaxed),
        tally.resumes.load(Ordering::Relaxed),
        tally.p99(0),
        tally.stateless.load(Ordering::Relaxed),
        tally.p99(1),
        tally.long[0].load(Ordering::Relaxed),
        tally.long[1].load(Ordering::Relaxed),
        tally.tasks[0].load(Ordering::Relaxed),
        tally.tasks[1].load(Ordering::Relaxed),
        logs.lines(|line| line.contains(HANDED_ON_LOG)).len(),
        tally.task_streams[0].load(Ordering::Relaxed),
        tally.task_streams[1].load(Ordering::Relaxed),
        tally.task_streams[2].load(Ordering::Relaxed),
        tally.refused[0].load(Ordering::Relaxed),
        tally.refused[1].load(Ordering::Relaxed),
    );
    let known = logs.previous_known_panics();
    for line in &known {
        eprintln!("the previous release's known panic (fixed here): {line}");
    }
    let unreadable: Vec<String> = logs
        .unreadable()
        .into_iter()
        .filter(|line| !known.contains(line))
        .collect();
    for line in &unreadable {
        eprintln!("{line}");
    }
    assert!(
        unreadable.is_empty(),
        "{} log lines of records or messages a replica could not read (above; the logs are in {})",
        unreadable.len(),
        logs.dir.display()
    );
    assert!(tally.stateless.load(Ordering::Relaxed) > 0);
    assert!(
        tally.tasks[0].load(Ordering::Relaxed) > 0,
        "tasks completed"
    );
    assert!(
        tally.task_streams[0].load(Ordering::Relaxed) > 0,
        "task streams read"
    );
    drop(nginx);
}
