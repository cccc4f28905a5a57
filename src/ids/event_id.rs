//! Event and stream identifiers, and the wire format of `Last-Event-ID`.
//!
//! Format: `<tag>-<stream>-<seq>`, e.g. `9f3a01c2-3-17`:
//! - `tag`: 8 lowercase hex digits, the low 32 bits of the session id. An id from another
//!   session is recognised as foreign (with odds of 1 in 2^32 of a false match), so it can
//!   never be resolved against this session's streams.
//! - `stream`: decimal stream number within the session; 0 is the standalone GET stream,
//!   and POST response streams count up from 1 in the order the session opened them
//!   (with Redis, from each replica's own range: `replica << 40 | n`).
//! - `seq`: decimal position within that stream; 0 is the priming position (before the
//!   first event), the first stored event is 1, and each event adds one.
//!
//! So ids are unique across all streams of a session, name their stream, and are totally
//! ordered within it. Parsing does a bounded amount of work (at most 8 + 20 + 20 bytes are
//! read), so it is O(1) whatever the client sends.
//!
//! ```
//! use otpmcp::ids::{EventId, StreamKey, StreamNo};
//! use otpmcp::ids::SessionId;
//!
//! let session = SessionId::random();
//! let id = StreamKey::new(session, StreamNo(3)).event_id(17);
//! let parsed: EventId = id.to_string().parse().unwrap();
//! assert_eq!(parsed.key_in(session), Some(StreamKey::new(session, StreamNo(3))));
//! assert!("session_abc_3".parse::<EventId>().is_err());
//! ```

use std::fmt;
use std::str::FromStr;

use super::SessionId;

/// Stream numbers are `replica << STREAM_BITS | n`: a replica numbers the streams it opens
/// in its own block, so replicas sharing a session never hand out the same number.
pub const STREAM_BITS: u32 = 40;

/// A stream within a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamNo(pub u64);

impl StreamNo {
    /// The standalone stream a client opens with GET (server-initiated messages).
    pub const STANDALONE: StreamNo = StreamNo(0);

    /// True for the standalone GET stream.
    pub fn is_standalone(self) -> bool {
        self == Self::STANDALONE
    }
}

impl fmt::Display for StreamNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// One stream of one session: the unit of replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StreamKey {
    /// The owning session.
    pub session: SessionId,
    /// The stream within it.
    pub stream: StreamNo,
}

impl StreamKey {
    /// The key of `stream` in `session`.
    pub fn new(session: SessionId, stream: StreamNo) -> Self {
        Self { session, stream }
    }

    /// The id of position `seq` on this stream.
    pub fn event_id(self, seq: u64) -> EventId {
        EventId {
            tag: self.session.tag(),
            stream: self.stream,
            seq,
        }
    }
}

/// The id of one event (or of the priming position, `seq == 0`) on one stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventId {
    tag: u32,
    /// The stream the event belongs to.
    pub stream: StreamNo,
    /// Position on the stream; 0 is the priming position.
    pub seq: u64,
}

impl EventId {
    /// True when this id was issued by `session`.
    pub fn belongs_to(&self, session: SessionId) -> bool {
        self.tag == session.tag()
    }

    /// The stream key this id names, if it belongs to `session`.
    pub fn key_in(&self, session: SessionId) -> Option<StreamKey> {
        self.belongs_to(session)
            .then(|| StreamKey::new(session, self.stream))
    }
}

/// Ids order by stream, then by position: within one stream this is the order in which
/// the events were stored.
impl Ord for EventId {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.tag, self.stream, self.seq).cmp(&(other.tag, other.stream, other.seq))
    }
}

