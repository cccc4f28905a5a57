//! Server-Sent Events framing: pure functions from values to wire bytes; [`parse`] reads
//! them back.
//!
//! Every frame is built with one allocation sized up front, because frames are built once
//! per event per connection on the hot path.

pub mod parse;

pub use parse::{Block, Parser};

use std::fmt::Write as _;
use std::time::Duration;

use bytes::Bytes;

use crate::ids::EventId;

/// The SSE event type MCP uses for JSON-RPC messages.
const EVENT_MESSAGE: &str = "message";

/// Appends a message frame without an `id:` to `out`, its data written by `data`: JSON we
/// serialized, which holds no line break, so one `data:` line. Many frames then make one
/// buffer (a replayed page, one write).
pub fn push_message(out: &mut Vec<u8>, data: impl FnOnce(&mut Vec<u8>)) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(EVENT_MESSAGE.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    data(out);
    out.extend_from_slice(b"\n\n");
}

/// A message frame: `id:` (when given), `event: message` and one `data:` line per line of
/// `data`, then the blank line that dispatches the event.
pub fn message(id: Option<&EventId>, data: &[u8]) -> Bytes {
    let mut out = String::with_capacity(data.len() + 96);
    push_id(&mut out, id);
    out.push_str("event: ");
    out.push_str(EVENT_MESSAGE);
    out.push('\n');
    // Our payloads are JSON we serialized, so valid UTF-8: checked, not repaired.
    match std::str::from_utf8(data) {
        Ok(text) => push_data(&mut out, text),
        Err(_) => push_data(&mut out, &String::from_utf8_lossy(data)),
    }
    out.push('\n');
    Bytes::from(out)
}

/// Payloads at least this large are framed around, not copied ([`framed`]).
const SHARE_FROM: usize = 4096;

/// A message frame as it goes to the connection: one buffer, or the payload itself
/// between the lines before it and the blank line after it.
#[derive(Debug, Clone)]
pub enum Framed {
    /// The whole frame in one buffer.
    Whole(Bytes),
    /// `head` + `data` + the blank line: the payload is shared, not copied.
    Around {
        /// `id:`, `event:` and `data: `.
        head: Bytes,
        /// The payload, as stored.
        data: Bytes,
    },
}

impl Framed {
    /// The trailer of [`Framed::Around`].
    pub const TAIL: &'static [u8] = b"\n\n";

    /// The most buffers one frame is written as.
    pub const MOST_PARTS: usize = 3;

    /// How many buffers the frame is written as.
    pub fn parts(&self) -> usize {
        match self {
            Self::Whole(_) => 1,
            Self::Around { .. } => Self::MOST_PARTS,
        }
    }

    /// Bytes on the wire.
    pub fn len(&self) -> usize {
        match self {
            Self::Whole(b) => b.len(),
            Self::Around { head, data } => head.len() + data.len() + Self::TAIL.len(),
        }
    }

    /// Never empty; here for `len`'s sake.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Appends the frame to `out`.
    pub fn copy_to(&self, out: &mut bytes::BytesMut) {
        match self {
            Self::Whole(b) => out.extend_from_slice(b),
            Self::Around { head, data } => {
                out.extend_from_slice(head);
                out.extend_from_slice(data);
                out.extend_from_slice(Self::TAIL);
            }
        }
    }
}

/// [`message`], without copying a large payload that fits on one `data:` line (valid
/// UTF-8 without CR or LF, as the JSON we serialize always is): a large tool output held
/// by the store is then not copied again for every connection that receives it.
pub fn framed(id: Option<&EventId>, data: &Bytes) -> Framed {
    let one_line = data.len() >= SHARE_FROM
        && !data.iter().any(|b| *b == b'\n' || *b == b'\r')
        && std::str::from_utf8(data).is_ok();
    if !one_line {
        return Framed::Whole(message(id, data));
    }
    let mut head = String::with_capacity(64);
    push_id(&mut head, id);
    head.push_str("event: ");
    head.push_str(EVENT_MESSAGE);
    head.push_str("\ndata: ");
    Framed::Around {
        head: Bytes::from(head),
        data: data.clone(),
    }
}

