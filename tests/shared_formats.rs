//! The version of what replicas share in Redis (src/event_store/format.rs), on a
//! redis-server of the test's own: a replica states the newest format it reads, writes
//! the oldest a live replica reads (`store.write_format = "auto"`), so a replica of the
//! version before (a lease without a stated format, as 0.1.0 keeps it) makes it write
//! format 1 until that replica is gone; a pinned format holds whoever runs. The real
//! upgrade, from the previous release's own binary, is scripts/upgrade-test.

mod common;

use common::redis::RedisServer;
use common::stateless::{Stateless, confirm_tool};
use common::{Client, TestServer, eventually};
use otpmcp::McpServer;
use otpmcp::config::{BackendKind, Config, NonZeroDuration, WriteFormatSetting};
use otpmcp::handler::ToolRegistry;
use redis::aio::MultiplexedConnection;
use serde_json::json;

/// A replica of a version before formats: it never states one.
const OLD_REPLICA: u64 = 9_999;

async fn replica(redis: &RedisServer, write_format: WriteFormatSetting) -> TestServer {
    let url = redis.url();
    let mut tools = ToolRegistry::default();
    tools.register(confirm_tool());
    TestServer::start_with(
        move |c: &mut Config| {
            c.store.backend = BackendKind::Redis;
            c.store.redis_url = url.into();
            c.store.write_format = write_format;
            // Renewals, where the format is learned, every 100 ms.
            c.store.lease_ttl = NonZeroDuration::from_millis(300);
        },
        McpServer::new(tools),
    )
    .await
}

async fn connect(redis: &RedisServer) -> MultiplexedConnection {
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

async fn query<T: redis::FromRedisValue>(conn: &MultiplexedConnection, cmd: &mut redis::Cmd) -> T {
    cmd.query_async(&mut conn.clone())
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The newest format each replica states it reads.
async fn stated_formats(conn: &MultiplexedConnection) -> Vec<u8> {
    let stated: std::collections::HashMap<String, u8> =
        query(conn, redis::cmd("HGETALL").arg("otpmcp:{otpmcp}:formats")).await;
    stated.into_values().collect()
}

/// The version the record of a task started now is written in (1: no `v`).
async fn new_task_format(conn: &MultiplexedConnection, client: &Stateless) -> u8 {
    let id = client.start_task("confirm", json!({})).await;
    let record: String = query(conn, redis::cmd("GET").arg(format!("otpmcp:task:{id}"))).await;
    otpmcp::event_store::format::version(record.as_bytes())
}

/// The `format` field of a session opened now (`None`: format 1).
async fn new_session_format(conn: &MultiplexedConnection, url: &str) -> Option<String> {
    let mut client = Client::new(url);
    client.initialize().await;
    let session = client.session.clone().unwrap_or_default();
    let key = format!("otpmcp:{{{session}}}:session");
    query(conn, redis::cmd("HGET").arg(key).arg("format")).await
}

#[tokio::test]
async fn a_replica_writes_the_oldest_format_a_live_replica_reads() {
    let redis = RedisServer::start();
    let conn = connect(&redis).await;
    let server = replica(&redis, WriteFormatSetting::Auto).await;
    let client = Stateless::new(&server.url).with_tasks();
    // Alone, it states format 2 and writes it.
    assert_eq!(stated_formats(&conn).await, [2]);
    assert_eq!(new_task_format(&conn, &client).await, 2);
    assert_eq!(
        new_session_format(&conn, &server.url).await.as_deref(),
        Some("2")
    );

    // A replica of the version before joins: a live lease, no stated format.
    let (secs, micros): (u64, u64) = query(&conn, &mut redis::cmd("TIME")).await;
    let expiry = secs * 1000 + micros / 1000 + 60_000;
    let _: i64 = query(
        &conn,
        redis::cmd("ZADD")
            .arg("otpmcp:{otpmcp}:replicas")
            .arg(expiry)
            .arg(OLD_REPLICA),
    )
    .await;
    eventually(
        "format 1 while a replica of the version before lives",
        || async { (new_task_format(&conn, &client).await == 1).then_some(()) },
    )
    .await;
    assert_eq!(new_session_format(&conn, &server.url).await, None);
    let entry = client.start_task("confirm", json!({})).await;

    // It leaves (its lease let go, as a drained replica does): format 2 again, and the
    // record written in format 1 still reads.
    let _: i64 = query(
        &conn,
        redis::cmd("ZADD")
            .arg("otpmcp:{otpmcp}:replicas")
            .arg(0)
            .arg(OLD_REPLICA),
    )
    .await;
    eventually("format 2 once it is gone", || async {
        (new_task_format(&conn, &client).await == 2).then_some(())
    })
    .await;
    let task = client.until_status(&entry, "input_required").await;
    assert_eq!(task["taskId"], entry.as_str());
    server.shutdown().await;
}

#[tokio::test]
async fn a_pinned_format_holds_whoever_runs() {
    let redis = RedisServer::start();
    let conn = connect(&redis).await;
    let server = replica(&redis, WriteFormatSetting::Pinned(1)).await;
    let client = Stateless::new(&server.url).with_tasks();
    // It still states what it reads: another replica on "auto" writes format 2.
    assert_eq!(stated_formats(&conn).await, [2]);
    assert_eq!(new_task_format(&conn, &client).await, 1);
    assert_eq!(new_session_format(&conn, &server.url).await, None);
    server.shutdown().await;
}

#[test]
fn a_format_this_build_cannot_write_is_refused_with_its_key() {
    for bad in ["0", "3", "\"latest\""] {
        let toml = format!("[store]\nwrite_format = {bad}\n");
        let Err(e) = Config::from_toml(&toml) else {
            panic!("write_format = {bad} was taken");
        };
        let text = e.to_string();
        assert!(
            text.contains("write_format") && text.contains("auto"),
            "{text}"
        );
    }
    for (good, setting) in [
        ("\"auto\"", WriteFormatSetting::Auto),
        ("1", WriteFormatSetting::Pinned(1)),
        ("2", WriteFormatSetting::Pinned(2)),
    ] {
        let toml = format!("[store]\nwrite_format = {good}\n");
        let config = Config::from_toml(&toml).unwrap_or_else(|e| panic!("{good}: {e}"));
        assert_eq!(config.store.write_format, setting);
    }
}
