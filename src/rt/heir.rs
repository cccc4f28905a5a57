//! Data lent by a supervisor to a child so that it survives the child's crash: the Rust
//! counterpart of an ETS table whose heir is the supervisor.
//!
//! The child owns the data outright while it runs (no lock, no sharing); when the child's
//! state is dropped — on a clean stop or while unwinding from a panic — the data is sent
//! back to the supervisor, which lends it to the next incarnation. A panic in the middle of
//! a message can leave that one message's change half-applied; everything before it is kept.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use tokio::sync::oneshot;

/// The child's side: derefs to the data and returns it to the heir on drop.
#[derive(Debug)]
pub struct Lent<T: Default> {
    value: T,
    heir: Option<oneshot::Sender<T>>,
}

/// The supervisor's side: receives the data back when the child lets go of it.
#[derive(Debug)]
pub struct Heir<T> {
    rx: oneshot::Receiver<T>,
}

/// Lends `value` to a child; keep the [`Heir`] to get it back.
pub fn lend<T: Default>(value: T) -> (Lent<T>, Heir<T>) {
    let (tx, rx) = oneshot::channel();
    (
        Lent {
            value,
            heir: Some(tx),
        },
        Heir { rx },
    )
}

impl<T> Heir<T> {
    /// Waits up to `timeout` for the data to come back. `None` means it was lost (the
    /// child's state was leaked or is still held): the caller starts afresh and says so.
    pub async fn reclaim(self, timeout: Duration) -> Option<T> {
        tokio::time::timeout(timeout, self.rx).await.ok()?.ok()
    }
}

impl<T: Default> Deref for Lent<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: Default> DerefMut for Lent<T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

impl<T: Default> Drop for Lent<T> {
    fn drop(&mut self) {
        if let Some(heir) = self.heir.take() {
            // If the supervisor is gone too there is nobody to inherit; dropping is right.
            let _ = heir.send(std::mem::take(&mut self.value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn data_returns_to_the_heir_when_the_borrower_panics() {
        let (mut lent, heir) = lend(vec![1, 2]);
        let task = tokio::spawn(async move {
            lent.push(3);
            panic!("injected");
        });
        assert!(task.await.is_err());
        assert_eq!(
            heir.reclaim(Duration::from_secs(1)).await,
            Some(vec![1, 2, 3])
        );
    }
}
