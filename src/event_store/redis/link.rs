//! The connections to Redis that the store, the session directory and the leases share:
//! one for commands and scripts, one for pub/sub, this replica's number, and the breaker
//! that makes an outage cost callers nothing.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::keys::Keys;
use crate::config::StoreConfig;
use crate::telemetry::metrics;

/// Why Redis could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL, or the connection.
    #[error("redis at {url}: {source}")]
    Redis {
        /// `store.redis_url` without credentials.
        url: String,
        /// What failed.
        source: redis::RedisError,
    },
}

/// The connections to Redis and who we are among the replicas.
#[derive(Clone)]
pub struct RedisLink {
    /// Commands and scripts (never blocking ones).
    pub commands: ConnectionManager,
    /// Pub/sub only; resubscribes by itself after a reconnect.
    pub pubsub: ConnectionManager,
    /// Key names.
    pub keys: Arc<Keys>,
    /// This replica's number, unique among all replicas that ever used this Redis.
    pub replica: u64,
    /// Events delivered live but not stored because Redis was unavailable.
    pub unstored: Arc<std::sync::atomic::AtomicU64>,
    /// Open after a failure: callers skip Redis for `retry_interval` instead of waiting.
    pub breaker: Breaker,
}

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

impl RedisLink {
    /// Publishes `body` on pub/sub `channel`, through the breaker (`what` names the
    /// caller in its warnings).
    pub async fn publish(
        &self,
        what: &'static str,
        channel: String,
        body: impl redis::ToRedisArgs + Send + Sync,
    ) -> redis::RedisResult<()> {
        let mut conn = self.commands.clone();
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(channel).arg(body);
        let call = cmd.query_async::<()>(&mut conn);
        self.breaker.guard(what, call).await
    }
}

impl std::fmt::Debug for RedisLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisLink")
            .field("replica", &self.replica)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// The URL without a password, for messages.
fn redacted(url: &str) -> String {
    match url.split_once('@') {
        Some((scheme_user, host)) => {
            let scheme = scheme_user.split("//").next().unwrap_or("redis:");
            format!("{scheme}//***@{host}")
        }
        None => url.to_owned(),
    }
}

fn manager_config(config: &StoreConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout))
        .set_response_timeout(Some(config.command_timeout))
        .set_number_of_retries(2)
        .set_max_delay(config.retry_interval.max(Duration::from_millis(100)))
}

/// Connects both connections, takes a replica number and subscribes to this replica's
/// channels. `on_push`, given this replica's number and the key names, makes the function
/// that receives every pub/sub message (the cluster's router); it runs on redis-rs's
/// connection task, so it must not block.
pub async fn connect<P>(
    config: &StoreConfig,
    on_push: impl FnOnce(u64, Arc<Keys>) -> P,
) -> Result<RedisLink, ConnectError>
where
    P: Fn(redis::PushInfo) + Send + Sync + 'static,
{
    let url = redacted(&config.redis_url);
    let err = |source| ConnectError::Redis {
        url: url.clone(),
        source,
    };
    let mut info =
        redis::IntoConnectionInfo::into_connection_info(config.redis_url.as_str()).map_err(err)?;
    // Pub/sub messages arrive as RESP3 pushes on a connection that can still be used, and
    // that redis-rs reconnects and resubscribes by itself.
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    info = info.set_redis_settings(settings);
    let client = redis::Client::open(info).map_err(err)?;
    let keys = Arc::new(Keys::new(&config.key_prefix));
    let mut commands = tokio::time::timeout(
        config.connect_timeout,
        ConnectionManager::new_with_config(client.clone(), manager_config(config)),
    )
    .await
    .map_err(|_| err(timeout_error()))?
    .map_err(err)?;
    // A number no live replica holds: live ones keep the counter above theirs, but if
    // Redis lost its data they may not have done so yet.
    let mut replica: u64 = 0;
    for _ in 0..64 {
        replica = redis::cmd("INCR")
            .arg(keys.replica_counter())
            .query_async(&mut commands)
            .await
            .map_err(err)?;
        let taken: Option<f64> = redis::cmd("ZSCORE")
            .arg(keys.replicas())
            .arg(replica)
            .query_async(&mut commands)
            .await
            .map_err(err)?;
        if taken.is_none() {
            break;
        }
    }
    let route = on_push(replica, keys.clone());
    let push = move |info: redis::PushInfo| {
        route(info);
        Ok::<(), std::convert::Infallible>(())
    };
    let mut pubsub = tokio::time::timeout(
        config.connect_timeout,
        ConnectionManager::new_with_config(
            client,
            manager_config(config)
                .set_push_sender(push)
                .set_automatic_resubscription(),
        ),
    )
    .await
    .map_err(|_| err(timeout_error()))?
    .map_err(err)?;
    pubsub
        .subscribe(&[
            keys.replica_channel(replica),
            keys.broadcast_channel(),
            keys.news_channel(),
            keys.task_channel(replica),
        ])
        .await
        .map_err(err)?;
    tracing::info!(replica, redis = %url, "joined the replicas sharing this Redis");
    Ok(RedisLink {
        commands,
        pubsub,
        keys,
        replica,
        unstored: Arc::default(),
        breaker: Breaker::new(config.retry_interval, config.command_timeout),
    })
}

fn timeout_error() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "connection timed out",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redacted("redis://:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1"), "redis://127.0.0.1");
    }
}
