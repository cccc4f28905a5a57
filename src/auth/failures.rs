//! `auth.max_failures_per_client`: requests refused with 401 counted per client address
//! over a fixed one-minute window, so one address trying token after token is stopped
//! (429) before each try costs a signature check or an introspection.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an address's failures count.
const WINDOW: Duration = Duration::from_secs(60);

/// Failures per client address, in a bounded map.
#[derive(Debug)]
pub(crate) struct Failures {
    max: u32,
    capacity: usize,
    /// A lock held for one map update per refused request (and one lookup per request):
    /// an actor would add a message round trip to every request for the same count.
    counts: Mutex<HashMap<IpAddr, Window>>,
    /// When a full map was last swept of ended windows: at most once per [`SWEEP_EVERY`],
    /// so a flood from new addresses costs no scan per request.
    swept: Mutex<Option<Instant>>,
}

/// How often a full map may be scanned for ended windows.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// One address's current minute.
#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    failures: u32,
}

impl Failures {
    /// At most `max` failures a minute per address (0: no limit), at most `capacity`
    /// addresses tracked.
    pub(crate) fn new(max: u32, capacity: usize) -> Self {
        Self {
            max,
            capacity,
            counts: Mutex::default(),
            swept: Mutex::default(),
        }
    }

    /// When `client` has used up its failures this minute: the seconds until the minute
    /// ends.
    pub(crate) fn blocked(&self, client: Option<IpAddr>) -> Option<u64> {
        let client = self.key(client)?;
        let counts = self.lock();
        let window = counts.get(&client)?;
        let elapsed = window.started.elapsed();
        (elapsed < WINDOW && window.failures >= self.max)
            .then(|| (WINDOW - elapsed).as_secs().max(1))
    }

    /// Counts one failure of `client`.
    pub(crate) fn record(&self, client: Option<IpAddr>) {
        let Some(client) = self.key(client) else {
            return;
        };
        let mut counts = self.lock();
        let now = Instant::now();
        if !counts.contains_key(&client) && counts.len() >= self.capacity {
            let mut swept = self.swept.lock().unwrap_or_else(|p| p.into_inner());
            if swept.is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY) {
                *swept = Some(now);
                counts.retain(|_, w| now.duration_since(w.started) < WINDOW);
            }
            // Still full of live windows: this address is not counted, and none counted
            // is forgotten (so a flood of new addresses cannot wipe a blocked one). The
            // cap is what keeps the map's memory bounded.
            if counts.len() >= self.capacity {
                return;
            }
        }
        let window = counts.entry(client).or_insert(Window {
            started: now,
            failures: 0,
        });
        if now.duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
    }

    /// What an address is counted under: itself, an IPv4-mapped IPv6 address as its IPv4
    /// address, other IPv6 addresses by their /64 (one host usually holds a whole /64,
    /// and would otherwise get a fresh count with every address of it). `None` when off.
    fn key(&self, client: Option<IpAddr>) -> Option<IpAddr> {
        if self.max == 0 {
            return None;
        }
        Some(match client?.to_canonical() {
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & !u128::from(u64::MAX);
                IpAddr::V6(Ipv6Addr::from(bits))
            }
            v4 => v4,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Window>> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_is_blocked_past_its_failures_and_ipv6_counts_by_64() {
        let failures = Failures::new(2, 10);
        let a: IpAddr = "2001:db8::1".parse().unwrap_or(IpAddr::V4([0; 4].into()));
        let b: IpAddr = "2001:db8::2".parse().unwrap_or(IpAddr::V4([0; 4].into()));
        failures.record(Some(a));
        assert_eq!(failures.blocked(Some(b)), None);
        failures.record(Some(b));
        assert!(
            failures
                .blocked(Some(a))
                .is_some_and(|s| (1..=60).contains(&s))
        );
        assert_eq!(
            failures.blocked(Some("10.0.0.1".parse().unwrap_or(a))),
            None
        );
        assert_eq!(failures.blocked(None), None);
    }

    #[test]
    fn the_map_stays_within_its_capacity_and_zero_is_off() {
        let failures = Failures::new(1, 3);
        for n in 0..10_u8 {
            failures.record(Some(IpAddr::V4([10, 0, 0, n].into())));
        }
        assert!(failures.lock().len() <= 3);
        // Review of issue 22: a full map keeps the addresses it counts (a flood of new
        // ones evicted them, unblocking an attacker) and scans at most once a second.
        assert!(
            failures
                .blocked(Some(IpAddr::V4([10, 0, 0, 0].into())))
                .is_some()
        );
        let off = Failures::new(0, 3);
        off.record(Some(IpAddr::V4([10, 0, 0, 1].into())));
        assert_eq!(off.blocked(Some(IpAddr::V4([10, 0, 0, 1].into()))), None);
    }
}
