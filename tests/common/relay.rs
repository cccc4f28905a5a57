//! A TCP relay on loopback that can go silent: after [`Relay::cut`] the connections it
//! carries stop forwarding in both directions but stay open, as when a NAT or a firewall
//! forgets a connection (half-open). Connections made after the cut are carried again.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;

pub struct Relay {
    pub port: u16,
    generation: Arc<AtomicU64>,
    accept: tokio::task::JoinHandle<()>,
}

impl Relay {
    /// Relays 127.0.0.1:`port` → 127.0.0.1:`target`.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("relay bind: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("relay addr: {e}"))
            .port();
        let generation = Arc::new(AtomicU64::new(0));
        let current = generation.clone();
        let accept = tokio::spawn(async move {
            // Dropped with the accept task: every pump stops with it.
            let mut pumps = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let born = current.load(Ordering::SeqCst);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                pumps.spawn(pump(client_read, server_write, current.clone(), born));
                pumps.spawn(pump(server_read, client_write, current.clone(), born));
            }
        });
        Self {
            port,
            generation,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Every connection carried so far goes silent, without closing.
    pub fn cut(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` → `to` while the relay's generation is the one the connection was born
/// in; then holds both ends open and moves nothing more.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    generation: Arc<AtomicU64>,
    born: u64,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if generation.load(Ordering::SeqCst) != born {
            // Half-open: what was read is lost, and nothing more is read or written.
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
