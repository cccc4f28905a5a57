//! A count of running work that a drain waits for: each piece holds a [`RunningRequest`]
//! until it ends, and [`Running::finished`] resolves once none is left.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

/// The requests running now; a drain waits for the count to reach zero.
#[derive(Debug, Default)]
pub struct Running {
    count: AtomicUsize,
    idle: Notify,
}

/// One running request, counted until dropped.
#[derive(Debug)]
pub struct RunningRequest(Arc<Running>);

impl Running {
    /// Counts one more request, until the returned guard is dropped.
    pub fn start(self: &Arc<Self>) -> RunningRequest {
        self.count.fetch_add(1, Ordering::SeqCst);
        RunningRequest(self.clone())
    }

    /// Resolves once nothing runs.
    pub async fn finished(&self) {
        loop {
            // Registered before the count is read, so a last drop in between still wakes us.
            let idle = self.idle.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            idle.await;
        }
    }
}

impl Drop for RunningRequest {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}