/// The priming frame a stream starts with: the position the client can resume from, with
/// empty data (an SSE parser dispatches it as an empty message, which MCP clients skip)
/// and the reconnection delay.
pub fn priming(id: Option<&EventId>, retry: Duration) -> Bytes {
    let mut out = String::with_capacity(96);
    push_id(&mut out, id);
    let _ = writeln!(out, "retry: {}", retry.as_millis());
    out.push_str("data:\n\n");
    Bytes::from(out)
}

/// A bare `retry:` frame, sent just before the server closes a stream on purpose, so the
/// client knows when to reconnect.
pub fn retry(retry: Duration) -> Bytes {
    Bytes::from(format!("retry: {}\n\n", retry.as_millis()))
}

/// A comment frame (`: text`): keeps proxies and the client's read timer alive and is
/// ignored by every SSE parser.
pub fn comment(text: &str) -> Bytes {
    let mut out = String::with_capacity(text.len() + 4);
    // A CR ends a line in SSE too: left inside a comment, it would start a field.
    push_lines(&mut out, ": ", text);
    out.push('\n');
    Bytes::from(out)
}

fn push_id(out: &mut String, id: Option<&EventId>) {
    if let Some(id) = id {
        out.push_str("id: ");
        id.push_to(out);
        out.push('\n');
    }
}

/// Writes `data` as `data:` lines.
fn push_data(out: &mut String, data: &str) {
    push_lines(out, "data: ", data);
}

/// Writes each line of `text` after `prefix`. SSE ends a line at CR, LF or CRLF, so each
/// becomes a line break here; compact JSON has none, so this is one line in practice. The
/// breaks are found byte by byte (they are ASCII, so never inside a character).
fn push_lines(out: &mut String, prefix: &str, text: &str) {
    let mut rest = text;
    loop {
        out.push_str(prefix);
        match rest.bytes().position(|b| b == b'\n' || b == b'\r') {
            Some(i) => {
                out.push_str(&rest[..i]);
                out.push('\n');
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                rest = &rest[i + skip..];
            }
            None => {
                out.push_str(rest);
                out.push('\n');
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_encode_as_the_spec_describes() {
        let Ok(id) = "00000001-2-3".parse::<EventId>() else {
            panic!("a valid id");
        };
        let cases: Vec<(Bytes, &str)> = vec![
            (
                message(Some(&id), br#"{"a":1}"#),
                "id: 00000001-2-3\nevent: message\ndata: {\"a\":1}\n\n",
            ),
            (message(None, b"x"), "event: message\ndata: x\n\n"),
            (
                message(None, b"a\nb\r\nc\rd"),
                "event: message\ndata: a\ndata: b\ndata: c\ndata: d\n\n",
            ),
            (message(None, b""), "event: message\ndata: \n\n"),
            (
                priming(Some(&id), Duration::from_secs(5)),
                "id: 00000001-2-3\nretry: 5000\ndata:\n\n",
            ),
            (
                priming(None, Duration::from_millis(150)),
                "retry: 150\ndata:\n\n",
            ),
            (retry(Duration::from_millis(250)), "retry: 250\n\n"),
            (comment("ping"), ": ping\n\n"),
            (comment(""), ": \n\n"),
            (comment("a\nb"), ": a\n: b\n\n"),
            (comment("a\rdata: x"), ": a\n: data: x\n\n"),
        ];
        for (got, want) in cases {
            assert_eq!(std::str::from_utf8(&got).ok(), Some(want));
        }
    }

    #[test]
    fn a_large_one_line_payload_is_framed_around_and_reads_the_same() {
        let Ok(id) = "00000001-2-3".parse::<EventId>() else {
            panic!("a valid id");
        };
        let large = Bytes::from(format!("{{\"a\":\"{}\"}}", "x".repeat(5000)));
        let framed = framed(Some(&id), &large);
        let Framed::Around { data, .. } = &framed else {
            panic!("shared, not copied");
        };
        assert_eq!(data.as_ptr(), large.as_ptr());
        let mut wire = bytes::BytesMut::new();
        framed.copy_to(&mut wire);
        assert_eq!(wire.len(), framed.len());
        assert_eq!(wire.freeze(), message(Some(&id), &large));
        let broken = Bytes::from(format!("a\n{}", "x".repeat(5000)));
        assert!(matches!(framed_of(&broken), Framed::Whole(_)));
    }

    fn framed_of(data: &Bytes) -> Framed {
        framed(None, data)
    }
}
