//! Accepted connections have Nagle's algorithm off: `axum::serve` leaves it on, and then
//! every small SSE write can wait ~40 ms for the client's delayed ACK. Checked on the real
//! binary by reading the option off its accepted socket (no timing involved).

mod common;

use std::io::{Read, Write};
use std::process::Command;

use common::within;

#[tokio::test]
async fn the_server_disables_nagle_on_accepted_sockets() {
    let binary = common::Binary::start(&[], &[]).await;
    let addr = binary
        .url
        .trim_start_matches("http://")
        .trim_end_matches("/mcp")
        .to_owned();
    let pid = binary.child.id();

    let check = tokio::task::spawn_blocking(move || {
        // One request over a kept-open connection, so the server has accepted it.
        let mut conn = std::net::TcpStream::connect(&addr).unwrap_or_else(|e| panic!("{e}"));
        let request =
            format!("GET /mcp HTTP/1.1\r\nhost: {addr}\r\naccept: text/event-stream\r\n\r\n");
        conn.write_all(request.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut first = [0u8; 12];
        conn.read_exact(&mut first)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            &first, b"HTTP/1.1 400",
            "the server answered on this connection"
        );
        let port = conn.local_addr().map(|a| a.port()).unwrap_or_default();
        let out = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/sockopt.py"
            ))
            .args([pid.to_string(), port.to_string()])
            .output()
            .unwrap_or_else(|e| panic!("python3: {e}"));
        drop(conn);
        (
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    });
    let (nodelay, stderr) = within("the socket check", check).await.unwrap_or_default();
    drop(binary);
    assert_eq!(
        nodelay, "1",
        "TCP_NODELAY on the accepted socket (stderr: {stderr})"
    );
}
