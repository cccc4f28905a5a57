//! Durable tasks across replicas on one Redis (a redis-server of the test's own): a task
//! started on A is polled, answered and cancelled on B; a listen stream on B hears A's
//! changes; when A is killed (SIGKILL) mid-task, B ends its task `failed`, or runs a
//! re-runnable tool again to completion; and finished results outlive every replica.

mod common;

use std::time::Duration;

use common::redis::{RedisServer, binary_on};
use common::stateless::{Stateless, confirm_tool, wait_tool};
use common::{Binary, TestServer};
use otpmcp::McpServer;
use otpmcp::config::{BackendKind, Config};
use otpmcp::handler::{ToolRegistry, tool};
use otpmcp::protocol::methods::{CallToolResult, ListKind};
use otpmcp::tasks::{LOST_REPLICA_MESSAGE, STOPPED_REPLICA_MESSAGE};
use serde_json::{Value, json};

fn tools() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(confirm_tool())
        .register(wait_tool(Default::default()))
        .register(
            tool("touch", |(), ctx| async move {
                ctx.notify_list_changed(ListKind::Tools).await?;
                Ok(CallToolResult::text("told"))
            })
            .description("Announces a tools list change."),
        );
    McpServer::new(tools)
}

async fn replica(redis: &RedisServer) -> TestServer {
    let url = redis.url();
    TestServer::start_with(
        move |c: &mut Config| {
            c.store.backend = BackendKind::Redis;
            c.store.redis_url = url.into();
            c.stateless.request_state_key = "shared by the replicas".into();
        },
        tools(),
    )
    .await
}

