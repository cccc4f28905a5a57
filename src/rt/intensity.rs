//! OTP restart intensity: at most `max_restarts` restarts within any `max_window`.
//! Pure and clock-agnostic, so it is tested without waiting.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Remembers recent restarts and says whether one more stays within the limit.
#[derive(Debug)]
pub struct Intensity {
    max_restarts: u32,
    window: Duration,
    recent: VecDeque<Instant>,
}

impl Intensity {
    /// Allows `max_restarts` restarts in any `window`.
    pub fn new(max_restarts: u32, window: Duration) -> Self {
        Self {
            max_restarts,
            window,
            recent: VecDeque::new(),
        }
    }

    /// Records a restart at `now`. Returns false when it exceeds the intensity: the
    /// supervisor must then give up and escalate instead of restarting.
    pub fn record(&mut self, now: Instant) -> bool {
        while let Some(&first) = self.recent.front() {
            if now.saturating_duration_since(first) > self.window {
                self.recent.pop_front();
            } else {
                break;
            }
        }
        self.recent.push_back(now);
        self.recent.len() <= self.max_restarts as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_max_restarts_within_the_window_then_refuses() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut i = Intensity::new(3, ms(1000));
        assert!(i.record(t0));
        assert!(i.record(t0 + ms(10)));
        assert!(i.record(t0 + ms(20)));
        assert!(!i.record(t0 + ms(30)), "the fourth restart in 1s escalates");
    }

    #[test]
    fn restarts_older_than_the_window_are_forgotten() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut i = Intensity::new(2, ms(100));
        assert!(i.record(t0));
        assert!(i.record(t0 + ms(50)));
        assert!(i.record(t0 + ms(120)), "t0 fell out of the window");
        assert!(
            !i.record(t0 + ms(130)),
            "t0+50 and t0+120 are still inside it"
        );
    }

    #[test]
    fn zero_restarts_escalates_at_once() {
        let mut i = Intensity::new(0, Duration::from_secs(1));
        assert!(!i.record(Instant::now()));
    }
}
