//! The one-core ceiling of each actor every request goes through: its service time per
//! message, measured as the CPU time of a thread that runs that actor and nothing else,
//! with its mailbox full.
//!
//! - `store append`: one event-store shard appending an event (the memory backend) and
//!   feeding it to the connection following its stream (a sink actor here); a stream
//!   event is one append, a session `tools/call` two (priming and answer).
//! - `session hold`: the session manager taking a session `tools/call`'s hold (the one
//!   session-manager message of each request).
//! - `session create`, `session end`: `initialize` and `DELETE`.
//!
//! For each, five batches of 50,000 messages queued while the actor's thread is held,
//! then drained: the median CPU time per message on the actor's thread. 1 s ÷ that
//! service time is the most one core running the actor can serve. The thread's CPU time is read from
//! `/proc/thread-self/schedstat` (Linux, nanoseconds).
//!
//! Run: `cargo bench --bench ceilings`

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use otpmcp::event_store::memory::SharedBudget;
use otpmcp::event_store::{EventStoreHandle, MemoryStore, Retention};
use otpmcp::ids::{SessionId, StreamKey, StreamNo};
use otpmcp::protocol::RequestId;
use otpmcp::protocol::version::ProtocolVersion;
use otpmcp::rt::heir::lend;
use otpmcp::rt::slot::slot;
use otpmcp::session::{Directory, NewSession, SessionArgs, SessionHandle, SessionManager};
use ractor::Actor;
use support::{PAYLOAD, Sink};
use tokio::runtime::{Handle, Runtime};
use tokio::sync::{mpsc, oneshot};

mod support;

/// Sessions (and streams) the messages are spread over.
const CALLERS: u64 = 64;
/// Messages queued per batch (`BATCH` in the environment: fewer under callgrind).
fn batch() -> u64 {
    std::env::var("BATCH")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(50_000)
}
const RUNS: usize = 5;

/// CPU time this thread has run, in nanoseconds.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("/proc/thread-self/schedstat is unreadable"))
}

/// A thread with a runtime of its own, for one actor; answers probes of its CPU time.
struct Dedicated {
    handle: Handle,
    probe: mpsc::UnboundedSender<oneshot::Sender<u64>>,
}

impl Dedicated {
    fn start() -> Self {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("runtime: {e}"));
            let (probe, mut probes) = mpsc::unbounded_channel::<oneshot::Sender<u64>>();
            let _ = tx.send((rt.handle().clone(), probe));
            rt.block_on(async move {
                while let Some(reply) = probes.recv().await {
                    let _ = reply.send(thread_cpu_ns());
                }
            });
        });
        let (handle, probe) = rx.recv().unwrap_or_else(|e| panic!("thread: {e}"));
        Self { handle, probe }
    }

    /// Blocks the actor's thread until the returned sender is used (or dropped).
    fn hold(&self) -> std::sync::mpsc::Sender<()> {
        let (release, held) = std::sync::mpsc::channel::<()>();
        self.handle.spawn(async move {
            let _ = held.recv();
        });
        release
    }

    async fn cpu_ns(&self) -> u64 {
        let (tx, rx) = oneshot::channel();
        let _ = self.probe.send(tx);
        rx.await.unwrap_or_else(|e| panic!("probe: {e}"))
    }
}

/// One shard's actor, spawned on `on`.
async fn store_shard(on: &Handle) -> EventStoreHandle {
    let (writer, reader) = slot("event store");
    let handle = EventStoreHandle::new([reader]);
    let store = MemoryStore::shard(Retention::default(), Arc::new(SharedBudget::new(1)), 0);
    let started = on.spawn(support::spawn_shard(store, writer, handle.clone()));
    if let Err(e) = started.await {
        panic!("the store did not start: {e}");
    }
    handle
}

/// The session manager, spawned on `on`, with its store on the callers' runtime.
async fn session_manager(on: &Handle) -> SessionHandle {
    let store = store_shard(&Handle::current()).await;
    let (writer, reader) = slot("session manager");
    let sessions = SessionHandle::new(reader, store.clone());
    let spawned = on.spawn(async move {
        let args = SessionArgs {
            table: lend(Default::default()).0,
            store,
            session_timeout: Duration::from_secs(3600),
            max_sessions: 1_000_000,
            max_open_per_session: 1_000,
            max_sessions_per_client: 0,
            max_sessions_per_principal: 0,
            root_cancel: Default::default(),
            sweep_interval: Duration::from_secs(3600),
            directory: Directory::Local,
        };
        Actor::spawn(None, SessionManager, args).await
    });
    let Ok(Ok((actor, _))) = spawned.await else {
        panic!("the session manager did not start");
    };
    writer.publish(Some(actor));
    std::mem::forget(writer);
    sessions
}

