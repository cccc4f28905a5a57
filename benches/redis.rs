//! The Redis backend, against a redis-server this benchmark starts on a free loopback port:
//! - criterion: append (one, and 64 in flight) and replay of 100 and 10,000 missed events,
//!   through the store actor exactly as the runtime uses it;
//! - latency percentiles (printed, not criterion): an event stored by one replica reaching
//!   the connection another replica holds (our pub/sub path), beside the raw Redis
//!   mechanisms we chose between (PUBLISH → subscriber push, XADD → `XREAD BLOCK`).
//!
//! Run: `cargo bench --bench redis` (needs `redis-server` on PATH).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion};
use otpmcp::cluster::Router;
use otpmcp::config::{BackendKind, StoreConfig};
use otpmcp::event_store::redis::{RedisLink, connect};
use otpmcp::event_store::{EventStoreHandle, Feed, RedisStore, StoreMsg};
use otpmcp::ids::{SessionId, StreamKey, StreamNo};
use otpmcp::rt::slot::slot;
use otpmcp::session::SessionHandle;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::mpsc;

mod support;

use support::PAYLOAD;

/// A redis-server of our own, killed on drop.
struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_redis() -> Server {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"));
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--loglevel", "warning"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("redis-server: {e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    Server(child, port)
}

/// Receives forwarded events and reports when each arrived.
struct Sink;

impl Actor for Sink {
    type Msg = Feed;
    type State = mpsc::UnboundedSender<Instant>;
    type Arguments = mpsc::UnboundedSender<Instant>;
    async fn pre_start(
        &self,
        _: ActorRef<Feed>,
        tx: mpsc::UnboundedSender<Instant>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(tx)
    }
    async fn handle(
        &self,
        _: ActorRef<Feed>,
        msg: Feed,
        tx: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Feed::Event(_) = msg {
            let _ = tx.send(Instant::now());
        }
        Ok(())
    }
}

/// One replica's store actor on `url`, with its pub/sub routed to it.
async fn replica(url: &str) -> (EventStoreHandle, RedisLink) {
    let (writer, reader) = slot::<StoreMsg>("event store");
    let config = StoreConfig {
        backend: BackendKind::Redis,
        redis_url: url.into(),
        ..StoreConfig::default()
    };
    let handle = EventStoreHandle::new([reader]);
    let sessions = SessionHandle::new(slot("sessions").1, handle.clone());
    let routed = handle.clone();
    let news = otpmcp::server_news::NewsHub::default();
    let tasks = otpmcp::tasks::TaskHandle::new(handle.clone(), news.clone(), Default::default());
    let link = connect(&config, move |replica, keys| {
        let router = Router {
            replica,
            keys,
            store: routed,
            sessions,
            news,
            tasks,
            stops: Default::default(),
        };
        move |push| router.route(push)
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let store = RedisStore::new(link.clone(), Duration::from_secs(3600));
    support::spawn_shard(store, writer, handle.clone()).await;
    (handle, link)
}

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort_unstable();
    let at = |p: f64| samples[((samples.len() as f64 - 1.0) * p) as usize];
    println!(
        "{name:<44} n={:<5} p50 {:>8.1} µs   p99 {:>8.1} µs",
        samples.len(),
        at(0.50).as_secs_f64() * 1e6,
        at(0.99).as_secs_f64() * 1e6
    );
}

const SAMPLES: usize = 2000;

/// Event stored on `from`, delivered to a connection following the stream on `to`.
async fn delivery(
    from: &EventStoreHandle,
    to: &EventStoreHandle,
    session: SessionId,
) -> Vec<Duration> {
    let key = StreamKey::new(session, StreamNo(7));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let Ok((sink, _)) = Actor::spawn(None, Sink, tx).await else {
        panic!("sink");
    };
    let _ = from.append(key, Bytes::from_static(b"{}"), false).await;
    if to
        .subscribe(key, None, false, sink.get_derived())
        .await
        .is_err()
    {
        panic!("subscribe failed");
    }
    let mut out = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        let _ = from.append(key, Bytes::from_static(PAYLOAD), false).await;
        let Ok(Some(at)) = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await else {
            panic!("event not delivered");
        };
        out.push(at - start);
    }
    out
}

/// PUBLISH on one connection → RESP3 push on another.
async fn raw_pubsub(client: &redis::Client) -> Vec<Duration> {
    let (tx, mut rx) = mpsc::unbounded_channel::<redis::PushInfo>();
    let config = redis::AsyncConnectionConfig::new().set_push_sender(tx);
    let mut sub = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut publisher = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let _: () = sub
        .subscribe("bench:raw")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let start = Instant::now();
        let _: redis::RedisResult<i64> = redis::cmd("PUBLISH")
            .arg("bench:raw")
            .arg(PAYLOAD)
            .query_async(&mut publisher)
            .await;
        loop {
            let Some(push) = rx.recv().await else {
                panic!("push channel closed");
            };
            if push.kind == redis::PushKind::Message {
                break;
            }
        }
        out.push(start.elapsed());
    }
    out
}

