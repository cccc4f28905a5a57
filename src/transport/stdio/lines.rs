//! The stdio transport's framing: newline-delimited JSON-RPC messages, read with a bound
//! on each line and written whole, one per line; and the process's standard streams.

use std::os::fd::AsFd;

use bytes::Bytes;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Stdin and stdout for the transport. Where they are pipes (what a client that starts
/// the server gives it) they are read and written non-blocking on the runtime's reactor:
/// no thread hop per read or write (tokio's `stdin()` and `stdout()` make each one a
/// blocking call on a pool thread, which cost a quarter of a lone call's CPU), and a
/// pending read can be dropped. A terminal or a file keeps tokio's blocking streams.
/// The pipes' descriptions become non-blocking for whoever else shares them.
pub(crate) fn standard_streams() -> (
    Box<dyn AsyncRead + Unpin + Send>,
    Box<dyn AsyncWrite + Unpin + Send>,
) {
    use tokio::net::unix::pipe;
    let input: Box<dyn AsyncRead + Unpin + Send> = match std::io::stdin()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| pipe::Receiver::from_file(std::fs::File::from(fd)))
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdin()),
    };
    let output: Box<dyn AsyncWrite + Unpin + Send> = match std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .and_then(|fd| pipe::Sender::from_file(std::fs::File::from(fd)))
    {
        Ok(pipe) => Box::new(pipe),
        Err(_) => Box::new(tokio::io::stdout()),
    };
    (input, output)
}

/// One line of input.
#[derive(Debug, PartialEq)]
pub(super) enum Line {
    /// A line's bytes, without its newline (and any `\r` before it).
    Message(Bytes),
    /// A line longer than the limit; its bytes were dropped as they came.
    TooLong,
}

/// Reads `input` line by line into `lines` until end of input, an I/O error, or nobody
/// listens. Lines of only whitespace are skipped; a last line without a newline counts.
/// A line over `max` bytes is reported as [`Line::TooLong`] and never held whole, so a
/// client cannot make the server buffer more than `max` bytes. Waits while `lines` is
/// full: the server reads no faster than it dispatches.
pub(super) async fn read_lines(
    input: impl AsyncRead + Unpin,
    max: usize,
    lines: mpsc::Sender<Line>,
) {
    let mut input = BufReader::with_capacity(64 * 1024, input);
    let mut line = Vec::new();
    let mut too_long = false;
    loop {
        let buf = match input.fill_buf().await {
            Ok(buf) => buf,
            Err(e) => {
                tracing::warn!(error = %e, "stdin failed; treating it as closed");
                break;
            }
        };
        if buf.is_empty() {
            break;
        }
        let (taken, ended) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (&buf[..at], at + 1),
            None => (buf, buf.len()),
        };
        if !too_long {
            if line.len() + taken.len() > max {
                too_long = true;
                line = Vec::new();
            } else {
                line.extend_from_slice(taken);
            }
        }
        let complete = ended > taken.len();
        input.consume(ended);
        if complete && !send(&lines, &mut line, &mut too_long).await {
            return;
        }
    }
    send(&lines, &mut line, &mut too_long).await;
}

/// Sends the line gathered so far, if any; false when nobody listens any more.
async fn send(lines: &mpsc::Sender<Line>, line: &mut Vec<u8>, too_long: &mut bool) -> bool {
    let next = if std::mem::take(too_long) {
        Line::TooLong
    } else {
        let text = std::mem::take(line);
        if text.iter().all(u8::is_ascii_whitespace) {
            return true;
        }
        let end = text.len() - usize::from(text.ends_with(b"\r"));
        Line::Message(Bytes::from(text).slice(..end))
    };
    lines.send(next).await.is_ok()
}

/// Writes each message of `messages` to `output` followed by a newline, flushing whenever
/// no more are waiting, until every sender is gone or `finish` is cancelled (then what is
/// queued is written first: a handler that outlives the connection cannot hold it open).
/// Returns the error that stopped it (the client closed its end), if any.
pub(super) async fn write_lines(
    output: impl AsyncWrite + Unpin,
    mut messages: mpsc::Receiver<Bytes>,
    finish: CancellationToken,
) -> std::io::Result<()> {
    let mut output = tokio::io::BufWriter::with_capacity(64 * 1024, output);
    loop {
        let message = tokio::select! {
            biased;
            message = messages.recv() => message,
            () = finish.cancelled() => messages.try_recv().ok(),
        };
        let Some(message) = message else { break };
        output.write_all(&message).await?;
        output.write_all(b"\n").await?;
        // A burst goes out in one write; a lone message at once.
        if messages.is_empty() {
            output.flush().await?;
        }
    }
    output.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn lines_of(input: &'static [u8], max: usize) -> Vec<Line> {
        let (tx, mut rx) = mpsc::channel(16);
        read_lines(input, max, tx).await;
        let mut out = Vec::new();
        while let Some(line) = rx.recv().await {
            out.push(line);
        }
        out
    }

    fn message(text: &'static str) -> Line {
        Line::Message(Bytes::from_static(text.as_bytes()))
    }

    #[tokio::test]
    async fn splits_on_newlines_and_keeps_a_last_line_without_one() {
        let lines = lines_of(b"{\"a\":1}\r\n\n  \n{\"b\":2}\n{\"c\":3}", 100).await;
        assert_eq!(
            lines,
            vec![
                message("{\"a\":1}"),
                message("{\"b\":2}"),
                message("{\"c\":3}")
            ]
        );
    }

    #[tokio::test]
    async fn a_line_over_the_limit_is_reported_and_the_next_is_read() {
        let lines = lines_of(b"0123456789\n012\n0123456789", 5).await;
        assert_eq!(lines, vec![Line::TooLong, message("012"), Line::TooLong]);
    }

    #[tokio::test]
    async fn writes_one_message_per_line() {
        let (tx, rx) = mpsc::channel(4);
        tx.send(Bytes::from_static(b"{}")).await.ok();
        tx.send(Bytes::from_static(b"[1]")).await.ok();
        drop(tx);
        let mut out = Vec::new();
        write_lines(&mut out, rx, CancellationToken::new())
            .await
            .ok();
        assert_eq!(out, b"{}\n[1]\n");
    }
}
