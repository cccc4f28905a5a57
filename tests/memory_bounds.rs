//! What clients make the real binary hold stays within the documented bounds
//! (docs/configuration.md, "Worst-case memory"): a flood of sessions that are never
//! deleted, and unread resumes of one large stream. Each used to grow the process by
//! gigabytes or lock new clients out.

mod common;

use common::{ACCEPT_BOTH, Binary, Client, MIB, rss, within};
use serde_json::json;

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "flood", "version": "0"}}})
    .to_string()
}

/// The flood: 10,000 `initialize` without DELETE over four connections, at the
/// default `max_sessions` (10,000), then a new client. It is served (the least recently
/// used idle session makes room), and the sessions cost what the formula says: about
/// 3 KB each (measured 2.87 KB), so at most 5 KB each is allowed here.
#[tokio::test]
async fn ten_thousand_sessions_never_deleted_leave_a_new_client_served_within_the_formula() {
    let binary = Binary::start(&[], &[]).await;
    let pid = binary.child.id();
    let before = rss(pid);
    let flood = (0..4).map(|_| {
        let url = binary.url.clone();
        tokio::spawn(async move {
            let http = reqwest::Client::new();
            for _ in 0..2_500 {
                let resp = http
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("accept", ACCEPT_BOTH)
                    .body(initialize_body())
                    .send()
                    .await;
                assert!(resp.is_ok_and(|r| r.status() == 200), "initialize");
            }
        })
    });
    for task in flood {
        within("the flood", task)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut newcomer = Client::new(&binary.url);
    newcomer.initialize().await;
    let ping = json!({"jsonrpc": "2.0", "id": 2, "method": "ping"});
    assert_eq!(Client::send(newcomer.post(&ping)).await.status(), 200);
    let grown = rss(pid).saturating_sub(before);
    assert!(
        grown < 10_000 * 5 * 1024,
        "10,000 sessions grew the process by {} KB",
        grown / 1024
    );
    drop(binary);
}

/// A raw GET that resumes from `last_event_id` with a small receive buffer, read only
/// up to the end of its headers.
async fn unread_resume(url: &str, session: &str, last_event_id: &str) -> tokio::net::TcpStream {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut stream, addr) = common::small_socket(url).await;
    let request = format!(
        "GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\
         mcp-session-id: {session}\r\nlast-event-id: {last_event_id}\r\n\r\n"
    );
    stream
        .write_all(request.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    within("the response head", async {
        while !head.ends_with(b"\r\n\r\n") {
            match stream.read(&mut byte).await {
                Ok(1) => head.push(byte[0]),
                other => panic!("the resume ended early: {other:?}"),
            }
        }
    })
    .await;
    assert!(
        head.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&head)
    );
    stream
}

/// 100 resumes of one ~15 MB stream that read nothing: each costs the per-connection
/// byte budget (`sse.stream_buffer_bytes`, 256 KiB), not the stream's size. Before the
/// replay was paced, they took the process from 40 MB to 1.3 GB.
#[tokio::test]
async fn unread_resumes_of_a_large_stream_stay_within_the_byte_budget() {
    let binary = Binary::start(
        &[],
        &[
            ("OTPMCP__SERVER__MAX_OPEN_PER_SESSION", "200"),
            ("OTPMCP__SSE__MAX_SESSION_EVENTS", "100000"),
        ],
    )
    .await;
    let pid = binary.child.id();
    let mut client = Client::new(&binary.url);
    client.initialize().await;
    // 50,000 progress notes of about 300 bytes: the token is long (within the cap).
    let token = "t".repeat(200);
    let mut call = client
        .call_stream(
            "stream_events",
            json!({"count": 50_000, "interval_ms": 0}),
            Some(&token),
        )
        .await;
    let first = call.next().await.and_then(|f| f.id).unwrap_or_default();
    // A reader slower than the tool is cut off and resumes, as a client would.
    let mut last = first.clone();
    within("the call to finish", async {
        loop {
            let frames = call.rest().await;
            if frames.iter().any(common::Frame::is_response) {
                break;
            }
            last = frames
                .iter()
                .rev()
                .find_map(|f| f.id.clone())
                .unwrap_or(last);
            call = client.resume(&last).await;
        }
    })
    .await;
    let before = rss(pid);
    let session = client.session.clone().unwrap_or_default();
    let mut resumes = Vec::new();
    for _ in 0..100 {
        resumes.push(unread_resume(&binary.url, &session, &first).await);
    }
    let grown = rss(pid).saturating_sub(before);
    // Per connection: 256 KiB of frames, a replay chunk and hyper's buffer (64 KiB each)
    // and the actor: 51 MB for all 100 when measured; the whole stream was 1.3 GB.
    assert!(
        grown < 100 * MIB,
        "100 unread resumes grew the process by {} MB",
        grown / MIB
    );
    drop(resumes);
    drop(binary);
}