#[tokio::test]
async fn a_task_started_on_one_replica_is_polled_answered_and_cancelled_on_another() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let on_a = Stateless::new(&a.url).with_tasks();
    let on_b = on_a.at(&b.url);

    let id = on_a.start_task("confirm", json!({})).await;
    let waiting = on_b.until_status(&id, "input_required").await;
    let key = waiting["inputRequests"]
        .as_object()
        .and_then(|m| m.keys().next().cloned())
        .unwrap_or_else(|| panic!("no question: {waiting}"));
    let ack = on_b
        .ask(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"ok": true}}}}),
        )
        .await;
    assert_eq!(ack.result()["resultType"], "complete");
    let done = on_b.until_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "ok=true");
    assert_eq!(on_a.task(&id).await.result()["status"], "completed");

    let id = on_a.start_task("wait", json!({})).await;
    let ack = on_b.ask("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack.result()["resultType"], "complete");
    on_b.until_status(&id, "cancelled").await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn a_listen_stream_on_one_replica_hears_another_replicas_changes_and_tasks() {
    let redis = RedisServer::start();
    let (a, b) = (replica(&redis).await, replica(&redis).await);
    let on_a = Stateless::new(&a.url).with_tasks();
    let on_b = on_a.at(&b.url);
    let id = on_a.start_task("wait", json!({})).await;

    let (mut stream, _) = on_b
        .listen(json!({"toolsListChanged": true, "taskIds": [id]}))
        .await;

    on_a.ask("tools/call", json!({"name": "touch", "arguments": {}}))
        .await;
    // The task's own start may be heard (relayed from A) before or after the change.
    let mut next_other_than_working = async || loop {
        let note = stream.next_json().await;
        if !(note["method"] == "notifications/tasks" && note["params"]["status"] == "working") {
            return note;
        }
    };
    let changed = next_other_than_working().await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    on_a.ask("tasks/cancel", json!({"taskId": id})).await;
    let task = next_other_than_working().await;
    assert_eq!(task["method"], "notifications/tasks", "{task}");
    assert_eq!(task["params"]["taskId"], id.as_str());
    assert_eq!(task["params"]["status"], "cancelled");
    a.shutdown().await;
    b.shutdown().await;
}

/// Starts a long `stream_events` task on `a`, kills `a` with SIGKILL once the task is
/// seen working from `b`, and returns the task's end as `b` reports it.
async fn kill_mid_task(mut a: Binary, b: &Binary, count: u64) -> Value {
    let on_a = Stateless::new(&a.url).with_tasks();
    let on_b = on_a.at(&b.url);
    let id = on_a
        .start_task("stream_events", json!({"count": count, "interval_ms": 20}))
        .await;
    on_b.until_status(&id, "working").await;
    let _ = a.child.kill();
    let _ = a.child.wait();
    common::eventually("the lost task to end", || async {
        let task = on_b.task(&id).await.result().clone();
        ["failed", "completed"]
            .contains(&task["status"].as_str().unwrap_or(""))
            .then_some(task)
    })
    .await
}

#[tokio::test]
async fn a_task_whose_replica_is_killed_fails_on_another_within_the_lease() {
    let redis = RedisServer::start();
    let a = binary_on(&redis, false).await;
    let b = binary_on(&redis, false).await;
    let started = std::time::Instant::now();
    let end = kill_mid_task(a, &b, 500).await;
    assert_eq!(end["status"], "failed", "{end}");
    assert_eq!(end["error"]["code"], -32603);
    assert_eq!(end["error"]["message"], LOST_REPLICA_MESSAGE);
    assert!(end.get("result").is_none());
    // Well before the 10 s the task itself would have taken.
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_rerunnable_task_whose_replica_is_killed_completes_on_another() {
    let redis = RedisServer::start();
    let a = binary_on(&redis, true).await;
    let b = binary_on(&redis, true).await;
    let end = kill_mid_task(a, &b, 60).await;
    assert_eq!(end["status"], "completed", "{end}");
    assert_eq!(end["result"]["content"][0]["text"], "streamed 60 events");
}

/// A rolling restart may stop one task's replica twice: each planned stop hands the task
/// on, and none counts as a lost attempt (a lost replica allows one re-run only).
#[tokio::test]
async fn a_rerunnable_task_is_handed_on_by_each_planned_restart() {
    let redis = RedisServer::start();
    let a = binary_on(&redis, true).await;
    let b = binary_on(&redis, true).await;
    let on_a = Stateless::new(&a.url).with_tasks();
    let on_b = on_a.at(&b.url);
    let id = on_a
        .start_task("stream_events", json!({"count": 100, "interval_ms": 20}))
        .await;
    on_b.until_status(&id, "working").await;
    let handed_on = |on: Stateless, id: String| async move {
        common::eventually("the task to run again elsewhere", || async {
            let task = on.task(&id).await.result().clone();
            (task["statusMessage"] == "restarted after its replica shut down").then_some(task)
        })
        .await
    };
    assert_eq!(a.terminate().await, Some(0));
    let task = handed_on(on_b.clone(), id.clone()).await;
    assert_eq!(task["status"], "working", "{task}");
    let c = binary_on(&redis, true).await;
    let on_c = on_a.at(&c.url);
    assert_eq!(b.terminate().await, Some(0));
    handed_on(on_c.clone(), id.clone()).await;
    let end = on_c.until_status(&id, "completed").await;
    assert_eq!(end["result"]["content"][0]["text"], "streamed 100 events");
}

/// Without re-runs, a task stopped by a planned restart fails with an error that says it
/// may be started again, not that its replica was lost.
#[tokio::test]
async fn a_task_stopped_by_a_planned_restart_fails_as_retryable() {
    let redis = RedisServer::start();
    let a = binary_on(&redis, false).await;
    let b = binary_on(&redis, false).await;
    let on_a = Stateless::new(&a.url).with_tasks();
    let on_b = on_a.at(&b.url);
    let id = on_a
        .start_task("stream_events", json!({"count": 500, "interval_ms": 20}))
        .await;
    on_b.until_status(&id, "working").await;
    assert_eq!(a.terminate().await, Some(0));
    let end = on_b.until_status(&id, "failed").await;
    assert_eq!(end["error"]["code"], -32603);
    assert_eq!(end["error"]["message"], STOPPED_REPLICA_MESSAGE);
    assert_eq!(end["error"]["data"]["retryable"], true, "{end}");
}

#[tokio::test]
async fn finished_results_outlive_a_restart_of_every_replica() {
    let redis = RedisServer::start();
    let a = binary_on(&redis, true).await;
    let on_a = Stateless::new(&a.url).with_tasks();
    let id = on_a
        .start_task("stream_events", json!({"count": 2, "interval_ms": 1}))
        .await;
    on_a.until_status(&id, "completed").await;
    assert_eq!(a.terminate().await, Some(0));
    let c = binary_on(&redis, true).await;
    let done = on_a.at(&c.url).task(&id).await;
    assert_eq!(done.result()["status"], "completed");
    assert_eq!(
        done.result()["result"]["content"][0]["text"],
        "streamed 2 events"
    );
}