/// XADD on one connection → `XREAD BLOCK` returning on another (which needs its own
/// connection, with no response timeout, per blocked reader).
async fn raw_xread(client: &redis::Client) -> Vec<Duration> {
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let mut reader = client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut writer = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::with_capacity(SAMPLES);
    let mut last = "0-0".to_owned();
    for _ in 0..SAMPLES {
        let mut r = reader.clone();
        let from = last.clone();
        let blocked = tokio::spawn(async move {
            let v: redis::RedisResult<redis::Value> = redis::cmd("XREAD")
                .arg("BLOCK")
                .arg(0)
                .arg("STREAMS")
                .arg("bench:xread")
                .arg(from)
                .query_async(&mut r)
                .await;
            (Instant::now(), v)
        });
        // Give the XREAD time to reach Redis before the XADD (not part of the latency).
        tokio::time::sleep(Duration::from_micros(200)).await;
        let start = Instant::now();
        let id: redis::RedisResult<String> = redis::cmd("XADD")
            .arg("bench:xread")
            .arg("*")
            .arg("d")
            .arg(PAYLOAD)
            .query_async(&mut writer)
            .await;
        let Ok((at, _)) = blocked.await else {
            panic!("reader failed");
        };
        last = id.unwrap_or_else(|e| panic!("{e}"));
        out.push(at.saturating_duration_since(start));
    }
    let _ = &mut reader;
    out
}

fn main() {
    let server = start_redis();
    let url = format!("redis://127.0.0.1:{}", server.1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"));
    let ((a, _), (b, _)) = rt.block_on(async { (replica(&url).await, replica(&url).await) });
    let payload = Bytes::from_static(PAYLOAD);
    let session = SessionId::random();
    rt.block_on(a.open_session(session))
        .unwrap_or_else(|e| panic!("{e}"));

    let mut c = Criterion::default()
        .sample_size(30)
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    let key = StreamKey::new(session, StreamNo(1));
    c.bench_function("redis/append", |bench| {
        bench.to_async(&rt).iter(|| async {
            let _ = a.append(key, payload.clone(), false).await;
        })
    });
    let mut group = c.benchmark_group("redis/append_concurrent");
    group.throughput(criterion::Throughput::Elements(64));
    group.bench_function("64_streams", |bench| {
        bench.to_async(&rt).iter(|| async {
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..64u64 {
                let (store, payload) = (a.clone(), payload.clone());
                let key = StreamKey::new(session, StreamNo(100 + i));
                tasks.spawn(async move { store.append(key, payload, false).await.is_ok() });
            }
            while tasks.join_next().await.is_some() {}
        })
    });
    group.finish();
    let mut group = c.benchmark_group("redis/replay_after");
    for missed in [100u64, 10_000] {
        let key = StreamKey::new(session, StreamNo(1000 + missed));
        let sink = rt.block_on(async {
            for _ in 0..missed {
                let _ = a.append(key, payload.clone(), false).await;
            }
            let (tx, _rx) = mpsc::unbounded_channel();
            std::mem::forget(_rx);
            match Actor::spawn(None, Sink, tx).await {
                Ok((sink, _)) => sink.get_derived(),
                Err(e) => panic!("sink: {e}"),
            }
        });
        group.bench_with_input(
            BenchmarkId::new("through_actor", missed),
            &missed,
            |bench, _| {
                bench.to_async(&rt).iter(|| async {
                    let read = support::replay_all(&b, key, sink.clone()).await;
                    assert_eq!(read, missed);
                })
            },
        );
    }
    group.finish();
    c.final_summary();

    println!(
        "\nlatency, {SAMPLES} sequential events each (append returns, then wait for delivery):"
    );
    let client = redis::Client::open(format!("{url}/?protocol=resp3").as_str())
        .unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(async {
        percentiles(
            "same replica: append → local connection",
            delivery(&a, &a, session).await,
        );
        percentiles(
            "cross replica: append on A → connection on B",
            delivery(&a, &b, session).await,
        );
        percentiles("raw: PUBLISH → subscriber push", raw_pubsub(&client).await);
        percentiles("raw: XADD → XREAD BLOCK returns", raw_xread(&client).await);
    });
    drop(server);
}
