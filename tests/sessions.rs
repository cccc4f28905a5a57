//! Session lifecycle over HTTP: creation, DELETE, idle expiry, caps, session_info.

mod common;

use std::future::Future;
use std::time::Duration;

use common::{Client, TestServer, eventually, nz};
use otpmcp::config::NonZeroDuration;
use otpmcp::protocol::version::ProtocolVersion;
use serde_json::json;

fn ping(client: &Client) -> reqwest::RequestBuilder {
    client.post(&json!({"jsonrpc": "2.0", "id": client.id(), "method": "ping"}))
}

#[tokio::test]
async fn delete_ends_the_session_and_later_requests_get_404() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    assert_eq!(Client::send(ping(&client)).await.status(), 200);
    let delete = client.delete();
    assert_eq!(Client::send(delete).await.status(), 200);
    assert_eq!(
        Client::send(ping(&client)).await.status(),
        404,
        "POST after DELETE"
    );
    assert_eq!(
        Client::send(client.get(None)).await.status(),
        404,
        "GET after DELETE"
    );
    let again = client.delete();
    assert_eq!(Client::send(again).await.status(), 404, "second DELETE");
    assert!(server.app.session_info(client.session_id()).await.is_err());
    server.shutdown().await;
}

#[tokio::test]
async fn delete_closes_the_sessions_open_streams_with_a_retry_hint() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut stream = client.resume("none").await;
    assert!(stream.next().await.is_some_and(|f| f.is_priming()));
    let delete = client.delete();
    assert_eq!(Client::send(delete).await.status(), 200);
    let rest = stream.rest().await;
    assert!(
        rest.iter().any(|f| f.retry.is_some()),
        "retry hint before close: {rest:?}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn requests_without_a_session_header_get_400_and_unknown_sessions_404() {
    let server = TestServer::start(|_| {}).await;
    let client = server.client();
    assert_eq!(Client::send(ping(&client)).await.status(), 400);
    assert_eq!(Client::send(client.get(None)).await.status(), 400);
    assert_eq!(
        Client::send(client.http.delete(&client.url)).await.status(),
        400
    );
    let mut stranger = server.client();
    stranger.session = Some("0123456789abcdef0123456789abcdef".into());
    assert_eq!(Client::send(ping(&stranger)).await.status(), 404);
    stranger.session = Some("not-a-session".into());
    assert_eq!(Client::send(ping(&stranger)).await.status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn idle_sessions_expire_after_session_timeout() {
    let server =
        TestServer::start(|c| c.server.session_timeout = NonZeroDuration::from_millis(200)).await;
    let mut client = server.client();
    client.initialize().await;
    let id = client.session_id();
    eventually("the session to expire", || async {
        server.app.session_info(id).await.is_err().then_some(())
    })
    .await;
    assert_eq!(Client::send(ping(&client)).await.status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn a_session_with_an_open_stream_does_not_expire() {
    let timeout = NonZeroDuration::from_millis(150);
    let server = TestServer::start(|c| c.server.session_timeout = timeout).await;
    let mut client = server.client();
    client.initialize().await;
    let mut stream = client.resume("none").await;
    assert!(stream.next().await.is_some());
    // The condition under test is time passing while the stream is open.
    tokio::time::sleep(timeout.get() * 4).await;
    assert_eq!(Client::send(ping(&client)).await.status(), 200);
    server.shutdown().await;
}

fn initialize_body() -> serde_json::Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}})
}

async fn ping_status(client: &Client) -> u16 {
    let ping = json!({"jsonrpc": "2.0", "id": client.id(), "method": "ping"});
    Client::send(client.post(&ping)).await.status().as_u16()
}

#[tokio::test]
async fn at_max_sessions_the_least_recently_used_idle_session_makes_room() {
    let server = TestServer::start(|c| c.server.max_sessions = nz!(3)).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let mut client = server.client();
        client.initialize().await;
        clients.push(client);
    }
    // The first is used last, so the second is the least recently used.
    assert_eq!(ping_status(&clients[0]).await, 200);
    let mut newcomer = server.client();
    newcomer.initialize().await;
    assert_eq!(ping_status(&clients[1]).await, 404, "its session made room");
    for client in [&clients[0], &clients[2], &newcomer] {
        assert_eq!(ping_status(client).await, 200);
    }
    server.shutdown().await;
}

