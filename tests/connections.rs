//! Connections that send nothing, send a request head a byte at a time, never finish
//! their body, or come in larger numbers than `server.max_connections`: each is closed or
//! refused, and a new client is served meanwhile.
// getrlimit and setrlimit: std has no wrapper.
#![allow(unsafe_code)]

mod common;

use std::time::Duration;

use common::{TestServer, nz, within};
use otpmcp::config::NonZeroDuration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn connect(server: &TestServer) -> TcpStream {
    within("a connection", TcpStream::connect(server.app.local_addr()))
        .await
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Reads until the server closes the connection; returns what it sent.
async fn until_closed(conn: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let _ = within(
        "the server to close the connection",
        conn.read_to_end(&mut got),
    )
    .await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Raises this process's soft limit on open files to at least `needed` (within its hard
/// limit, as any user may): a test holding both ends of thousands of connections passes
/// the 1024 an ordinary user's login starts with.
fn allow_open_files(needed: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given, which lives across the call.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(read, 0, "getrlimit: {}", std::io::Error::last_os_error());
    if limit.rlim_cur >= needed {
        return;
    }
    assert!(
        limit.rlim_max >= needed,
        "this test needs {needed} open files; the hard limit (ulimit -Hn) is {}",
        limit.rlim_max
    );
    limit.rlim_cur = needed;
    // SAFETY: setrlimit reads the struct it is given, which lives across the call.
    let set = unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) };
    assert_eq!(set, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

#[tokio::test]
async fn silent_and_slowloris_connections_are_closed_and_new_clients_served() {
    // Both ends of 2,000 connections are in this process, and the test's own files.
    allow_open_files(4_500);
    let server = TestServer::start(|c| {
        c.server.header_timeout = NonZeroDuration::from_millis(300);
    })
    .await;
    // The issue's figure: 2,000 connections that never send a byte.
    let mut silent = Vec::new();
    for _ in 0..2_000 {
        silent.push(connect(&server).await);
    }
    // A head a byte at a time, each well within any read timeout of its own.
    let mut slow = connect(&server).await;
    let head = b"POST /mcp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n";
    let slowloris = async {
        for byte in head {
            if slow.write_all(&[*byte]).await.is_err() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    };
    // Meanwhile a client is served.
    let mut client = server.client();
    let (cut_off, _) = tokio::join!(slowloris, client.initialize());
    assert!(
        cut_off,
        "the server stopped reading the slow head before it was complete"
    );
    // The head took 20 ms a byte; the connection was closed well before it was complete.
    let answer = until_closed(&mut slow).await;
    assert!(!answer.contains("200 OK"), "{answer}");
    for conn in &mut silent {
        let answer = until_closed(conn).await;
        assert!(
            !answer.contains("200"),
            "a silent connection got {answer:?}"
        );
    }
    client.echo("still served").await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_body_that_never_ends_gets_408() {
    let server = TestServer::start(|c| {
        c.server.body_timeout = NonZeroDuration::from_millis(300);
    })
    .await;
    let mut conn = connect(&server).await;
    let host = server.app.local_addr();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n\
         accept: application/json, text/event-stream\r\ncontent-length: 100\r\n\r\n{{\"jsonrpc\""
    );
    conn.write_all(head.as_bytes())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut status = [0u8; 12];
    within("an answer", conn.read_exact(&mut status))
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(&status[9..12], b"408");
    server.shutdown().await;
}

#[tokio::test]
async fn past_max_connections_a_connection_gets_503_and_the_others_are_kept() {
    let server = TestServer::start(|c| {
        c.server.max_connections = nz!(5);
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..5 {
        held.push(connect(&server).await);
    }
    let mut extra = connect(&server).await;
    let answer = until_closed(&mut extra).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
    assert!(answer.contains("retry-after: 1"), "{answer:?}");
    // One place freed: a client is served again.
    drop(held.pop());
    let mut client = server.client();
    common::eventually("a connection to be served again", || async {
        let resp = client
            .http
            .post(&client.url)
            .header("content-type", "application/json")
            .header("accept", common::ACCEPT_BOTH)
            .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#)
            .send()
            .await;
        resp.ok().filter(|r| r.status() == 200).map(|_| ())
    })
    .await;
    client.initialize().await;
    drop(held);
    server.shutdown().await;
}
