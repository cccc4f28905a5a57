//! A write-stall timeout for accepted connections.
//!
//! A client that stops reading leaves hyper blocked on a socket write with the response's
//! buffered frames pinned in memory, for as long as the client likes: hyper has no write
//! timeout. [`StallGuard`] fails a write that has made no progress for `write_timeout`, so
//! hyper drops the connection and everything it holds. Idle connections are unaffected:
//! the clock runs only while a write is pending.

use crate::telemetry::metrics::{CONNECTIONS_CUT, Cut};
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// An I/O stream whose writes fail after `limit` without progress.
#[derive(Debug)]
pub(crate) struct StallGuard<T> {
    io: T,
    limit: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<T> StallGuard<T> {
    /// Wraps `io`.
    pub(crate) fn new(io: T, limit: Duration) -> Self {
        Self {
            io,
            limit,
            stalled: None,
        }
    }

    /// Called when a write is pending: starts the clock, or reports that it ran out.
    fn check_stall(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let limit = self.limit;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        ready!(timer.as_mut().poll(cx));
        CONNECTIONS_CUT.inc(Cut::WriteStall);
        Poll::Ready(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("the peer read nothing for {limit:?}"),
        ))
    }

    fn progress<R>(
        &mut self,
        result: Poll<io::Result<R>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<R>> {
        match result {
            Poll::Ready(r) => {
                self.stalled = None;
                Poll::Ready(r)
            }
            Poll::Pending => self.check_stall(cx).map(Err),
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for StallGuard<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for StallGuard<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write(cx, buf);
        self.progress(result, cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.progress(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.io).poll_flush(cx);
        self.progress(result, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_peer_never_reads_fails_after_the_limit() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut guarded = StallGuard::new(near, Duration::from_secs(30));
        let chunk = [7u8; 64];
        assert!(guarded.write_all(&chunk).await.is_ok(), "fits the pipe");
        let started = tokio::time::Instant::now();
        let err = guarded.write_all(&chunk).await.err();
        assert_eq!(err.map(|e| e.kind()), Some(io::ErrorKind::TimedOut));
        assert!(started.elapsed() >= Duration::from_secs(30));
        let mut got = [0u8; 64];
        assert!(far.read_exact(&mut got).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_slow_but_moving_reader_is_not_cut_off() {
        let (near, mut far) = tokio::io::duplex(64);
        let mut guarded = StallGuard::new(near, Duration::from_secs(30));
        let reader = tokio::spawn(async move {
            let mut buf = [0u8; 64];
            let mut total = 0;
            while total < 64 * 10 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                match far.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => total += n,
                }
            }
            total
        });
        for _ in 0..10 {
            assert!(
                guarded.write_all(&[1u8; 64]).await.is_ok(),
                "20 s between reads is within 30 s"
            );
        }
        drop(guarded);
        assert_eq!(reader.await.ok(), Some(640));
    }
}