#[tokio::test]
async fn when_every_session_is_busy_initialize_gets_503_with_retry_after() {
    let server = TestServer::start(|c| c.server.max_sessions = nz!(2)).await;
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut client = server.client();
        client.initialize().await;
        // An open stream keeps a session busy.
        let stream = Client::send(client.get(None)).await;
        assert_eq!(stream.status(), 200);
        streams.push((client, stream));
    }
    let resp = Client::send(server.client().post(&initialize_body())).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    for (client, _) in &streams {
        assert_eq!(ping_status(client).await, 200, "busy sessions are kept");
    }
    server.shutdown().await;
}

/// The flood that used to lock everyone out: clients that initialize and never DELETE.
#[tokio::test]
async fn a_flood_of_sessions_never_sent_delete_does_not_lock_out_a_new_client() {
    let server = TestServer::start(|c| c.server.max_sessions = nz!(100)).await;
    let http = reqwest::Client::new();
    for _ in 0..1000 {
        let resp = Client::send(
            http.post(&server.url)
                .header("content-type", "application/json")
                .header("accept", common::ACCEPT_BOTH)
                .body(initialize_body().to_string()),
        )
        .await;
        assert_eq!(resp.status(), 200);
    }
    let mut client = server.client();
    client.initialize().await;
    assert_eq!(ping_status(&client).await, 200);
    assert_eq!(
        server.app.sessions().overview(0).await.map(|(n, _)| n),
        Ok(100),
        "never more than max_sessions"
    );
    server.shutdown().await;
}

/// A client connecting from `ip` (any 127.0.0.0/8 address reaches a loopback server).
fn client_from(server: &TestServer, ip: [u8; 4]) -> Client {
    let mut client = server.client();
    client.http = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from(ip))
        .build()
        .unwrap_or_else(|e| panic!("client bound to {ip:?}: {e}"));
    client
}

#[tokio::test]
async fn at_max_sessions_per_client_an_address_makes_room_among_its_own_sessions() {
    let server = TestServer::start(|c| {
        c.server.max_sessions = nz!(100);
        c.server.max_sessions_per_client = 2;
    })
    .await;
    let mut bystander = client_from(&server, [127, 0, 0, 1]);
    bystander.initialize().await;
    let mut own = Vec::new();
    for _ in 0..3 {
        let mut client = client_from(&server, [127, 0, 0, 2]);
        client.initialize().await;
        own.push(client);
    }
    assert_eq!(
        ping_status(&own[0]).await,
        404,
        "its oldest idle session made room"
    );
    assert_eq!(ping_status(&own[1]).await, 200);
    assert_eq!(ping_status(&own[2]).await, 200);
    assert_eq!(
        ping_status(&bystander).await,
        200,
        "another address is untouched"
    );

    // Both of its sessions busy: the address is refused, the others are not.
    let mut streams = Vec::new();
    for client in &own[1..] {
        let stream = Client::send(client.get(None)).await;
        assert_eq!(stream.status(), 200);
        streams.push(stream);
    }
    let refused = Client::send(client_from(&server, [127, 0, 0, 2]).post(&initialize_body())).await;
    assert_eq!(refused.status(), 429);
    assert_eq!(
        refused
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let mut other = client_from(&server, [127, 0, 0, 3]);
    other.initialize().await;
    assert_eq!(ping_status(&other).await, 200);
    // The refusal is counted under its own reason.
    use otpmcp::telemetry::metrics::{Refusal, SESSIONS_REFUSED};
    let refusals = SESSIONS_REFUSED
        .each()
        .find(|(reason, _)| *reason == Refusal::ClientFull)
        .map(|(_, n)| n);
    assert!(refusals.is_some_and(|n| n >= 1), "counted: {refusals:?}");
    drop(streams);
    server.shutdown().await;
}

#[tokio::test]
async fn session_info_reports_version_client_and_last_event_per_stream() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let mut r = client
        .call_stream(
            "stream_events",
            json!({"count": 4, "interval_ms": 0}),
            Some("t"),
        )
        .await;
    r.rest().await;
    let info = server
        .app
        .session_info(client.session_id())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(info.protocol_version, ProtocolVersion::V2025_11_25);
    assert_eq!(info.client_info["name"], "otpmcp-tests");
    assert!(info.connected_for < Duration::from_secs(60));
    assert_eq!(info.last_event, vec![(otpmcp::event_store::StreamNo(1), 5)]);
    server.shutdown().await;
}

