//! [`SessionHold`]: one open request or stream of a session. The session counts its holds
//! and is never expired while any is alive.
//!
//! A hold is counted by reference, not by message: the record keeps a counter that every
//! hold shares, the number of holds is its reference count, and dropping a hold stamps the
//! time on it. So releasing costs no message and no task, cannot be lost to a crash of the
//! session manager (the counter lives in the table the supervisor lends), and a session's
//! idle time still runs from the end of its last request. The session manager reads the
//! counter when it touches or sweeps the session; nothing else does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The per-session counter every hold of the session shares.
#[derive(Debug, Default)]
pub struct HoldCounter {
    /// When the latest hold ended, in milliseconds since [`epoch`] (0: never).
    released_ms: AtomicU64,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl HoldCounter {
    /// Holds alive now: every one keeps a reference (the record keeps the first).
    pub fn open(self: &Arc<Self>) -> u32 {
        u32::try_from(Arc::strong_count(self).saturating_sub(1)).unwrap_or(u32::MAX)
    }

    /// When the latest hold ended, if one has.
    pub fn released_at(&self) -> Option<Instant> {
        match self.released_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(epoch() + Duration::from_millis(ms)),
        }
    }

    /// A new hold on this counter.
    pub(super) fn hold(self: &Arc<Self>) -> SessionHold {
        SessionHold(Arc::new(HoldEntry {
            counter: self.clone(),
        }))
    }
}

/// What a hold keeps alive; the session's table keeps a weak reference to it for a running
/// request, so a finished request is recognised without being told.
#[derive(Debug)]
pub struct HoldEntry {
    counter: Arc<HoldCounter>,
}

impl Drop for HoldEntry {
    fn drop(&mut self) {
        let ms = u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX);
        // Never 0, which means "never released".
        self.counter.released_ms.store(ms.max(1), Ordering::Relaxed);
    }
}

/// An open request or stream of a session: keeps the session from expiring until dropped.
#[derive(Debug)]
pub struct SessionHold(Arc<HoldEntry>);

impl SessionHold {
    /// A reference that tells whether this hold is still alive.
    pub(super) fn watch(&self) -> Weak<HoldEntry> {
        Arc::downgrade(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_count_themselves_and_stamp_their_end() {
        let counter = Arc::new(HoldCounter::default());
        assert_eq!(counter.open(), 0);
        assert!(counter.released_at().is_none());
        let a = counter.hold();
        let b = counter.hold();
        let watched = a.watch();
        assert_eq!(counter.open(), 2);
        let before = Instant::now();
        drop(a);
        assert_eq!(counter.open(), 1);
        assert!(
            watched.upgrade().is_none(),
            "a dropped hold is seen as ended"
        );
        let released = counter.released_at().unwrap_or(epoch());
        assert!(released + Duration::from_millis(1) >= before);
        drop(b);
        assert_eq!(counter.open(), 0);
    }
}
