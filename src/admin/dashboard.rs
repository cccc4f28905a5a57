//! `GET /dashboard`: a live view of the running server, and `GET /dashboard/events`, the
//! SSE feed that drives it.
//!
//! A recorder task owns the snapshots: every `admin.dashboard_interval` it asks the
//! supervisor for the tree, the session manager for its sessions and the store for its
//! occupancy, and keeps the last `admin.dashboard_history` snapshots, numbered. A feed
//! connection asks it for those after its `Last-Event-ID` (all of them on a first
//! connection, so the page has the last minutes' rates at once), then follows live. So
//! the page resumes after a dropped connection the way an MCP client does: by event id,
//! with nothing missed within the history.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use ractor::{ActorRef, ActorStatus};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio_util::task::AbortOnDropHandle;

use super::Probes;
use crate::stream::{SseBody, sse};
use crate::supervisor::{SupervisorMsg, Tree};
use crate::telemetry::durations::OPERATIONS;
use crate::telemetry::metrics;

/// The page: one file, no build step, no external assets.
const PAGE: &str = include_str!("dashboard.html");

/// Most sessions a snapshot lists (the most recently active).
const SESSIONS_SHOWN: usize = 20;
/// Most open streams a snapshot lists per session.
const STREAMS_PER_SESSION: usize = 8;
/// Most stream actors a snapshot lists under the listener.
const STREAMS_SHOWN: usize = 200;

/// A numbered snapshot, as the SSE frame that carries it.
type Frame = (u64, Bytes);

/// A feed connection joining: the snapshots after `after` (all if `None`), and the live
/// ones to come.
struct Join {
    after: Option<u64>,
    reply: oneshot::Sender<(Vec<Frame>, broadcast::Receiver<Frame>)>,
}

/// The recorder, reached through its request channel; stops when dropped.
#[derive(Debug, Clone)]
pub(super) struct Recorder {
    joins: mpsc::Sender<Join>,
    _task: std::sync::Arc<AbortOnDropHandle<()>>,
}

impl Recorder {
    /// Starts recording what `probes` see of `root`.
    pub(super) fn start(probes: Probes, root: ActorRef<SupervisorMsg>) -> Self {
        let (joins, rx) = mpsc::channel(64);
        let task = AbortOnDropHandle::new(tokio::spawn(record(probes, root, rx)));
        Self {
            joins,
            _task: std::sync::Arc::new(task),
        }
    }
}

async fn record(probes: Probes, root: ActorRef<SupervisorMsg>, mut joins: mpsc::Receiver<Join>) {
    let admin = &probes.config.admin;
    let history = admin.dashboard_history;
    let mut ring: VecDeque<Frame> = VecDeque::with_capacity(history.get());
    let (live, _) = broadcast::channel(16);
    let mut ticks = tokio::time::interval(admin.dashboard_interval.get());
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0;
    loop {
        tokio::select! {
            _ = ticks.tick() => {
                seq += 1;
                let snapshot = snapshot(&probes, &root, seq).await;
                let frame = (seq, Bytes::from(snapshot.to_string()));
                if ring.len() == history.get() {
                    ring.pop_front();
                }
                ring.push_back(frame.clone());
                let _ = live.send(frame);
            }
            join = joins.recv() => {
                let Some(join) = join else { return };
                let backlog = ring
                    .iter()
                    .filter(|(n, _)| join.after.is_none_or(|after| *n > after))
                    .cloned()
                    .collect();
                let _ = join.reply.send((backlog, live.subscribe()));
            }
        }
    }
}

/// Serves the page.
pub(super) async fn page() -> Response {
    let mut response = PAGE.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // Everything it needs is inline; nothing else may run in it.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
        ),
    );
    response
}

