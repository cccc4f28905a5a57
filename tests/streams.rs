//! The stream actor's duties over HTTP: pings, idle timeout, slow consumers, framing modes.

mod common;

use std::time::Instant;

use common::{Client, TestServer, Transcript, nz};
use otpmcp::config::NonZeroDuration;
use serde_json::json;

#[tokio::test]
async fn pings_arrive_every_keepalive_interval() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let every = NonZeroDuration::from_millis(100);
    let server = TestServer::start(|c| c.sse.keepalive_interval = every).await;
    let mut client = server.client();
    client.initialize().await;
    let mut stream = client.resume("none").await;
    let mut times = Vec::new();
    while times.len() < 4 {
        let f = stream
            .next()
            .await
            .unwrap_or_else(|| panic!("stream ended"));
        if f.comment.as_deref() == Some("ping") {
            times.push(Instant::now());
        }
    }
    for pair in times.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(
            gap >= every.get() / 2,
            "pings are paced by the interval, got {gap:?}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn an_idle_stream_is_closed_with_a_retry_hint() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| {
        c.sse.stream_timeout = NonZeroDuration::from_millis(200);
        c.sse.keepalive_interval = NonZeroDuration::from_secs(30);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let mut stream = client.resume("none").await;
    assert!(stream.next().await.is_some_and(|f| f.is_priming()));
    let rest = stream.rest().await;
    assert_eq!(rest.len(), 1, "one frame, then the end: {rest:?}");
    assert_eq!(rest[0].retry, Some(100));
    server.shutdown().await;
}

#[tokio::test]
async fn a_post_stream_closed_for_idleness_is_resumed_by_polling() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| {
        c.sse.stream_timeout = NonZeroDuration::from_millis(150);
        c.sse.keepalive_interval = NonZeroDuration::from_secs(30);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let mut t = Transcript::default();
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 3, "interval_ms": 400}),
            Some("t"),
        )
        .await;
    let mut polls = 0;
    while !t.read_to_response(&mut reader).await {
        polls += 1;
        let last = reader.last_id.clone().unwrap_or_default();
        reader = client.resume(&last).await;
    }
    assert!(polls >= 1, "the stream was closed while idle at least once");
    assert_eq!(t.progress, vec![1, 2, 3]);
    assert_eq!(t.result_text().as_deref(), Some("streamed 3 events"));
    server.shutdown().await;
}

/// Progress notes the `bulky` tool sends, 64 KiB each: 10 MiB, far more than a loopback
/// socket's buffers hold (about 3 MB here), so a client that reads nothing leaves most of
/// it with the server.
const COUNT: u64 = 160;

/// A server whose `bulky` tool sends [`COUNT`] progress notes of 64 KiB, then answers
/// "sent 160"; its sessions keep all of them.
async fn bulky_server(tweak: impl FnOnce(&mut otpmcp::config::Config)) -> TestServer {
    use otpmcp::handler::{ToolRegistry, tool};
    let mut tools = ToolRegistry::default();
    tools.register(tool("bulky", |(), ctx| async move {
        let text = "x".repeat(64 * 1024);
        for i in 1..=COUNT {
            ctx.progress(i as f64, None, Some(text.clone())).await?;
        }
        Ok(format!("sent {COUNT}"))
    }));
    let tweak = |c: &mut otpmcp::config::Config| {
        c.sse.max_session_bytes = 64 << 20;
        tweak(c);
    };
    TestServer::start_with(tweak, otpmcp::McpServer::new(tools)).await
}

/// Starts `bulky` on a socket that reads nothing (4 KiB receive buffer) and waits until
/// the call has stored its response.
async fn call_without_reading(server: &TestServer) -> (Client, common::SlowSocket) {
    let mut client = server.client();
    client.initialize().await;
    let call = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": "bulky", "arguments": {}, "_meta": {"progressToken": "t"}}});
    let session = client.session.clone().unwrap_or_default();
    let slow = common::SlowSocket::post(&server.url, &session, &call).await;
    server
        .wait_for_response_stored(client.session_id(), 1, COUNT)
        .await;
    (client, slow)
}

/// Some tests here read process-wide counters (slow-consumer cuts, events replayed), which
/// every test here can move, and `cargo test` runs a file's tests as threads of one
/// process: each takes this for its whole run. (Nextest runs each in its own process.)
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Connections cut as too slow so far, in this process.
fn slow_consumer_cuts() -> u64 {
    use otpmcp::telemetry::metrics::{CONNECTIONS_CUT, Cut};
    CONNECTIONS_CUT
        .each()
        .find(|(cut, _)| *cut == Cut::SlowConsumer)
        .map_or(0, |(_, n)| n)
}

/// Reads `reader` to its end, checking that progress 1..=`count` came in order.
async fn read_in_order(mut reader: common::SseReader, count: u64) -> Transcript {
    let mut t = Transcript::default();
    for f in reader.rest().await {
        t.add(&f);
    }
    assert_eq!(
        t.progress,
        (1..=count).collect::<Vec<u64>>(),
        "every event, in order"
    );
    t
}