#[tokio::test]
async fn older_protocol_revisions_are_negotiated() {
    let server = TestServer::start(|_| {}).await;
    for (asked, got) in [
        ("2025-03-26", "2025-03-26"),
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2025-11-25"),
    ] {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "x", "version": "0"}}});
        let resp = Client::send(server.client().post(&body)).await;
        let v: serde_json::Value =
            serde_json::from_slice(&resp.bytes().await.unwrap_or_default()).unwrap_or_default();
        assert_eq!(v["result"]["protocolVersion"], got, "asked {asked}");
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_session_cannot_open_more_than_max_open_per_session() {
    let server = TestServer::start(|c| c.server.max_open_per_session = nz!(2)).await;
    let mut client = server.client();
    client.initialize().await;
    let _a = client
        .call_stream(
            "stream_events",
            json!({"count": 100, "interval_ms": 1000}),
            None,
        )
        .await;
    let _b = client.resume("none").await;
    let body = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}}});
    assert_eq!(Client::send(client.post(&body)).await.status(), 429);
    assert_eq!(Client::send(client.get(None)).await.status(), 429);
    assert_eq!(
        Client::send(ping(&client)).await.status(),
        429,
        "every request holds a slot while it runs"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn requests_abandoned_mid_flight_release_their_hold() {
    let server = TestServer::start(|c| c.server.max_open_per_session = nz!(4)).await;
    let mut client = server.client();
    client.initialize().await;
    let session = client.session.clone().unwrap_or_default();
    let addr = server.app.local_addr();
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x"}}})
    .to_string();
    for _ in 0..10 {
        use tokio::io::AsyncWriteExt;
        let mut conn = tokio::net::TcpStream::connect(addr)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let request = format!(
            "POST /mcp HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
             accept: application/json, text/event-stream\r\nmcp-session-id: {session}\r\n\
             content-length: {}\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(request.as_bytes()).await;
        drop(conn); // gone before any answer
    }
    let id = client.session_id();
    eventually("every hold to be released", || async {
        let info = server.app.session_info(id).await.ok()?;
        (info.open == 0).then_some(())
    })
    .await;
    let mut r = client
        .call_stream("echo", json!({"text": "still served"}), None)
        .await;
    assert!(
        r.rest().await.iter().any(|f| f.is_response()),
        "not 429: no slot leaked"
    );
    server.shutdown().await;
}

/// A resume holds a slot while it is open, like any stream: 100 concurrent resumes of one
/// large stream once each replayed it in full.
#[tokio::test]
async fn every_open_resume_counts_against_max_open_per_session() {
    let server = TestServer::start(|c| c.server.max_open_per_session = nz!(3)).await;
    let mut client = server.client();
    client.initialize().await;
    let mut call = client
        .call_stream(
            "stream_events",
            json!({"count": 500, "interval_ms": 1000}),
            Some("t"),
        )
        .await;
    let priming = call.next().await.and_then(|f| f.id).unwrap_or_default();
    drop(call);
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut resumed = client.resume(&priming).await;
        assert!(resumed.next().await.is_some());
        open.push(resumed);
    }
    let refused = Client::send(client.get(Some(&priming))).await;
    assert_eq!(
        refused.status(),
        429,
        "the call and two resumes fill the three slots"
    );
    drop(open);
    // Closed resumes give their slots back.
    eventually("the resumes' slots to be free", || async {
        (Client::send(client.get(Some(&priming))).await.status() == 200).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_caller_that_gives_up_before_the_answer_leaks_no_hold() {
    let server = TestServer::start(|_| {}).await;
    let mut client = server.client();
    client.initialize().await;
    let id = client.session_id();
    // Poll once (the request is sent) and drop the caller before the reply can arrive:
    // what a dropped HTTP request does at the worst moment.
    for _ in 0..20 {
        let mut caller = Box::pin(server.app.sessions().hold(id, None, true, None));
        let waker = std::task::Waker::noop();
        let polled = caller
            .as_mut()
            .poll(&mut std::task::Context::from_waker(waker));
        assert!(polled.is_pending(), "the reply cannot be there yet");
    }
    eventually("every hold to be released", || async {
        let info = server.app.session_info(id).await.ok()?;
        (info.open == 0).then_some(())
    })
    .await;
    server.shutdown().await;
}
