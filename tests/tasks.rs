//! Durable tasks on one server (the `io.modelcontextprotocol/tasks` extension): created
//! only for requests that declare it, polled, answered, cancelled, expired, announced on
//! listen streams, and refused with the spec's codes. Raw HTTP; a released client
//! (fastmcp-tasks) is in tests/interop.rs. Replicas: tests/replica_tasks.rs.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::stateless::{Stateless, TASKS, confirm_tool, wait_tool};
use common::{TestServer, nz};
use otpmcp::McpServer;
use otpmcp::config::NonZeroDuration;
use otpmcp::handler::builtin::stream_events;
use otpmcp::handler::{ToolRegistry, tool};
use otpmcp::protocol::methods::{CallToolResult, TaskSupport};
use serde_json::{Value, json};

/// `stream_events` (optional, re-runnable), `confirm` (asks the user inside its task),
/// `wait` (works until cancelled; reports being dropped), `must` (only as a task).
fn server(dropped: Arc<AtomicBool>) -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(stream_events())
        .register(confirm_tool())
        .register(wait_tool(dropped))
        .register(
            tool("must", |(), _| async { Ok(CallToolResult::text("done")) })
                .description("Only as a task.")
                .task_support(TaskSupport::Required),
        );
    McpServer::new(tools)
}

async fn start() -> (TestServer, Arc<AtomicBool>) {
    let dropped = Arc::new(AtomicBool::new(false));
    (
        TestServer::start_with(|_| {}, server(dropped.clone())).await,
        dropped,
    )
}

#[tokio::test]
async fn a_task_is_created_only_when_declared_then_polled_to_its_result() {
    let (server, _) = start().await;
    let plain = Stateless::new(&server.url);
    let args = json!({"name": "stream_events", "arguments": {"count": 3, "interval_ms": 1}});
    let sync = plain.ask("tools/call", args.clone()).await;
    assert_eq!(sync.result()["resultType"], "complete");
    assert_eq!(sync.result()["content"][0]["text"], "streamed 3 events");

    let client = plain.clone().with_tasks();
    let id = client
        .start_task("stream_events", json!({"count": 20, "interval_ms": 20}))
        .await;
    assert_eq!(id.len(), 32, "128 random bits as hex: {id}");
    // Durable before the id was given out: the very next read finds it.
    let task = client.task(&id).await;
    assert_eq!(task.result()["resultType"], "complete");
    assert_eq!(task.result()["taskId"], id.as_str());
    assert!(task.result()["ttlMs"].as_u64().is_some_and(|t| t > 0));
    assert!(
        task.result()["pollIntervalMs"]
            .as_u64()
            .is_some_and(|t| t > 0)
    );
    let done = client.until_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "streamed 20 events");
    assert!(done.get("requestState").is_none());
    server.shutdown().await;
}

#[tokio::test]
async fn a_task_asks_the_user_and_tasks_update_answers() {
    let (server, _) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    let id = client.start_task("confirm", json!({})).await;
    let waiting = client.until_status(&id, "input_required").await;
    let requests = waiting["inputRequests"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert_eq!(requests.len(), 1, "{waiting}");
    let (key, question) = requests
        .iter()
        .next()
        .map(|(k, v)| (k.clone(), v.clone()))
        .unwrap_or_default();
    assert_eq!(question["method"], "elicitation/create");
    // An answer to a question never asked is ignored, and acknowledged.
    let stray = client
        .ask(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {"nope": {"action": "accept"}}}),
        )
        .await;
    assert_eq!(
        stray.result(),
        &json!({"resultType": "complete", "_meta": stray.result()["_meta"]})
    );
    let ack = client
        .ask(
            "tasks/update",
            json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"ok": true}}}}),
        )
        .await;
    assert_eq!(ack.result()["resultType"], "complete");
    let done = client.until_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "ok=true");
    server.shutdown().await;
}

