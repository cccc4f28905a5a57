//! A background task that lives as long as its owner: dropping the owner aborts it. For
//! the plain tokio tasks beside the supervision tree (the lease keeper, the news relay,
//! the admin listener), which no supervisor restarts and nothing else stops.

use std::future::Future;

/// Owns a spawned task; aborts it when dropped.
#[derive(Debug)]
pub struct OwnedTask(tokio::task::JoinHandle<()>);

impl OwnedTask {
    /// Spawns `work`, owned by the value returned.
    pub fn spawn(work: impl Future<Output = ()> + Send + 'static) -> Self {
        Self(tokio::spawn(work))
    }
}

impl Drop for OwnedTask {
    fn drop(&mut self) {
        self.0.abort();
    }
}
