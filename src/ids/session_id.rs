//! Session identifiers.

use std::fmt;
use std::str::FromStr;

/// A session id: 128 bits from the operating system's CSPRNG, written as 32 lowercase hex
/// characters (visible ASCII only, as the MCP spec requires for `Mcp-Session-Id`).
///
/// Kept as a `u128` so the session table hashes and copies it for free; it becomes a
/// string only at the HTTP edge.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId(u128);

impl SessionId {
    /// A fresh random id (UUID v4 randomness: 122 random bits from `getrandom`).
    pub fn random() -> Self {
        Self(uuid::Uuid::new_v4().as_u128())
    }

    /// The session whose 128 bits are `bits` (a task's log lives in the namespace its
    /// id spells).
    pub(super) fn from_bits(bits: u128) -> Self {
        Self(bits)
    }

    /// The 32-bit tag that event ids of this session carry, so an event id from another
    /// session is recognised as foreign instead of being resolved against this one.
    pub fn tag(self) -> u32 {
        self.0 as u32
    }

    /// Which of `shards` shards owns this session (and its streams): the id's low bits
    /// are random, so sessions spread evenly. `shards` of 0 counts as 1.
    pub fn shard(self, shards: usize) -> usize {
        (self.0 as u64 % shards.max(1) as u64) as usize
    }
}

impl SessionId {
    /// The id's 32 hex characters, without the formatting machinery (session ids are
    /// written on every request's span and every shared key).
    pub fn to_hex(self) -> [u8; 32] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for (i, digit) in out.iter_mut().enumerate() {
            *digit = HEX[((self.0 >> ((31 - i) * 4)) & 0xf) as usize];
        }
        out
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex = self.to_hex();
        // Hex digits are ASCII.
        f.write_str(std::str::from_utf8(&hex).unwrap_or_default())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({self})")
    }
}

/// Why a string is not a [`SessionId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// Not exactly 32 characters.
    #[error("session id must be 32 hex characters, got {0}")]
    Length(usize),
    /// A character outside `0-9a-f`.
    #[error("session id must be lowercase hex")]
    NotHex,
}

impl FromStr for SessionId {
    type Err = SessionIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() != 32 {
            return Err(SessionIdError::Length(s.len()));
        }
        // from_str_radix accepts a leading '+' and uppercase; the wire form is exact.
        if !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(SessionIdError::NotHex);
        }
        u128::from_str_radix(s, 16)
            .map(SessionId)
            .map_err(|_| SessionIdError::NotHex)
    }
}

/// On the wire (between replicas) as its text form.
impl serde::Serialize for SessionId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip() {
        let id = SessionId::random();
        let text = id.to_string();
        assert_eq!(text, format!("{:032x}", id.0));
        assert_eq!(SessionId(1).to_string(), format!("{:032x}", 1));
        assert_eq!(text.len(), 32);
        assert!(text.bytes().all(|b| b.is_ascii_graphic()));
        assert_eq!(text.parse::<SessionId>(), Ok(id));
    }

    #[test]
    fn random_ids_differ() {
        assert_ne!(SessionId::random(), SessionId::random());
    }

    #[test]
    fn rejects_malformed_ids() {
        let cases = [
            ("", SessionIdError::Length(0)),
            ("abc", SessionIdError::Length(3)),
            ("0123456789ABCDEF0123456789abcdef", SessionIdError::NotHex),
            ("+123456789abcdef0123456789abcdef", SessionIdError::NotHex),
            ("0123456789abcdef0123456789abcdeg", SessionIdError::NotHex),
        ];
        for (input, want) in cases {
            assert_eq!(input.parse::<SessionId>(), Err(want), "input {input:?}");
        }
    }
}