/// Queues `batch()` messages while the actor's thread is held, then lets it drain them and
/// reports the median of `RUNS` batches: the actor's CPU time per message and the rate
/// it drained at. Held, the actor never waits for its next message, so this is its cost
/// at saturation, the ceiling, whatever the callers' threads cost.
async fn measure<F, Fut>(name: &str, actor: &Dedicated, call: F)
where
    F: Fn(u64) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let batch = batch();
    let mut runs = Vec::new();
    for run in 0..RUNS as u64 {
        let cpu = actor.cpu_ns().await;
        let release = actor.hold();
        let queued = Arc::new((AtomicU64::new(0), tokio::sync::Notify::new()));
        let mut calls = tokio::task::JoinSet::new();
        for n in 0..batch {
            let queued = queued.clone();
            let call = call(run * batch + n);
            calls.spawn(async move {
                let mut call = std::pin::pin!(call);
                // The first poll sends the message; the rest waits for the answer.
                std::future::poll_fn(|cx| {
                    let _ = call.as_mut().poll(cx);
                    std::task::Poll::Ready(())
                })
                .await;
                if queued.0.fetch_add(1, Ordering::Relaxed) + 1 == batch {
                    queued.1.notify_one();
                }
                call.await;
            });
        }
        queued.1.notified().await;
        let started = Instant::now();
        let _ = release.send(());
        while calls.join_next().await.is_some() {}
        let wall = started.elapsed().as_nanos() as f64;
        let busy = (actor.cpu_ns().await - cpu) as f64;
        runs.push((busy / batch as f64, batch as f64 / wall * 1e9));
    }
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (service, rate) = runs[RUNS / 2];
    println!(
        "{name:<14} service {service:>6.0} ns/message  ceiling {:>9.0}/s on one core  (drained {rate:>9.0}/s)",
        1e9 / service,
    );
}

fn main() {
    let callers: Runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    callers.block_on(async {
        let actor = Dedicated::start();
        let store = store_shard(&actor.handle).await;
        let keys: Arc<Vec<StreamKey>> = Arc::new(
            (0..CALLERS)
                .map(|_| StreamKey::new(SessionId::random(), StreamNo(1)))
                .collect(),
        );
        for key in keys.iter() {
            let _ = store.open_session(key.session).await;
            let Ok((sink, _)) = Actor::spawn(None, Sink, ()).await else {
                panic!("sink");
            };
            let followed = store.subscribe(*key, None, true, sink.get_derived()).await;
            assert!(followed.is_ok());
        }
        let payload = Bytes::from_static(PAYLOAD);
        measure("store append", &actor, move |n| {
            let (store, keys, payload) = (store.clone(), keys.clone(), payload.clone());
            async move {
                let key = keys[(n % CALLERS) as usize];
                let appended = store.append(key, payload, false).await;
                assert!(appended.is_ok_and(|id| id.is_some()));
            }
        })
        .await;

        if std::env::var_os("ONLY_STORE").is_some() {
            return;
        }
        let actor = Dedicated::start();
        let sessions = session_manager(&actor.handle).await;
        let new_session = || NewSession {
            protocol_version: ProtocolVersion::V2025_11_25,
            client_capabilities: Arc::default(),
            client_info: serde_json::Value::Null,
            lists: Vec::new(),
            client: None,
            owner: None,
        };
        let mut ids = Vec::new();
        for _ in 0..CALLERS {
            ids.push(
                sessions
                    .create(new_session())
                    .await
                    .unwrap_or_else(|e| panic!("{e}")),
            );
        }
        let ids = Arc::new(ids);
        let holding = sessions.clone();
        measure("session hold", &actor, move |n| {
            let (sessions, ids) = (holding.clone(), ids.clone());
            async move {
                let id = ids[(n % CALLERS) as usize];
                let request = RequestId::Number(n as i64);
                let held = sessions.hold(id, None, true, Some(request)).await;
                assert!(held.is_ok());
            }
        })
        .await;

        // Sessions made and ended by the thousand: the ids come back from `create`.
        let made = Arc::new(std::sync::Mutex::new(Vec::new()));
        let creating = (sessions.clone(), made.clone());
        measure("session create", &actor, move |_| {
            let (sessions, made) = creating.clone();
            let new = new_session();
            async move {
                let id = sessions.create(new).await.unwrap_or_else(|e| panic!("{e}"));
                made.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            }
        })
        .await;
        let made = std::mem::take(&mut *made.lock().unwrap_or_else(|e| e.into_inner()));
        let made = Arc::new(made);
        let ending = (sessions.clone(), made.clone());
        measure("session end", &actor, move |n| {
            let (sessions, made) = ending.clone();
            async move {
                let id = made[n as usize % made.len()];
                let _ = sessions.terminate(id, None).await;
            }
        })
        .await;
    });
}
