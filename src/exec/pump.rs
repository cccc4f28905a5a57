//! Reads a program's stdout and stderr together, cuts them into chunks and stores each
//! chunk in the execution's log before handing it on. It awaits each store and each
//! hand-over, so a client or store slower than the program fills the pipes and the
//! program waits: nothing queues without bound.

use std::time::Instant;

use bytes::Bytes;
use serde_json::Value;
use tokio::net::unix::pipe;
use tokio::sync::{mpsc, watch};

use super::chunker::{Chunk, Chunker, Stream};
use super::record::log_key;
use crate::event_store::EventStoreHandle;
use crate::ids::{EventId, SessionId};

/// A stored chunk, with its id in the execution's log.
#[derive(Debug, Clone)]
pub struct Output {
    /// Its event id: what `get_execution_output` takes as `last_event_id`.
    pub id: EventId,
    /// The chunk.
    pub chunk: Chunk,
}

/// What the pump saw, for the outcome.
#[derive(Debug, Clone, Default)]
pub struct Pumped {
    /// Bytes read, per stream (past the limit too).
    pub bytes: [u64; 2],
    /// The first `result_bytes` of each stream.
    pub heads: [Vec<u8>; 2],
    /// Output was cut at the limit.
    pub truncated: bool,
    /// Chunks stored.
    pub chunks: u64,
    /// A chunk could not be stored (the store is away or full): the log has gaps.
    pub unstored: u64,
}

/// Where chunks go.
pub struct Pump {
    /// The execution (its log's session).
    pub id: SessionId,
    /// Its store.
    pub store: EventStoreHandle,
    /// The request that started it, while it listens.
    pub output: Option<mpsc::Sender<Output>>,
    /// Chunks stored so far, for long polls on this replica.
    pub progress: watch::Sender<u64>,
    /// The chunker.
    pub chunker: Chunker,
    /// Bytes stored at most, both streams together.
    pub limit: u64,
    /// Bytes of each stream's head kept for the result.
    pub head_bytes: usize,
}

impl Pump {
    /// Runs until both pipes close. `on_limit` is called once, when the output reaches
    /// the limit (the pump goes on reading, and dropping, until the program is stopped).
    pub async fn run(
        mut self,
        stdout: pipe::Receiver,
        stderr: pipe::Receiver,
        on_limit: impl FnOnce() + Send,
    ) -> Pumped {
        let mut seen = Pumped::default();
        let mut pipes = [Some(stdout), Some(stderr)];
        let mut buffers = [vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]];
        let mut stored = 0u64;
        let mut on_limit = Some(on_limit);
        while pipes.iter().any(Option::is_some) {
            let deadline = self.chunker.deadline();
            let [out, err] = &mut pipes;
            let [out_buf, err_buf] = &mut buffers;
            let (stream, read) = tokio::select! {
                read = read(out.as_ref(), out_buf), if out.is_some() => (Stream::Stdout, read),
                read = read(err.as_ref(), err_buf), if err.is_some() => (Stream::Stderr, read),
                () = sleep_until(deadline), if deadline.is_some() => {
                    if let Some(chunk) = self.chunker.flush() {
                        self.emit(chunk, &mut seen).await;
                    }
                    continue;
                }
            };
            let n = match read {
                Some(n) if n > 0 => n,
                // EOF or a read error: that stream is done.
                _ => {
                    pipes[stream.index()] = None;
                    continue;
                }
            };
            let data = &buffers[stream.index()][..n];
            seen.bytes[stream.index()] += n as u64;
            let head = &mut seen.heads[stream.index()];
            let room = self.head_bytes.saturating_sub(head.len()).min(n);
            head.extend_from_slice(&data[..room]);
            let allowed = self.limit.saturating_sub(stored).min(n as u64) as usize;
            stored += allowed as u64;
            if allowed < n && !seen.truncated {
                seen.truncated = true;
                if let Some(f) = on_limit.take() {
                    f();
                }
            }
            let chunks = self.chunker.push(stream, &data[..allowed], Instant::now());
            for chunk in chunks {
                self.emit(chunk, &mut seen).await;
            }
        }
        if let Some(chunk) = self.chunker.flush() {
            self.emit(chunk, &mut seen).await;
        }
        seen
    }

    async fn emit(&mut self, chunk: Chunk, seen: &mut Pumped) {
        let payload = Bytes::from(Value::Object(chunk.to_json()).to_string());
        let id = match self.store.append(log_key(self.id), payload, false).await {
            Ok(Some(id)) => id,
            Ok(None) | Err(_) => {
                // Replay is off, or the store is away: the chunk still reaches the request
                // live, with an id nobody can resume from.
                seen.unstored += 1;
                log_key(self.id).event_id(0)
            }
        };
        seen.chunks = chunk.seq;
        self.progress.send_replace(chunk.seq);
        if let Some(output) = &self.output
            && output.send(Output { id, chunk }).await.is_err()
        {
            // The request stopped listening; the log still has everything.
            self.output = None;
        }
    }
}

async fn read(pipe: Option<&pipe::Receiver>, buffer: &mut [u8]) -> Option<usize> {
    let pipe = pipe?;
    loop {
        pipe.readable().await.ok()?;
        match pipe.try_read(buffer) {
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return None,
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(at) = deadline {
        tokio::time::sleep_until(at.into()).await;
    }
}
