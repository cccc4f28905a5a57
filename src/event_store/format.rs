//! Versions of what replicas share through Redis, so that replicas of two versions can
//! run side by side during a rolling upgrade or a rollback and read each other's writes.
//!
//! | version | release | what it added |
//! |---|---|---|
//! | 1 | 0.1.0 | everything before versions: no `v` in any record |
//! | 2 | 0.2.0 | `v` in every JSON record and bus message; a session hash's `format` field; each replica's format in `P:{P}:formats`; task records' `scopes`; handed-on callers without their token's claims (`expires_at`); the per-principal task sets |
//!
//! What carries the version:
//! - a JSON record or bus message (task records, in-flight entries that hand a call on,
//!   session news, news and task signals): `"v"` first, absent in format 1;
//! - a session's keys (its hash, streams, arrivals, events, subscriptions, channel): the
//!   session hash's `format` field, absent in format 1;
//! - every replica's own format, in `P:{P}:formats` (absent for a replica of format 1,
//!   which predates it); the replicas' leases, in-flight tables and claims follow it.
//!
//! Fixed text layouts that no version may change in place (a change takes a new name):
//! an in-flight entry that is a bare request id, the stop notice, and the frames on a
//! stream's channel.
//!
//! **The rule.** A replica reads every format from [`OLDEST_FORMAT`] to
//! [`CURRENT_FORMAT`], and writes [`WriteFormat::get`]: with `store.write_format = "auto"`
//! the oldest format a live replica reads, so a replica of the version before never meets
//! a record it cannot read. Format 2 only adds fields a format-1 reader ignores, so a
//! rollback from 2 to 1 reads everything 2 wrote; a later format that changes a field's
//! meaning is written only once no replica reads less (docs/deployment.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::config::WriteFormatSetting;
pub use crate::config::{CURRENT_FORMAT, OLDEST_FORMAT};

/// The format this replica writes, shared by every writer of a shared record. The lease
/// keeper learns it at each renewal; writers read it on every record they write, so it
/// is an atomic rather than a question to the keeper.
#[derive(Debug, Clone)]
pub struct WriteFormat {
    now: Arc<AtomicU8>,
    pinned: bool,
}

impl WriteFormat {
    /// As `store.write_format` says. `auto` starts at the oldest format until the first
    /// renewal has seen the live replicas (it runs before the listener starts).
    pub fn new(setting: WriteFormatSetting) -> Self {
        let (now, pinned) = match setting {
            WriteFormatSetting::Auto => (OLDEST_FORMAT, false),
            WriteFormatSetting::Pinned(v) => (v.clamp(OLDEST_FORMAT, CURRENT_FORMAT), true),
        };
        Self {
            now: Arc::new(AtomicU8::new(now)),
            pinned,
        }
    }

    /// Always the current format: a store nobody else reads (memory).
    pub fn current() -> Self {
        Self::new(WriteFormatSetting::Pinned(CURRENT_FORMAT))
    }

    /// The format to write now.
    pub fn get(&self) -> u8 {
        self.now.load(Ordering::Relaxed)
    }

    /// The oldest format a live replica reads is `oldest` (this one included): write it,
    /// unless pinned. Returns whether it changed.
    pub fn learn(&self, oldest: u8) -> bool {
        if self.pinned {
            return false;
        }
        let next = oldest.clamp(OLDEST_FORMAT, CURRENT_FORMAT);
        let before = self.now.swap(next, Ordering::Relaxed);
        if before != next {
            tracing::info!(
                from = before,
                to = next,
                "the shared formats' version this replica writes changed (store.write_format = \"auto\")"
            );
        }
        before != next
    }
}

/// A record stamped with its version, `v` first.
#[derive(Serialize)]
struct Stamped<'a, T: ?Sized> {
    v: u8,
    #[serde(flatten)]
    record: &'a T,
}

/// `record` as JSON in `format`: with `"v"` first from format 2, as format 1 wrote it
/// before.
pub fn to_vec<T: Serialize + ?Sized>(format: u8, record: &T) -> serde_json::Result<Vec<u8>> {
    match format {
        ..=1 => serde_json::to_vec(record),
        v => serde_json::to_vec(&Stamped { v, record }),
    }
}

/// [`to_vec`] as a string.
pub fn to_string<T: Serialize + ?Sized>(format: u8, record: &T) -> serde_json::Result<String> {
    // JSON is UTF-8: the conversion only checks it.
    to_vec(format, record).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// A record of any format this replica reads (every field a format added is optional to
/// its readers, and any format's `v` is ignored by them). A record of a newer format than
/// this replica knows is read as far as it can be, and said.
pub fn from_slice<T: DeserializeOwned>(what: &'static str, bytes: &[u8]) -> serde_json::Result<T> {
    let v = version(bytes);
    if v > CURRENT_FORMAT {
        tracing::warn!(
            record = what,
            format = v,
            reads = CURRENT_FORMAT,
            "a record of a newer format than this replica reads: is store.write_format pinned above a live replica's version?"
        );
    }
    serde_json::from_slice(bytes)
}

/// The version a record says it is: `{"v":N,` as [`to_vec`] writes it, else format 1.
pub fn version(bytes: &[u8]) -> u8 {
    let Some(rest) = bytes.strip_prefix(b"{\"v\":") else {
        return OLDEST_FORMAT;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits])
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(OLDEST_FORMAT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum News {
        Ended { session: String },
        Cancel { origin: u64 },
    }

    #[test]
    fn format_one_is_written_as_before_versions_and_two_with_v_first() {
        let news = News::Ended {
            session: "s".into(),
        };
        let one = to_vec(1, &news).unwrap_or_default();
        assert_eq!(one, br#"{"kind":"ended","session":"s"}"#);
        let two = to_vec(2, &news).unwrap_or_default();
        assert_eq!(two, br#"{"v":2,"kind":"ended","session":"s"}"#);
        assert_eq!((version(&one), version(&two)), (1, 2));
    }

    #[test]
    fn every_format_reads_and_a_reader_of_format_one_ignores_v() {
        let news = News::Cancel { origin: 3 };
        for format in OLDEST_FORMAT..=CURRENT_FORMAT + 1 {
            let bytes = to_vec(format, &news).unwrap_or_default();
            let read: News = from_slice("news", &bytes).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(read, news, "format {format}");
        }
        // A format-1 reader is plain serde: unknown fields are skipped.
        let plain: serde_json::Value = json!({"v": 2, "kind": "cancel", "origin": 3});
        let read: News = serde_json::from_value(plain).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read, news);
    }

    #[test]
    fn auto_follows_the_oldest_live_replica_and_a_pin_holds() {
        let auto = WriteFormat::new(WriteFormatSetting::Auto);
        assert_eq!(auto.get(), OLDEST_FORMAT, "until a renewal has looked");
        assert!(auto.learn(CURRENT_FORMAT));
        assert_eq!(auto.get(), CURRENT_FORMAT);
        assert!(auto.learn(1), "a replica of the version before joined");
        assert_eq!(auto.get(), 1);
        assert!(!auto.learn(1));
        let pinned = WriteFormat::new(WriteFormatSetting::Pinned(1));
        assert!(!pinned.learn(CURRENT_FORMAT));
        assert_eq!(pinned.get(), 1);
        assert_eq!(WriteFormat::current().get(), CURRENT_FORMAT);
    }
}
