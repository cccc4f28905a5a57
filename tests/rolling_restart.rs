//! Rolling restarts behind Debian's nginx with `deploy/nginx/otpmcp.conf`: three replicas
//! on one Redis, each restarted in turn under load (SIGTERM, drain, exit, start on the
//! same port), at a rolling restart's pace. Every streamed session call shorter than the
//! drain ends with its result and its events exact, resuming across any cut; every
//! 2026-07-28 call ends with its notes and its result. A request refused before it ran is
//! sent again: a draining replica's 503, or nginx's 502 for a connection the exiting
//! replica reset before reading it (nginx does not re-send a POST it already sent; a
//! client cannot tell that such a call never ran: docs/deployment.md). A session call
//! longer than the drain is handed on: another replica runs it again on the same stream,
//! and its client sees the first run's events, exact, a note, then the whole new run and
//! its result; every durable task completes, handed on to another replica by each restart
//! that stops its own. `scripts/rolling-restart` runs it longer.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::nginx::Nginx;
use common::redis::{RedisServer, free_port};
use common::rolling::{self, Build, CALLS_BETWEEN, Mix, Tally};

const REPLICAS: usize = 3;

/// Times each replica is restarted: 2 in CI, more from `scripts/rolling-restart`
/// (`ROLLING_ROUNDS`).
fn rounds() -> usize {
    std::env::var("ROLLING_ROUNDS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs nginx; ./scripts/test runs it"]
async fn replicas_restarted_in_turn_behind_nginx_lose_no_call() {
    let redis = RedisServer::start();
    let redis_url = redis.url();
    let build = Build::current();
    let quiet = std::process::Stdio::null;
    let ports: Vec<u16> = (0..REPLICAS).map(|_| free_port()).collect();
    let mut replicas = Vec::new();
    for port in &ports {
        replicas.push(Some(build.replica(&redis_url, *port, quiet()).await));
    }
    let nginx = Nginx::start(&ports).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mix = Mix {
        long: 1,
        tasks: 1,
        task_streams: 0,
    };
    let load = rolling::start_load(&nginx.url, mix, &stop, &tally);
    for _round in 0..rounds() {
        for (n, port) in ports.iter().enumerate() {
            // A rolling restart's pace: the calls of a few seconds complete between two
            // restarts.
            rolling::calls_complete(&tally, CALLS_BETWEEN).await;
            if let Some(old) = replicas[n].take() {
                let code = old.terminate().await;
                assert_eq!(code, Some(0), "replica {n} drained and exited cleanly");
            }
            replicas[n] = Some(build.replica(&redis_url, *port, quiet()).await);
        }
    }
    rolling::calls_complete(&tally, 4).await;
    rolling::finish(&stop, load).await;
    eprintln!(
        "rolling restart: {} restarts; {} session calls exact ({} resumes), p99 {:?}; {} 2026-07-28 calls exact, p99 {:?}; long calls: {} whole, {} handed on and whole; {} tasks completed ({} seen handed on); refused and sent again: {} (502), {} (503)",
        rounds() * REPLICAS,
        tally.calls.load(Ordering::Relaxed),
        tally.resumes.load(Ordering::Relaxed),
        tally.p99(0),
        tally.stateless.load(Ordering::Relaxed),
        tally.p99(1),
        tally.long[0].load(Ordering::Relaxed),
        tally.long[1].load(Ordering::Relaxed),
        tally.tasks[0].load(Ordering::Relaxed),
        tally.tasks[1].load(Ordering::Relaxed),
        tally.refused[0].load(Ordering::Relaxed),
        tally.refused[1].load(Ordering::Relaxed),
    );
    assert!(tally.stateless.load(Ordering::Relaxed) > 0);
    assert!(
        tally.tasks[0].load(Ordering::Relaxed) > 0,
        "tasks completed"
    );
    drop(nginx);
}