impl PartialOrd for EventId {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl EventId {
    /// Appends the id's text to `out`: what [`fmt::Display`] writes, without the
    /// formatting machinery (it is written once per event on the hot path).
    pub fn push_to(&self, out: &mut String) {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for shift in (0..8).rev() {
            out.push(char::from(HEX[((self.tag >> (shift * 4)) & 0xf) as usize]));
        }
        out.push('-');
        push_decimal(out, self.stream.0);
        out.push('-');
        push_decimal(out, self.seq);
    }
}

fn push_decimal(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for &d in &digits[at..] {
        out.push(char::from(d));
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = String::with_capacity(MAX_LEN);
        self.push_to(&mut text);
        f.write_str(&text)
    }
}

/// Why a `Last-Event-ID` value is not an [`EventId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventIdError {
    /// Longer than any id we issue.
    #[error("event id is too long")]
    TooLong,
    /// Not three `-`-separated parts.
    #[error("event id must look like <tag>-<stream>-<seq>")]
    Shape,
    /// The tag is not 8 lowercase hex digits.
    #[error("event id tag must be 8 hex digits")]
    Tag,
    /// The stream or position is not a decimal number without sign or leading zeros.
    #[error("event id stream and position must be decimal numbers")]
    Number,
}

/// The longest id we issue: 8 + 1 + 20 + 1 + 20.
const MAX_LEN: usize = 50;

fn parse_decimal(s: &str) -> Result<u64, EventIdError> {
    let canonical = !s.is_empty()
        && s.len() <= 20
        && s.bytes().all(|b| b.is_ascii_digit())
        && (s == "0" || !s.starts_with('0'));
    if !canonical {
        return Err(EventIdError::Number);
    }
    s.parse().map_err(|_| EventIdError::Number)
}

impl FromStr for EventId {
    type Err = EventIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() > MAX_LEN {
            return Err(EventIdError::TooLong);
        }
        let mut parts = s.split('-');
        let (Some(tag), Some(stream), Some(seq), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(EventIdError::Shape);
        };
        if tag.len() != 8 || !tag.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(EventIdError::Tag);
        }
        let tag = u32::from_str_radix(tag, 16).map_err(|_| EventIdError::Tag)?;
        Ok(EventId {
            tag,
            stream: StreamNo(parse_decimal(stream)?),
            seq: parse_decimal(seq)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_round_trips() {
        let session = SessionId::random();
        let key = StreamKey::new(session, StreamNo(3));
        for seq in [0, 1, 10, 17, u64::MAX] {
            let id = key.event_id(seq);
            let text = id.to_string();
            assert_eq!(
                text,
                format!("{:08x}-3-{seq}", session.tag()),
                "the text form is the documented one"
            );
            assert!(text.len() <= MAX_LEN);
            let back: EventId = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(back, id);
            assert_eq!(back.key_in(session), Some(key));
        }
    }

    #[test]
    fn ids_of_another_session_are_foreign() {
        let mine = SessionId::random();
        let mut other = SessionId::random();
        while other.tag() == mine.tag() {
            other = SessionId::random();
        }
        let id = StreamKey::new(other, StreamNo(1)).event_id(5);
        assert!(!id.belongs_to(mine));
        assert_eq!(id.key_in(mine), None);
    }

    #[test]
    fn ordering_follows_position_within_a_stream() {
        let key = StreamKey::new(SessionId::random(), StreamNo(2));
        assert!(key.event_id(9) < key.event_id(10));
        assert!(key.event_id(0) < key.event_id(1));
    }

    #[test]
    fn rejects_malformed_ids() {
        let long = "1".repeat(MAX_LEN + 1);
        let cases: &[(&str, EventIdError)] = &[
            ("", EventIdError::Shape),
            ("invalid_xyz", EventIdError::Shape),
            ("session_abc_3", EventIdError::Shape),
            ("0000000a-1", EventIdError::Shape),
            ("0000000a-1-2-3", EventIdError::Shape),
            ("0000000A-1-2", EventIdError::Tag),
            ("000000a-1-2", EventIdError::Tag),
            ("0000000a--2", EventIdError::Number),
            ("0000000a-1-", EventIdError::Number),
            ("0000000a-01-2", EventIdError::Number),
            ("0000000a-1-+2", EventIdError::Number),
            ("0000000a-1-99999999999999999999", EventIdError::Number),
            ("0000000a-x-2", EventIdError::Number),
            (long.as_str(), EventIdError::TooLong),
        ];
        for (input, want) in cases {
            assert_eq!(
                input.parse::<EventId>().as_ref(),
                Err(want),
                "input {input:?}"
            );
        }
    }
}
