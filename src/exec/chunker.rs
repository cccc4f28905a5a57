//! Cuts a program's stdout and stderr into chunks, bounded in size (by the caller's
//! `chunk_bytes`) and in time (the caller flushes at [`Chunker::deadline`]).
//!
//! At most one chunk is pending at a time: bytes of the other stream flush it first, so
//! the order of chunks is the order in which the bytes were read, across both streams.

use std::time::Instant;

use base64::Engine as _;
use serde_json::{Map, Value};

/// Which of the program's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl Stream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Self::Stdout => 0,
            Self::Stderr => 1,
        }
    }
}

/// One piece of output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// Where it came from.
    pub stream: Stream,
    /// Its place among all chunks of the execution, from 1, across both streams.
    pub seq: u64,
    /// The bytes, as read.
    pub bytes: Vec<u8>,
}

impl Chunk {
    /// `stream`, `seq` and the bytes: `text` when they are UTF-8, else `base64`.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("stream".into(), self.stream.as_str().into());
        out.insert("seq".into(), self.seq.into());
        match std::str::from_utf8(&self.bytes) {
            Ok(text) => out.insert("text".into(), text.into()),
            Err(_) => out.insert(
                "base64".into(),
                base64::engine::general_purpose::STANDARD
                    .encode(&self.bytes)
                    .into(),
            ),
        };
        out
    }
}

/// The chunking state of one execution.
#[derive(Debug)]
pub struct Chunker {
    max: usize,
    interval: std::time::Duration,
    pending: Option<Pending>,
    seq: u64,
}

#[derive(Debug)]
struct Pending {
    stream: Stream,
    bytes: Vec<u8>,
    since: Instant,
}

impl Chunker {
    /// Chunks of at most `max` bytes (at least 4, so a UTF-8 character always fits),
    /// each held at most `interval` after its first byte.
    pub fn new(max: usize, interval: std::time::Duration) -> Self {
        Self {
            max: max.max(4),
            interval,
            pending: None,
            seq: 0,
        }
    }

    /// Takes `data` read from `stream` at `now`; returns the chunks now complete.
    pub fn push(&mut self, stream: Stream, mut data: &[u8], now: Instant) -> Vec<Chunk> {
        let mut out = Vec::new();
        if self.pending.as_ref().is_some_and(|p| p.stream != stream) {
            out.extend(self.flush());
        }
        while !data.is_empty() {
            let pending = self.pending.get_or_insert_with(|| Pending {
                stream,
                bytes: Vec::new(),
                since: now,
            });
            let room = self.max - pending.bytes.len();
            let (now_bytes, rest) = data.split_at(room.min(data.len()));
            pending.bytes.extend_from_slice(now_bytes);
            data = rest;
            if pending.bytes.len() >= self.max {
                let keep = utf8_tail(&pending.bytes);
                let tail = pending.bytes.split_off(pending.bytes.len() - keep);
                out.extend(self.flush());
                if !tail.is_empty() {
                    self.pending = Some(Pending {
                        stream,
                        bytes: tail,
                        since: now,
                    });
                }
            }
        }
        out
    }

    /// When the pending chunk must be flushed, if one is pending.
    pub fn deadline(&self) -> Option<Instant> {
        self.pending.as_ref().map(|p| p.since + self.interval)
    }

    /// The pending chunk, now.
    pub fn flush(&mut self) -> Option<Chunk> {
        let pending = self.pending.take()?;
        self.seq += 1;
        Some(Chunk {
            stream: pending.stream,
            seq: self.seq,
            bytes: pending.bytes,
        })
    }

    /// Chunks made so far.
    #[cfg(any(test, feature = "testing"))]
    pub fn chunks(&self) -> u64 {
        self.seq
    }
}

/// How many bytes at the end of `bytes` begin a UTF-8 character that is not complete:
/// they wait for the next chunk, so text is not cut inside a character. 0 when the
/// bytes are not UTF-8 anyway.
pub(super) fn utf8_tail(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Err(e) if e.error_len().is_none() && e.valid_up_to() > 0 => bytes.len() - e.valid_up_to(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn text(c: &Chunk) -> String {
        String::from_utf8_lossy(&c.bytes).into_owned()
    }

    #[test]
    fn cuts_at_the_size_bound_and_numbers_across_streams() {
        let now = Instant::now();
        let mut chunker = Chunker::new(4, Duration::from_millis(20));
        let out = chunker.push(Stream::Stdout, b"abcdefghij", now);
        assert_eq!(out.iter().map(text).collect::<Vec<_>>(), ["abcd", "efgh"]);
        assert_eq!(chunker.deadline(), Some(now + Duration::from_millis(20)));
        // The other stream flushes what is pending first.
        let out = chunker.push(Stream::Stderr, b"x", now);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].stream, out[0].seq, text(&out[0])),
            (Stream::Stdout, 3, "ij".into())
        );
        let last = chunker.flush().map(|c| (c.stream, c.seq, text(&c)));
        assert_eq!(last, Some((Stream::Stderr, 4, "x".into())));
        assert_eq!(chunker.flush(), None);
        assert_eq!(chunker.deadline(), None);
    }

    #[test]
    fn does_not_cut_inside_a_character() {
        let mut chunker = Chunker::new(4, Duration::from_millis(20));
        // "aaé" is 4 bytes; "aaaé" would cut é in two.
        let out = chunker.push(Stream::Stdout, "aaaéb".as_bytes(), Instant::now());
        assert_eq!(out.iter().map(text).collect::<Vec<_>>(), ["aaa"]);
        assert_eq!(chunker.flush().map(|c| text(&c)), Some("éb".into()));
    }

    #[test]
    fn binary_is_base64_and_text_is_text() {
        let chunk = Chunk {
            stream: Stream::Stderr,
            seq: 7,
            bytes: vec![0xff, 0x00, 0x80],
        };
        let json = Value::Object(chunk.to_json());
        assert_eq!(json["base64"], "/wCA");
        assert_eq!(json["stream"], "stderr");
        assert_eq!(json["seq"], 7);
        let chunk = Chunk {
            bytes: b"hi\n".to_vec(),
            ..chunk
        };
        assert_eq!(Value::Object(chunk.to_json())["text"], "hi\n");
    }
}
