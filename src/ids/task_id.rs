//! Task identifiers.

use std::fmt;
use std::str::FromStr;

use super::event_id::{StreamKey, StreamNo};
use super::session_id::SessionId;

/// The stream number of a task's log in its key's session namespace.
const LOG_STREAM: StreamNo = StreamNo(1);

/// A task id: 128 bits from the operating system's CSPRNG, written as 32 lowercase hex
/// characters (in `taskId`, in the store's record keys and in bus messages).
///
/// Kept as its text, since that is what every use writes (JSON, store keys, log fields)
/// and a client's id is compared as text; 32 bytes, so copies are free.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TaskId([u8; 32]);

impl TaskId {
    /// A fresh random id.
    pub fn random() -> Result<Self, getrandom::Error> {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        let mut text = [0u8; 32];
        for (i, byte) in bytes.iter().enumerate() {
            text[2 * i] = HEX[usize::from(byte >> 4)];
            text[2 * i + 1] = HEX[usize::from(byte & 0xf)];
        }
        Ok(Self(text))
    }

    /// The id as written on the wire.
    pub fn as_str(&self) -> &str {
        // Only lowercase hex digits get in (`random`, `from_str`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }

    /// The store stream holding this task's log: the id's bits as a session namespace,
    /// stream 1 (the key tasks have always used, so logs written before still resume).
    pub fn log_key(&self) -> StreamKey {
        let bits = self.0.iter().fold(0u128, |bits, &digit| {
            let value = match digit {
                b'0'..=b'9' => digit - b'0',
                _ => digit - b'a' + 10,
            };
            (bits << 4) | u128::from(value)
        });
        StreamKey::new(SessionId::from_bits(bits), LOG_STREAM)
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TaskId({self})")
    }
}

/// Why a string is not a [`TaskId`]: it names no task there can be, so it reads as the
/// answer to an unknown one ("Task not found: …", its first 64 characters), the same
/// error a client got before ids were parsed at the edge.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Task not found: {0}")]
pub struct TaskIdError(String);

impl TaskIdError {
    /// The text that was not an id (its first 64 characters).
    pub fn text(&self) -> &str {
        &self.0
    }
}

impl FromStr for TaskId {
    type Err = TaskIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let malformed = || TaskIdError(s.chars().take(64).collect());
        let text: [u8; 32] = s.as_bytes().try_into().map_err(|_| malformed())?;
        if !text.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(malformed());
        }
        Ok(Self(text))
    }
}

/// In JSON (records, bus messages) as its text form.
impl serde::Serialize for TaskId {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for TaskId {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn random_ids_are_32_hex_and_differ() {
        let (Ok(a), Ok(b)) = (TaskId::random(), TaskId::random()) else {
            panic!("no randomness")
        };
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 32);
        assert!(a.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(a.as_str().parse::<TaskId>(), Ok(a));
    }

    #[test]
    fn parses_and_writes_the_same_text() {
        let Ok(id) = ID.parse::<TaskId>() else {
            panic!("a task id")
        };
        assert_eq!(id.to_string(), ID);
        assert_eq!(serde_json::to_string(&id).ok(), Some(format!("\"{ID}\"")));
        let back: Result<TaskId, _> = serde_json::from_str(&format!("\"{ID}\""));
        assert_eq!(back.ok(), Some(id));
    }

    #[test]
    fn a_malformed_id_reads_as_an_unknown_task() {
        for input in ["", "not-a-task", &ID.to_uppercase(), &format!("{ID}0")] {
            let Err(e) = input.parse::<TaskId>() else {
                panic!("{input:?} parsed")
            };
            assert_eq!(e.to_string(), format!("Task not found: {input}"));
        }
        let long = "x".repeat(100);
        let Err(e) = long.parse::<TaskId>() else {
            panic!("parsed")
        };
        assert_eq!(e.text().len(), 64);
    }

    #[test]
    fn its_log_key_is_the_session_its_text_spells() {
        let Ok(id) = ID.parse::<TaskId>() else {
            panic!("a task id")
        };
        let Ok(session) = ID.parse::<SessionId>() else {
            panic!("a session id")
        };
        assert_eq!(id.log_key(), StreamKey::new(session, StreamNo(1)));
    }
}
