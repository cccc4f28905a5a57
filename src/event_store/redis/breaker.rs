//! The breaker every caller of Redis goes through: after a failure, Redis is not tried
//! again for a while, so an outage costs callers nothing instead of a timeout each.

use std::sync::Arc;
use std::time::Duration;

use crate::telemetry::metrics;

/// Shared by everything that talks to Redis: after a failed command, Redis is not tried
/// again for `retry_interval`, so an outage costs each caller nothing instead of a timeout
/// (which would stall the actor making the call, and everyone queued behind it).
#[derive(Debug, Clone)]
pub struct Breaker {
    epoch: std::time::Instant,
    /// `store.command_timeout`: no call through the breaker waits longer, not even for a
    /// connection being re-established.
    timeout: Duration,
    /// Milliseconds since `epoch` until which Redis is not tried (0: closed).
    open_until: Arc<std::sync::atomic::AtomicU64>,
    retry: Duration,
}

impl Breaker {
    /// A closed breaker that stays open `retry` after each failure and fails calls that
    /// take longer than `timeout`.
    pub fn new(retry: Duration, timeout: Duration) -> Self {
        Self {
            epoch: std::time::Instant::now(),
            timeout,
            open_until: Arc::default(),
            retry,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether Redis may be tried now.
    pub fn allows(&self) -> bool {
        self.now_ms() >= self.open_until.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records a failure; returns true if it starts an outage (worth a warning).
    pub fn trip(&self) -> bool {
        let until = self.now_ms() + u64::try_from(self.retry.as_millis()).unwrap_or(u64::MAX);
        let before = self
            .open_until
            .swap(until, std::sync::atomic::Ordering::Relaxed);
        before == 0
    }

    /// Records a success; returns true if it ends an outage.
    pub fn reset(&self) -> bool {
        self.open_until.load(std::sync::atomic::Ordering::Relaxed) != 0
            && self
                .open_until
                .swap(0, std::sync::atomic::Ordering::Relaxed)
                != 0
    }

    /// Runs a Redis call unless the breaker is open; trips it on failure.
    pub async fn guard<T>(
        &self,
        what: &'static str,
        call: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> redis::RedisResult<T> {
        if !self.allows() {
            return Err(redis::RedisError::from((
                redis::ErrorKind::Io,
                "redis is unavailable (retrying shortly)",
            )));
        }
        let started = std::time::Instant::now();
        let outcome = match tokio::time::timeout(self.timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(timeout_error()),
        };
        crate::telemetry::redis_roundtrip(started.elapsed());
        match outcome {
            Ok(v) => {
                if self.reset() {
                    metrics::REDIS_RECONNECTS.inc();
                    tracing::info!(what, "redis is reachable again");
                }
                Ok(v)
            }
            Err(e) => {
                if self.trip() {
                    tracing::warn!(what, error = %e, retry_in = ?self.retry,
                        "redis failed; events are delivered live without being stored until it is back");
                }
                Err(e)
            }
        }
    }
}

/// The error a call that outlived its timeout gets.
pub(super) fn timeout_error() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "connection timed out",
    ))
}
