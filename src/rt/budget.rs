//! A byte budget shared along a chain of producers (a connection's
//! `sse.stream_buffer_bytes` for a stream that is not a stream actor's: `tasks/stream`). Each piece of data takes
//! its weight from the budget before it is queued and gives it back when the HTTP body
//! hands it to hyper, however many queues it crossed meanwhile; so a connection holds at
//! most the budget, whatever the size of its events.
//!
//! As in the stream actor's pipe (`stream::pipe`), one piece larger than the budget still
//! goes, alone: it takes the whole budget, so it waits until everything before it left.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The budget of one connection; clones share it.
#[derive(Debug, Clone)]
pub struct ByteBudget {
    room: Arc<Semaphore>,
    limit: u32,
}

/// Bytes taken from a [`ByteBudget`]: given back when dropped.
#[derive(Debug)]
pub struct Reserved {
    // Held for its drop only.
    _permit: Option<OwnedSemaphorePermit>,
}

impl ByteBudget {
    /// A budget of `bytes` (at least 1; at most `u32::MAX`, far beyond any sane setting).
    pub fn new(bytes: usize) -> Self {
        let limit = u32::try_from(bytes).unwrap_or(u32::MAX).max(1);
        Self {
            room: Arc::new(Semaphore::new(limit as usize)),
            limit,
        }
    }

    /// Waits until `len` bytes fit (the whole budget for a piece larger than it), and
    /// takes them.
    pub async fn reserve(&self, len: usize) -> Reserved {
        let weight = self.weight(len);
        match self.room.clone().acquire_many_owned(weight).await {
            Ok(permit) => Reserved {
                _permit: Some(permit),
            },
            // Only a closed semaphore refuses, and this one is never closed.
            Err(_) => Reserved { _permit: None },
        }
    }

    /// Takes `len` bytes if they fit now.
    pub fn try_reserve(&self, len: usize) -> Option<Reserved> {
        self.room
            .clone()
            .try_acquire_many_owned(self.weight(len))
            .ok()
            .map(|permit| Reserved {
                _permit: Some(permit),
            })
    }

    /// The budget's size in bytes.
    pub fn limit(&self) -> usize {
        self.limit as usize
    }

    /// Bytes taken and not given back yet.
    pub fn queued(&self) -> usize {
        (self.limit as usize).saturating_sub(self.room.available_permits())
    }

    fn weight(&self, len: usize) -> u32 {
        u32::try_from(len).unwrap_or(u32::MAX).clamp(1, self.limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn pieces_wait_for_room_and_a_large_one_goes_alone() {
        let budget = ByteBudget::new(100);
        let a = budget.reserve(60).await;
        assert!(budget.try_reserve(60).is_none(), "60 + 60 > 100");
        let b = budget.try_reserve(40);
        assert!(b.is_some());
        assert_eq!(budget.queued(), 100);
        drop((a, b));
        assert_eq!(budget.queued(), 0);
        let large = budget.reserve(5_000).await;
        assert_eq!(budget.queued(), 100, "the whole budget, not more");
        assert!(budget.try_reserve(1).is_none(), "alone");
        drop(large);
        assert!(budget.try_reserve(1).is_some());
    }

    #[tokio::test]
    async fn a_waiting_piece_goes_once_room_is_given_back() {
        let budget = ByteBudget::new(10);
        let held = budget.reserve(10).await;
        let waiter = tokio::spawn({
            let budget = budget.clone();
            async move { budget.reserve(5).await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        let got = tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await;
        assert!(matches!(got, Ok(Ok(_))));
    }
}