// An answered question is gone from the very next `tasks/get`: the acknowledgement of
// `tasks/update` waits until the runner has stored its effect (the conformance suite's
// tasks-mrtr-input checks this right after a partial answer, and failed once in CI's
// memory run while the acknowledgement raced the runner's save). On a quiet machine the
// race rarely shows: this passed 3 of 3 runs without the fix too.
#[tokio::test]
async fn after_tasks_update_is_acknowledged_tasks_get_shows_the_answer_applied() {
    let (server, _) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    for _ in 0..20 {
        let id = client.start_task("confirm", json!({})).await;
        let waiting = client.until_status(&id, "input_required").await;
        let key = waiting["inputRequests"]
            .as_object()
            .and_then(|r| r.keys().next().cloned())
            .unwrap_or_default();
        let ack = client
            .ask(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key.clone(): {"action": "accept", "content": {"ok": true}}}}),
            )
            .await;
        assert_eq!(ack.result()["resultType"], "complete");
        let now = client.task(&id).await;
        let now = now.result();
        assert_ne!(now["status"], "input_required", "{now}");
        assert!(now["inputRequests"].get(&key).is_none(), "{now}");
        client.until_status(&id, "completed").await;
    }
    server.shutdown().await;
}

#[tokio::test]
async fn tasks_cancel_reaches_the_handler_and_is_idempotent() {
    let (server, dropped) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    let id = client.start_task("wait", json!({})).await;
    let ack = client.ask("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack.result()["resultType"], "complete");
    assert!(ack.result().get("status").is_none());
    client.until_status(&id, "cancelled").await;
    assert!(dropped.load(Ordering::SeqCst), "the handler was stopped");
    let again = client.ask("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(again.result()["resultType"], "complete");
    assert_eq!(client.task(&id).await.result()["status"], "cancelled");
    server.shutdown().await;
}

#[tokio::test]
async fn task_methods_refuse_with_the_specs_codes() {
    let (server, _) = start().await;
    let plain = Stateless::new(&server.url);
    let client = plain.clone().with_tasks();
    // Without the extension declared: -32021, before the id is even looked up.
    for method in ["tasks/get", "tasks/cancel"] {
        let answer = plain.ask(method, json!({"taskId": "x"})).await;
        assert_eq!(answer.error_code(), Some(-32021), "{method}");
        assert_eq!(answer.status, 400);
        assert!(
            answer.message["error"]["data"]["requiredCapabilities"]["extensions"][TASKS]
                .is_object()
        );
    }
    let must = plain
        .ask("tools/call", json!({"name": "must", "arguments": {}}))
        .await;
    assert_eq!(must.error_code(), Some(-32021));
    // Unknown ids: -32602. Removed methods: -32601 with 404.
    assert_eq!(
        client
            .task("0123456789abcdef0123456789abcdef")
            .await
            .error_code(),
        Some(-32602)
    );
    let update = client
        .ask(
            "tasks/update",
            json!({"taskId": "nope", "inputResponses": {}}),
        )
        .await;
    assert_eq!(update.error_code(), Some(-32602));
    // A malformed id, refused before the store is asked, reads as an unknown one.
    assert_eq!(update.message["error"]["message"], "Task not found: nope");
    for method in ["tasks/list", "tasks/result"] {
        let answer = client.ask(method, json!({"taskId": "x"})).await;
        assert_eq!(
            (answer.status, answer.error_code()),
            (404, Some(-32601)),
            "{method}"
        );
    }
    // A routing header that names another task: -32020.
    let id = client.start_task("wait", json!({})).await;
    let (_, req) = client.post_named("tasks/get", json!({"taskId": id}), Some("another-task"));
    let resp = req.send().await;
    let resp = resp.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status(), 400);
    let body: Value =
        serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
    assert_eq!(body["error"]["code"], -32020);
    client.ask("tasks/cancel", json!({"taskId": id})).await;
    server.shutdown().await;
}

// Issue 23, part 7: fastmcp-tasks 4.1.4 and the MCP Inspector send `tasks/get`,
// `tasks/update` and `tasks/cancel` without `Mcp-Name` (they were -32020); a missing one is
// served, a different one is still refused (above).
#[tokio::test]
async fn task_methods_serve_a_request_without_mcp_name() {
    let (server, dropped) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    let unnamed = |method: &'static str, params: Value| {
        let request = client.post_without_name(method, params);
        client.answer(method, request)
    };
    let id = client.start_task("confirm", json!({})).await;
    let waiting = common::eventually("the task to ask", || async {
        let task = unnamed("tasks/get", json!({"taskId": id})).await;
        assert_eq!(task.status, 200, "{:?}", task.message);
        (task.result()["status"] == "input_required").then(|| task.result().clone())
    })
    .await;
    let key = waiting["inputRequests"]
        .as_object()
        .and_then(|r| r.keys().next().cloned())
        .unwrap_or_default();
    let ack = unnamed(
        "tasks/update",
        json!({"taskId": id, "inputResponses": {key: {"action": "accept", "content": {"ok": true}}}}),
    )
    .await;
    assert_eq!(ack.result()["resultType"], "complete", "{:?}", ack.message);
    let done = client.until_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "ok=true");

    let id = client.start_task("wait", json!({})).await;
    let ack = unnamed("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(ack.result()["resultType"], "complete", "{:?}", ack.message);
    client.until_status(&id, "cancelled").await;
    assert!(dropped.load(Ordering::SeqCst), "the handler was stopped");
    server.shutdown().await;
}

