//! Logging: the levels, the per-session threshold, `logging/setLevel` and
//! `notifications/message`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::notifications;
use crate::protocol::Notification;

/// Log severity (RFC 5424 levels), ordered from least to most severe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LoggingLevel {
    /// Debug.
    Debug,
    /// Info.
    Info,
    /// Notice.
    Notice,
    /// Warning.
    Warning,
    /// Error.
    Error,
    /// Critical.
    Critical,
    /// Alert.
    Alert,
    /// Emergency.
    Emergency,
}

impl LoggingLevel {
    /// Every level, least severe first.
    pub const ALL: [Self; 8] = [
        Self::Debug,
        Self::Info,
        Self::Notice,
        Self::Warning,
        Self::Error,
        Self::Critical,
        Self::Alert,
        Self::Emergency,
    ];
}

/// The least severe log level a session's client wants: shared by the session (which
/// `logging/setLevel` changes) and its running requests (which read it at every log
/// call), so a change applies to requests already running. An atomic, not a lock.
#[derive(Debug, Default)]
pub struct LogThreshold(std::sync::atomic::AtomicU8);

impl LogThreshold {
    /// The level set, or `None` (everything) before the first `logging/setLevel`.
    pub fn get(&self) -> Option<LoggingLevel> {
        let n = self.0.load(std::sync::atomic::Ordering::Relaxed) as usize;
        n.checked_sub(1)
            .and_then(|i| LoggingLevel::ALL.get(i).copied())
    }

    /// Sets the level.
    pub fn set(&self, level: LoggingLevel) {
        let n = LoggingLevel::ALL
            .iter()
            .position(|l| *l == level)
            .unwrap_or(0)
            + 1;
        self.0.store(n as u8, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `logging/setLevel` params.
#[derive(Debug, Clone, Deserialize)]
pub struct SetLevelParams {
    /// The least severe level the client wants to receive.
    pub level: LoggingLevel,
}

/// Builds `notifications/message`.
pub(crate) fn log_notification(
    level: LoggingLevel,
    logger: Option<&str>,
    data: Value,
) -> Notification {
    let mut params = Map::new();
    params.insert(
        "level".into(),
        serde_json::to_value(level).unwrap_or(Value::Null),
    );
    if let Some(logger) = logger {
        params.insert("logger".into(), Value::String(logger.to_owned()));
    }
    params.insert("data".into(), data);
    Notification {
        method: notifications::MESSAGE.into(),
        params: Some(Value::Object(params)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_threshold_starts_unset_and_holds_every_level() {
        let threshold = LogThreshold::default();
        assert_eq!(threshold.get(), None);
        for level in LoggingLevel::ALL {
            threshold.set(level);
            assert_eq!(threshold.get(), Some(level));
        }
    }
}
