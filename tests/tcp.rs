//! Accepted connections have Nagle's algorithm off: `axum::serve` leaves it on, and then
//! every small SSE write can wait ~40 ms for the client's delayed ACK. Checked on the real
//! binary by reading the option off its accepted socket (no timing involved): a duplicate
//! of the server's socket taken with pidfd_getfd(2) (Linux >= 5.6), which std lacks. It
//! needs ptrace rights over the server: its parent of the same user has them (the server
//! makes itself non-dumpable only with `[exec]` on, which this test leaves off).
// The two system calls and the file descriptor they return.
#![allow(unsafe_code)]

mod common;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd as _, OwnedFd};

use common::within;

/// TCP_NODELAY of the socket process `pid` holds connected to local port `port`.
fn nodelay_of(pid: u32, port: u16) -> Result<bool, String> {
    // SAFETY: pidfd_open takes a pid and flags; it returns a new descriptor or -1.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(format!("pidfd_open: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: a fresh descriptor of ours, closed once (when `pidfd` drops).
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).map_err(|e| e.to_string())?;
    let mut refused = None;
    for entry in fds.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|target| target.to_string_lossy().starts_with("socket:"));
        let Some(number) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if !is_socket {
            continue;
        }
        use std::os::fd::AsRawFd as _;
        // SAFETY: pidfd_getfd takes our pidfd, the other process's descriptor number and
        // flags; it returns a new descriptor of ours or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), number, 0) };
        if fd < 0 {
            refused = Some(std::io::Error::last_os_error());
            continue;
        }
        // SAFETY: a fresh descriptor of ours, closed once (when `socket` drops). Not
        // every socket is TCP: for the others, peer_addr fails and it is skipped.
        let socket = std::net::TcpStream::from(unsafe { OwnedFd::from_raw_fd(fd as i32) });
        if socket.peer_addr().is_ok_and(|peer| peer.port() == port) {
            return socket.nodelay().map_err(|e| e.to_string());
        }
    }
    Err(match refused {
        Some(e) => format!("pidfd_getfd: {e}"),
        None => "no socket connected to that port".to_owned(),
    })
}

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
        let nodelay = nodelay_of(pid, port);
        drop(conn);
        nodelay
    });
    let nodelay = within("the socket check", check)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    drop(binary);
    assert_eq!(nodelay, Ok(true), "TCP_NODELAY on the accepted socket");
}