/// Serves the feed: `retry`, the backlog after `Last-Event-ID`, then live snapshots.
pub(super) async fn events(State(probes): State<Probes>, headers: HeaderMap) -> Response {
    let Some(recorder) = probes.recorder.clone() else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let (reply, joined) = oneshot::channel();
    if recorder.joins.send(Join { after, reply }).await.is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let Ok((backlog, mut live)) = joined.await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    tokio::spawn(async move {
        let retry = probes
            .config
            .admin
            .dashboard_interval
            .get()
            .max(std::time::Duration::from_secs(1));
        let mut last = after.unwrap_or(0);
        if tx.send(sse::retry(retry)).await.is_err() {
            return;
        }
        for (n, snapshot) in backlog {
            last = n;
            if tx.send(frame(n, &snapshot)).await.is_err() {
                return;
            }
        }
        loop {
            match live.recv().await {
                Ok((n, snapshot)) if n > last => {
                    last = n;
                    // A reader that does not keep up is dropped; its page reconnects
                    // with the last id it saw.
                    if tx.send(frame(n, &snapshot)).await.is_err() {
                        return;
                    }
                }
                Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    });
    let mut response = axum::body::Body::new(SseBody::detached(rx)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

fn frame(n: u64, snapshot: &Bytes) -> Bytes {
    let mut out = format!("id: {n}\nevent: snapshot\ndata: ").into_bytes();
    out.extend_from_slice(snapshot);
    out.extend_from_slice(b"\n\n");
    Bytes::from(out)
}

/// One snapshot, as the page reads it (see docs/operations.md).
async fn snapshot(probes: &Probes, root: &ActorRef<SupervisorMsg>, seq: u64) -> Value {
    let timeout = super::PROBE_TIMEOUT;
    let tree = root.call(SupervisorMsg::Tree, Some(timeout));
    let sessions = tokio::time::timeout(timeout, probes.sessions.overview(SESSIONS_SHOWN));
    let (tree, sessions, owned) = tokio::join!(tree, sessions, super::metrics::owned(probes));
    let tree = match tree {
        Ok(ractor::rpc::CallResult::Success(tree)) => tree_json(&probes.root.get_status(), &tree),
        _ => {
            json!({"name": "root", "state": state(&probes.root.get_status()), "uptime_ms": 0, "restarts": 0, "children": []})
        }
    };
    let (total, recent) = match sessions {
        Ok(Ok(found)) => found,
        _ => (0, Vec::new()),
    };
    let mut shown = Vec::with_capacity(recent.len());
    for info in recent {
        let short: String = info.id.to_string().chars().take(8).collect();
        // Only sessions with something open have open streams; a session's finished
        // streams (thousands, under load) are not listed.
        let positions = match info.open {
            0 => Ok(Ok(Vec::new())),
            _ => {
                let asked = probes.store.open_streams(info.id, STREAMS_PER_SESSION);
                tokio::time::timeout(timeout, asked).await
            }
        };
        let streams: Vec<Value> = match positions {
            Ok(Ok(positions)) => positions
                .into_iter()
                .map(|(stream, seq)| {
                    json!({
                        "stream": stream.0,
                        "kind": if stream.is_standalone() { "get" } else { "post" },
                        "last_event_id": format!("{short}…/{}/{seq}", stream.0),
                    })
                })
                .collect(),
            _ => Vec::new(),
        };
        shown.push(json!({
            "id": short,
            "protocol_version": info.protocol_version.as_str(),
            "age_ms": info.connected_for.as_millis() as u64,
            "idle_ms": info.idle_for.as_millis() as u64,
            "open": info.open,
            "streams": streams,
        }));
    }
    let operations = OPERATIONS.each();
    let requests: u64 = operations.iter().map(|(_, h)| h.count()).sum();
    let errors: u64 = operations
        .iter()
        .filter(|(labels, _)| labels.error.is_some())
        .map(|(_, h)| h.count())
        .sum();
    let config = &probes.config;
    json!({
        "seq": seq,
        "at_ms": SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0),
        "replica": probes.redis.as_ref().map_or(0, |link| link.replica),
        "backend": if probes.redis.is_some() { "redis" } else { "memory" },
        "tree": tree,
        "sessions": shown,
        "sessions_total": total,
        "store": {
            "events": owned.store.map(|(events, _)| events),
            "bytes": owned.store.map(|(_, bytes)| bytes),
            "sessions": total,
            "limits": {
                "session_events": config.sse.max_session_events,
                "session_bytes": config.sse.max_session_bytes,
                "sessions": config.server.max_sessions,
            },
        },
        "totals": {
            "requests": requests,
            "errors": errors,
            "replays": metrics::REPLAYS.total(),
            "replayed_events": metrics::EVENTS_REPLAYED.get(),
            "evictions": metrics::EVENTS_EVICTED.total(),
            "restarts": metrics::ACTOR_RESTARTS.total(),
            "sessions_refused": metrics::SESSIONS_REFUSED.total(),
            "sessions_created": metrics::SESSIONS_CREATED.get(),
        },
        "cluster": cluster(probes).await,
    })
}

fn state(status: &ActorStatus) -> &'static str {
    match status {
        ActorStatus::Unstarted | ActorStatus::Starting => "starting",
        ActorStatus::Running | ActorStatus::Upgrading | ActorStatus::Draining => "running",
        ActorStatus::Stopping => "stopping",
        ActorStatus::Stopped => "stopped",
    }
}

fn tree_json(root: &ActorStatus, tree: &Tree) -> Value {
    let children: Vec<Value> = tree
        .children
        .iter()
        .map(|child| {
            // The store's shards, or the listener's stream actors.
            let shards = child.shards.iter().enumerate().map(|(n, shard)| {
                json!({
                    "name": format!("shard {n}"),
                    "state": state(&shard.status),
                    "uptime_ms": shard.uptime.as_millis() as u64,
                    "restarts": shard.restarts,
                    "children": [],
                })
            });
            let streams = child.children.iter().take(STREAMS_SHOWN).map(|cell| {
                json!({
                    "name": format!("stream {}", cell.get_id()),
                    "state": state(&cell.get_status()),
                    "uptime_ms": 0,
                    "restarts": 0,
                    "children": [],
                })
            });
            let grandchildren: Vec<Value> = shards.chain(streams).collect();
            json!({
                "name": child.name,
                "state": state(&child.status),
                "uptime_ms": child.uptime.as_millis() as u64,
                "restarts": child.restarts,
                "children": grandchildren,
            })
        })
        .collect();
    json!({
        "name": "root",
        "state": state(root),
        "uptime_ms": tree.uptime.as_millis() as u64,
        "restarts": 0,
        "children": children,
    })
}

/// The replicas sharing Redis, and this one's leases; `null` in memory.
async fn cluster(probes: &Probes) -> Value {
    let Some(link) = &probes.redis else {
        return Value::Null;
    };
    let mut conn = link.commands();
    let mut cmd = redis::cmd("ZRANGE");
    cmd.arg(link.keys.replicas()).arg(0).arg(-1);
    let call = cmd.query_async::<Vec<u64>>(&mut conn);
    let replicas = match tokio::time::timeout(super::PROBE_TIMEOUT, call).await {
        Ok(Ok(ids)) => ids,
        _ => vec![link.replica],
    };
    let replicas: Vec<Value> = replicas
        .into_iter()
        .map(|id| json!({"id": id, "self": id == link.replica, "alive": true}))
        .collect();
    json!({
        "replicas": replicas,
        "leases_held": metrics::LEASES_HELD.get(),
        "requests_reaped": metrics::REQUESTS_REAPED.get(),
    })
}