#[tokio::test]
async fn a_slow_reader_is_cut_off_and_resumes_without_loss() {
    let _alone = ONE_AT_A_TIME.lock().await;
    // What the socket does not take waits within the byte budget (256 KiB), and the
    // 10 MiB of the call go far past it: the client is cut off.
    let server = bulky_server(|c| c.sse.stream_buffer = nz!(8)).await;
    let (client, slow) = call_without_reading(&server).await;
    let count = COUNT;
    let mut t = Transcript::default();
    let mut last = None;
    for f in slow.frames().await {
        assert!(
            !t.add(&f),
            "the slow connection was closed before the response ({} events)",
            t.progress.len()
        );
        last = f.id.clone().or(last);
    }
    assert!(
        t.progress.len() < count as usize,
        "the connection was cut short"
    );
    let mut resumed = client.resume(&last.unwrap_or_default()).await;
    while let Some(f) = resumed.next().await {
        if t.add(&f) {
            break;
        }
    }
    assert_eq!(
        t.progress,
        (1..=count).collect::<Vec<_>>(),
        "nothing lost, nothing twice"
    );
    assert_eq!(t.result_text().as_deref(), Some("sent 160"));
    server.shutdown().await;
}

#[tokio::test]
async fn with_replay_disabled_frames_have_no_ids_and_last_event_id_is_ignored() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| c.sse.enable_replay = false).await;
    let mut client = server.client();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 3, "interval_ms": 0}),
            Some("t"),
        )
        .await;
    let frames = reader.rest().await;
    assert!(
        frames.iter().all(|f| f.id.is_none()),
        "no id lines: {frames:?}"
    );
    let mut t = Transcript::default();
    frames.iter().for_each(|f| {
        t.add(f);
    });
    assert_eq!(t.progress, vec![1, 2, 3]);
    let tag = &client.session.clone().unwrap_or_default()[24..];
    let mut live = client.resume(&format!("{tag}-1-0")).await;
    let first = live.next().await.unwrap_or_default();
    assert!(
        first.id.is_none() && first.retry.is_some(),
        "live stream, no replay: {first:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn with_sse_disabled_requests_get_json_and_get_is_405() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| c.sse.enabled = false).await;
    let mut client = server.client();
    client.initialize().await;
    let body = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "hi"}}});
    let resp = Client::send(client.post(&body)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/json")
    );
    let v: serde_json::Value =
        serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
    assert_eq!(v["result"]["content"][0]["text"], "hi");
    assert_eq!(Client::send(client.get(None)).await.status(), 405);
    server.shutdown().await;
}

#[tokio::test]
async fn a_second_connection_on_the_same_stream_supersedes_the_first() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut first = client.resume("none").await;
    let priming = first.next().await.unwrap_or_default();
    let id = priming.id.unwrap_or_default();
    let mut second = client.resume(&id).await;
    assert!(second.next().await.is_some_and(|f| f.is_priming()));
    let rest = first.rest().await;
    assert!(
        rest.iter().any(|f| f.retry.is_some()),
        "the first is closed with a retry hint"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_client_that_stops_reading_is_disconnected_after_write_timeout() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let write_timeout = NonZeroDuration::from_millis(300);
    // A buffer that holds the whole call, so that the connection is not cut as a slow
    // consumer first (which ends the body cleanly if what was written fits the socket
    // buffers): the write itself must block.
    let server = bulky_server(|c| {
        c.sse.stream_buffer = nz!(4 * COUNT as usize);
        c.sse.stream_buffer_bytes = nz!(64 << 20);
        c.server.write_timeout = write_timeout;
    })
    .await;
    let (_client, slow) = call_without_reading(&server).await;
    // The condition under test is the passage of the write timeout.
    tokio::time::sleep(write_timeout.get() * 3).await;
    let raw = slow.raw().await;
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(
        !raw.ends_with(b"0\r\n\r\n"),
        "the connection was dropped mid-body, not finished cleanly after the client read"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn clients_before_2025_11_25_get_no_priming_event_and_no_idle_close_before_the_response() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| {
        c.sse.stream_timeout = NonZeroDuration::from_millis(150);
        c.sse.keepalive_interval = NonZeroDuration::from_secs(30);
    })
    .await;
    let mut client = server.client();
    client.version = "2025-06-18".into();
    client.initialize().await;
    let mut reader = client
        .call_stream(
            "stream_events",
            json!({"count": 2, "interval_ms": 400}),
            Some("t"),
        )
        .await;
    let frames = reader.rest().await;
    assert!(
        frames.iter().all(|f| !f.is_priming()),
        "no empty-data event: {frames:?}"
    );
    let mut t = Transcript::default();
    for f in &frames {
        t.add(f);
    }
    assert_eq!(
        t.progress,
        vec![1, 2],
        "one connection, kept open past stream_timeout"
    );
    assert_eq!(t.result_text().as_deref(), Some("streamed 2 events"));
    server.shutdown().await;
}