// Issue 23, part 6: arguments a tool refuses end its task `completed` with a result that
// has `isError` (the model reads it), not `failed` with -32602.
#[tokio::test]
async fn a_task_whose_arguments_are_refused_completes_with_is_error() {
    let (server, _) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    let id = client
        .start_task("stream_events", json!({"count": "many"}))
        .await;
    let done = client.until_status(&id, "completed").await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    assert!(
        done["result"]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Invalid arguments for tool stream_events")),
        "{done}"
    );
    assert!(done.get("error").is_none(), "{done}");
    server.shutdown().await;
}

#[tokio::test]
async fn a_task_is_dropped_when_its_ttl_runs_out() {
    let dropped = Arc::new(AtomicBool::new(false));
    let server = TestServer::start_with(
        |c| c.tasks.ttl = NonZeroDuration::from_millis(300),
        server(dropped.clone()),
    )
    .await;
    let client = Stateless::new(&server.url).with_tasks();
    let finished = client
        .start_task("stream_events", json!({"count": 1, "interval_ms": 0}))
        .await;
    let working = client.start_task("wait", json!({})).await;
    assert_eq!(client.task(&working).await.result()["ttlMs"], 300);
    common::eventually("both tasks to be gone", || async {
        let gone = |a: common::stateless::Answer| a.error_code() == Some(-32602);
        (gone(client.task(&finished).await) && gone(client.task(&working).await)).then_some(())
    })
    .await;
    common::eventually("the expired task's handler to stop", || async {
        dropped.load(Ordering::SeqCst).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn listen_streams_hear_of_the_tasks_they_name() {
    let (server, _) = start().await;
    let client = Stateless::new(&server.url).with_tasks();
    let watched = client.start_task("confirm", json!({})).await;
    let other = client.start_task("confirm", json!({})).await;
    let (mut stream, ack) = client.listen(json!({"taskIds": [watched]})).await;
    assert_eq!(ack["notifications"]["taskIds"], json!([watched]));
    for id in [&other, &watched] {
        let waiting = client.until_status(id, "input_required").await;
        let key = waiting["inputRequests"]
            .as_object()
            .and_then(|m| m.keys().next().cloned())
            .unwrap_or_default();
        client
            .ask(
                "tasks/update",
                json!({"taskId": id, "inputResponses": {key: {"action": "decline"}}}),
            )
            .await;
    }
    // Only the named task, each change as tasks/get shows it, tagged with the listen id.
    loop {
        let note = stream.next_json().await;
        assert_eq!(note["method"], "notifications/tasks");
        assert_eq!(note["params"]["taskId"], watched.as_str(), "{note}");
        assert!(note["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].is_i64());
        if note["params"]["status"] == "completed" {
            assert_eq!(note["params"]["result"]["content"][0]["text"], "ok=null");
            break;
        }
    }
    server.shutdown().await;
}

const AUDIENCE: &str = "http://mcp.test/mcp";

/// `wait` and `guarded` (works until cancelled, needs scope `tasks:guarded`), behind
/// `[auth]` with `tweak` applied.
async fn start_with_auth(
    issuer: &common::issuer::Issuer,
    tweak: impl FnOnce(&mut otpmcp::config::Config),
) -> TestServer {
    let mut tools = ToolRegistry::default();
    tools.register(wait_tool(Arc::default())).register(
        tool("guarded", |(), _| async {
            std::future::pending::<()>().await;
            Ok(CallToolResult::text("never"))
        })
        .description("Works until cancelled; needs tasks:guarded.")
        .scopes(["tasks:guarded"])
        .task_support(TaskSupport::Optional),
    );
    let url = issuer.url.clone();
    TestServer::start_with(
        move |c| {
            c.auth.enabled = true;
            c.auth.issuer = url;
            c.auth.audience = AUDIENCE.into();
            c.auth.scopes_supported = vec!["mcp".into()];
            tweak(c);
        },
        McpServer::new(tools),
    )
    .await
}

/// `tasks.max_per_principal`: a principal at its cap is refused a new task with an error
/// naming the key, and another principal still gets its tasks.
#[tokio::test]
async fn a_principal_at_its_task_cap_leaves_the_others_their_tasks() {
    let issuer = common::issuer::Issuer::start().await;
    let server = start_with_auth(&issuer, |c| c.tasks.max_per_principal = nz!(2)).await;
    let alice = Stateless::new(&server.url)
        .with_tasks()
        .with_token(&issuer.token(AUDIENCE, "alice", "mcp"));
    let bob = alice
        .clone()
        .with_token(&issuer.token(AUDIENCE, "bob", "mcp"));
    let first = alice.start_task("wait", json!({})).await;
    let second = alice.start_task("wait", json!({})).await;
    let refused = alice
        .ask("tools/call", json!({"name": "wait", "arguments": {}}))
        .await;
    assert_eq!(refused.error_code(), Some(-32603), "{:?}", refused.message);
    let message = refused.message["error"]["message"].as_str().unwrap_or("");
    assert!(
        message.contains("tasks.max_per_principal"),
        "the refusal names the key: {message}"
    );
    // Bob is untouched by Alice's cap.
    let his = bob.start_task("wait", json!({})).await;
    assert_eq!(bob.task(&his).await.result()["status"], "working");
    for (client, id) in [(&alice, &first), (&alice, &second), (&bob, &his)] {
        client.ask("tasks/cancel", json!({"taskId": id})).await;
    }
    server.shutdown().await;
}

/// Without `[auth]` the principal is the client's address: one address at
/// `tasks.max_per_principal` is refused, another address still gets its task.
#[tokio::test]
async fn without_auth_each_client_address_has_its_own_task_cap() {
    let server = TestServer::start_with(
        |c| c.tasks.max_per_principal = nz!(1),
        server(Arc::default()),
    )
    .await;
    let one = Stateless::new(&server.url)
        .with_tasks()
        .bound_to([127, 0, 0, 2].into());
    let other = one.clone().bound_to([127, 0, 0, 3].into());
    let first = one.start_task("wait", json!({})).await;
    let refused = one
        .ask("tools/call", json!({"name": "wait", "arguments": {}}))
        .await;
    assert_eq!(refused.error_code(), Some(-32603), "{:?}", refused.message);
    let theirs = other.start_task("wait", json!({})).await;
    for id in [&first, &theirs] {
        one.ask("tasks/cancel", json!({"taskId": id})).await;
    }
    server.shutdown().await;
}

/// A task keeps the scopes of its tool: a token of the same principal that no longer
/// holds them gets from `tasks/get`, `tasks/update`, `tasks/cancel` and `tasks/stream`
/// the answer an unknown task gets; with them, it is served.
#[tokio::test]
async fn a_down_scoped_token_no_longer_reaches_its_task() {
    let issuer = common::issuer::Issuer::start().await;
    let server = start_with_auth(&issuer, |_| {}).await;
    let full = Stateless::new(&server.url)
        .with_tasks()
        .with_token(&issuer.token(AUDIENCE, "alice", "mcp tasks:guarded"));
    let narrow = full
        .clone()
        .with_token(&issuer.token(AUDIENCE, "alice", "mcp"));
    let id = full.start_task("guarded", json!({})).await;
    let unknown = narrow
        .task("0123456789abcdef0123456789abcdef")
        .await
        .error_code();
    assert_eq!(unknown, Some(-32602));
    for (method, params) in [
        ("tasks/get", json!({"taskId": id})),
        ("tasks/update", json!({"taskId": id, "inputResponses": {}})),
        ("tasks/cancel", json!({"taskId": id})),
        ("tasks/stream", json!({"taskId": id})),
    ] {
        let refused = narrow.ask(method, params).await;
        assert_eq!(
            refused.error_code(),
            unknown,
            "{method}: {:?}",
            refused.message
        );
    }
    // The refused cancel did nothing; the full token is served.
    assert_eq!(full.task(&id).await.result()["status"], "working");
    full.ask("tasks/cancel", json!({"taskId": id})).await;
    full.until_status(&id, "cancelled").await;
    server.shutdown().await;
}

/// Each tool's `execution.taskSupport` in a stateless `tools/list`, keyed by name.
async fn listed_support(client: &Stateless) -> Value {
    let listed = client.ask("tools/list", json!({})).await;
    let mut shown = serde_json::Map::new();
    for tool in listed.result()["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let name = tool["name"].as_str().unwrap_or_default().to_owned();
        shown.insert(name, tool["execution"]["taskSupport"].clone());
    }
    Value::Object(shown)
}

// Issue 39: `tools/list` says what a call with the same capabilities gets. To a client
// that declares the extension an `Optional` tool is `required` (each call is a task), so
// a host that takes its task path only for `required` tools (Copilot CLI) takes it; to
// one that does not, `optional`. Sessions never make tasks and list no `execution`.
#[tokio::test]
async fn tools_list_shows_each_tools_task_support_as_its_calls_get_it() {
    let mut tools = ToolRegistry::default();
    tools
        .register(stream_events())
        .register(
            tool("must", |(), _| async { Ok(CallToolResult::text("done")) })
                .description("Only as a task.")
                .task_support(TaskSupport::Required),
        )
        .register(tool("plain", |(), _| async {
            Ok(CallToolResult::text("plain"))
        }));
    let server = TestServer::start_with(|_| {}, McpServer::new(tools)).await;
    let events = json!({"count": 2, "interval_ms": 1});

    let plain = Stateless::new(&server.url);
    let shown = listed_support(&plain).await;
    assert_eq!(shown["stream_events"], "optional", "{shown}");
    assert_eq!(shown["must"], "required", "{shown}");
    assert_eq!(shown["plain"], "forbidden", "{shown}");
    let call = |client: Stateless, name: &'static str, arguments: Value| async move {
        client
            .ask("tools/call", json!({"name": name, "arguments": arguments}))
            .await
    };
    let sync = call(plain.clone(), "stream_events", events.clone()).await;
    assert_eq!(
        sync.result()["resultType"],
        "complete",
        "{:?}",
        sync.message
    );
    assert_eq!(sync.result()["content"][0]["text"], "streamed 2 events");
    let refused = call(plain.clone(), "must", json!({})).await;
    assert_eq!(refused.error_code(), Some(-32021), "{:?}", refused.message);
    let answered = call(plain.clone(), "plain", json!({})).await;
    assert_eq!(answered.result()["content"][0]["text"], "plain");

    let tasks = plain.clone().with_tasks();
    let shown = listed_support(&tasks).await;
    assert_eq!(shown["stream_events"], "required", "{shown}");
    assert_eq!(shown["must"], "required", "{shown}");
    assert_eq!(shown["plain"], "forbidden", "{shown}");
    for name in ["stream_events", "must"] {
        let created = call(tasks.clone(), name, events.clone()).await;
        assert_eq!(
            created.result()["resultType"],
            "task",
            "{:?}",
            created.message
        );
        let id = created.result()["taskId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let done = tasks.until_status(&id, "completed").await;
        assert!(done["result"]["content"][0]["text"].is_string(), "{done}");
    }
    let answered = call(tasks.clone(), "plain", json!({})).await;
    assert_eq!(answered.result()["resultType"], "complete");
    assert_eq!(answered.result()["content"][0]["text"], "plain");

    // A 2025-11-25 session: no `execution` (absent is "forbidden" in that schema), and
    // every call answered in the request.
    let mut session = server.client();
    session.initialize().await;
    let listed = session.ask("tools/list", json!({})).await;
    let listed = listed["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(
        listed.iter().all(|t| t.get("execution").is_none()),
        "{listed:?}"
    );
    for (name, text) in [("stream_events", "streamed 2 events"), ("must", "done")] {
        let answer = session
            .ask("tools/call", json!({"name": name, "arguments": events}))
            .await;
        assert_eq!(answer["result"]["content"][0]["text"], text, "{answer}");
    }
    server.shutdown().await;
}
