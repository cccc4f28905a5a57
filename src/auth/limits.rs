//! `auth.max_requests_per_principal`: each principal's running requests counted, so one
//! principal cannot hold every worker.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Owner;

/// Requests running per principal.
#[derive(Debug)]
pub(crate) struct PrincipalRequests {
    max: usize,
    /// A lock held for a counter update, twice per request, and only when the cap is set:
    /// an actor would cost a message round trip on every request for the same count.
    running: Arc<Mutex<HashMap<Owner, usize>>>,
}

/// A principal already runs as many requests as it may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the principal runs as many requests as it may")]
pub(crate) struct Busy;

impl PrincipalRequests {
    /// At most `max` requests running per principal (0: no limit).
    pub(crate) fn new(max: usize) -> Self {
        Self {
            max,
            running: Arc::default(),
        }
    }

    /// Counts a request of `owner` in until the returned slot drops (`None`: no limit);
    /// [`Busy`] past the cap.
    pub(crate) fn start(&self, owner: Owner) -> Result<Option<RequestSlot>, Busy> {
        if self.max == 0 {
            return Ok(None);
        }
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        let count = running.entry(owner).or_default();
        if *count >= self.max {
            return Err(Busy);
        }
        *count += 1;
        Ok(Some(RequestSlot {
            owner,
            running: self.running.clone(),
        }))
    }
}

/// One running request of a principal, counted until dropped.
#[derive(Debug)]
pub(crate) struct RequestSlot {
    owner: Owner,
    running: Arc<Mutex<HashMap<Owner, usize>>>,
}

impl Drop for RequestSlot {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = running.get_mut(&self.owner) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                running.remove(&self.owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_is_busy_at_its_cap_until_a_slot_drops() {
        let requests = PrincipalRequests::new(2);
        let owner = Owner::of("https://issuer", "alice");
        let other = Owner::of("https://issuer", "bob");
        let first = requests.start(owner);
        let second = requests.start(owner);
        assert!(matches!((&first, &second), (Ok(Some(_)), Ok(Some(_)))));
        assert_eq!(requests.start(owner).err(), Some(Busy));
        assert!(matches!(requests.start(other), Ok(Some(_))));
        drop(first);
        assert!(matches!(requests.start(owner), Ok(Some(_))));
        drop(second);
        assert!(
            requests
                .running
                .lock()
                .map(|r| r.is_empty())
                .unwrap_or(false)
        );
    }

    #[test]
    fn zero_is_no_limit() {
        let requests = PrincipalRequests::new(0);
        let owner = Owner::of("https://issuer", "alice");
        assert!(matches!(requests.start(owner), Ok(None)));
    }
}