/// A replay much larger than the connection's buffer (8 frames, 16 KiB) is written as the
/// client reads it, a page at a time: all of it arrives, in order, and the connection is
/// not cut as too slow. Before, a replay was queued whole and overflowed the buffer.
#[tokio::test]
async fn a_replay_larger_than_the_buffer_is_paced_by_the_reader() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = TestServer::start(|c| {
        c.sse.stream_buffer = nz!(8);
        c.sse.stream_buffer_bytes = nz!(16 * 1024);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let count = 9_000;
    let mut call = client
        .call_stream(
            "stream_events",
            json!({"count": count, "interval_ms": 0}),
            Some("t"),
        )
        .await;
    let first = call.next().await.and_then(|f| f.id).unwrap_or_default();
    drop(call);
    server
        .wait_for_response_stored(client.session_id(), 1, count)
        .await;
    let before = slow_consumer_cuts();
    let replayed = otpmcp::telemetry::metrics::EVENTS_REPLAYED.get();
    let t = read_in_order(client.resume(&first).await, count).await;
    assert_eq!(t.result_text().as_deref(), Some("streamed 9000 events"));
    assert_eq!(slow_consumer_cuts(), before, "not cut as a slow consumer");
    assert_eq!(
        otpmcp::telemetry::metrics::EVENTS_REPLAYED.get() - replayed,
        count + 1,
        "every page counted as replayed"
    );
    server.shutdown().await;
}

/// A burst that fills the connection's buffer (2 frames here) while the client reads
/// nothing waits behind it, within the byte budget (16 MiB here), and goes out as the
/// client reads: every event and the response arrive on the one connection. Before, the
/// first live event that found the buffer full cut the client as too slow.
#[tokio::test]
async fn a_burst_past_the_frame_buffer_waits_for_the_reader() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let server = bulky_server(|c| {
        c.sse.stream_buffer = nz!(2);
        c.sse.stream_buffer_bytes = nz!(16 << 20);
    })
    .await;
    let mut client = server.client();
    client.initialize().await;
    let before = slow_consumer_cuts();
    let call = client.call_stream("bulky", json!({}), Some("t")).await;
    server
        .wait_for_response_stored(client.session_id(), 1, COUNT)
        .await;
    let t = read_in_order(call, COUNT).await;
    assert_eq!(t.result_text().as_deref(), Some("sent 160"));
    assert_eq!(slow_consumer_cuts(), before, "not cut as a slow consumer");
    server.shutdown().await;
}

/// Without SSE the answer is one JSON body, so a handler has nowhere to send anything
/// first: its notes are dropped without error, announcements and questions fail with a
/// reason, and it cannot become a task; what the client declared is still known.
#[tokio::test]
async fn with_sse_disabled_a_handler_learns_what_it_cannot_do() {
    let _alone = ONE_AT_A_TIME.lock().await;
    use otpmcp::handler::{ClientRequestError, ToolRegistry, tool};
    use otpmcp::protocol::client::Sampling;
    use otpmcp::protocol::methods::LoggingLevel;
    let mut tools = ToolRegistry::default();
    tools.register(tool("probe", |(), ctx| async move {
        let noted = ctx
            .notify("notifications/example/custom", json!({}))
            .await
            .is_ok()
            && ctx.progress(1.0, None, None).await.is_ok()
            && ctx.log(LoggingLevel::Error, None, json!("x")).await.is_ok();
        let asked = match ctx.sample(Sampling::prompt("2+2?", 5)).await {
            Err(ClientRequestError::Unavailable(why)) => why,
            other => format!("unexpected {other:?}"),
        };
        Ok(json!({
            "noted": noted,
            "announced": ctx.notify_resource_updated("file:///x").await.is_ok(),
            "asked": asked,
            "task": ctx.start_task().await.ok(),
            "sampling": ctx.client_supports("sampling"),
            "roots": ctx.client_supports("roots"),
            "capabilities": ctx.client_capabilities(),
        })
        .to_string())
    }));
    let server =
        TestServer::start_with(|c| c.sse.enabled = false, otpmcp::McpServer::new(tools)).await;
    let mut client = server.client();
    client.initialize_with(json!({"sampling": {}})).await;
    let body = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "probe", "arguments": {}, "_meta": {"progressToken": "p"}}});
    let resp = Client::send(client.post(&body)).await;
    assert_eq!(resp.status(), 200);
    let v: serde_json::Value =
        serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
    let text = v["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    let seen: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    assert_eq!(seen["noted"], true, "{v}");
    assert_eq!(seen["announced"], false);
    assert_eq!(
        seen["asked"],
        "the response is not streamed, so the client cannot be asked"
    );
    assert_eq!(seen["task"], false);
    assert_eq!(seen["sampling"], true);
    assert_eq!(seen["roots"], false);
    assert_eq!(seen["capabilities"], json!({"sampling": {}}));
    server.shutdown().await;
}
