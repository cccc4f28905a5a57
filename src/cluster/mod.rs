//! Redis shared by several otpmcp replicas: the connections, the key layout, this
//! replica's number, the pub/sub bus between replicas and the leases on running requests.
//!
//! Only used with `[store] backend = "redis"`; the in-memory server never touches it.
//!
//! # Key layout
//! Every key and channel starts with `key_prefix`. The keys of one session carry the
//! session id as a Redis Cluster hash tag (`otpmcp:{<session>}:...`), so they live in one
//! slot and each event-store script touches one node:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:{S}:session` | hash | the session: `open`, retained `bytes`, and its metadata |
//! | `P:{S}:streams` | hash | per stream `n`: `n:open`, `n:end`, `n:done`, `n:nonces` |
//! | `P:{S}:arrivals` | list | the session's retained events, oldest first |
//! | `P:{S}:subs` | set | the resources the session subscribed to |
//! | `P:{S}:s:<n>` | stream | the events of stream `n`, entry id `<position>-<ms stored>` |
//! | `P:{S}:c:<n>` | channel | each event of stream `n`, as it is stored |
//! | `P:bus:<r>`, `P:bus:all` | channel | messages to replica `r`, or to all |
//! | `P:replicas` | sorted set | live replicas, scored by lease expiry |
//! | `P:inflight:<r>` | hash | requests running on replica `r` |
//! | `P:subs:<uri>` | set | sessions subscribed to resource `uri` |

pub mod bus;
pub mod leases;

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::StoreConfig;
use crate::event_store::StreamKey;
use crate::session::SessionId;

pub use bus::Router;
pub use leases::Leases;

/// Why Redis could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The URL, or the connection.
    #[error("redis at {url}: {source}")]
    Redis {
        /// `store.redis_url` without credentials.
        url: String,
        /// What failed.
        source: redis::RedisError,
    },
}

/// Names of every Redis key and channel otpmcp uses.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    fn tagged(&self, session: SessionId, rest: &str) -> String {
        format!("{}:{{{session}}}:{rest}", self.prefix)
    }

    /// The session hash.
    pub fn session(&self, session: SessionId) -> String {
        self.tagged(session, "session")
    }

    /// The set of resources a session subscribed to.
    pub fn session_subscriptions(&self, session: SessionId) -> String {
        self.tagged(session, "subs")
    }

    /// The per-stream bookkeeping hash of a session.
    pub fn streams(&self, session: SessionId) -> String {
        self.tagged(session, "streams")
    }

    /// The list of a session's retained events, oldest first.
    pub fn arrivals(&self, session: SessionId) -> String {
        self.tagged(session, "arrivals")
    }

    /// The prefix of a session's event streams; stream `n` is this followed by `n`.
    pub fn events_prefix(&self, session: SessionId) -> String {
        self.tagged(session, "s:")
    }

    /// The channel carrying stream `key`'s events as they are stored.
    pub fn channel(&self, key: StreamKey) -> String {
        self.tagged(key.session, &format!("c:{}", key.stream))
    }

    /// The channel of replica `replica`.
    pub fn replica_channel(&self, replica: u64) -> String {
        format!("{}:bus:{replica}", self.prefix)
    }

    /// The channel every replica listens to.
    pub fn broadcast_channel(&self) -> String {
        format!("{}:bus:all", self.prefix)
    }

    /// The set of sessions subscribed to resource `uri` (`resources/subscribe`), so a
    /// resource update on any replica reaches them all, once each.
    pub fn subscribers(&self, uri: &str) -> String {
        format!("{}:subs:{uri}", self.prefix)
    }

    /// The counter that numbers replicas.
    pub fn replica_counter(&self) -> String {
        format!("{}:replica-seq", self.prefix)
    }

    /// The sorted set of live replicas, scored by the expiry of their lease.
    pub fn replicas(&self) -> String {
        format!("{}:replicas", self.prefix)
    }

    /// The requests running on replica `replica`.
    pub fn inflight(&self, replica: u64) -> String {
        format!("{}:inflight:{replica}", self.prefix)
    }

    /// Splits a channel name back into what it is about.
    pub fn parse_channel(&self, channel: &[u8]) -> Option<Channel> {
        let rest = channel
            .strip_prefix(self.prefix.as_bytes())?
            .strip_prefix(b":")?;
        let rest = std::str::from_utf8(rest).ok()?;
        if let Some(bus) = rest.strip_prefix("bus:") {
            return Some(if bus == "all" {
                Channel::Broadcast
            } else {
                Channel::Replica(bus.parse().ok()?)
            });
        }
        let (session, stream) = rest.strip_prefix('{')?.split_once("}:c:")?;
        Some(Channel::Stream(StreamKey::new(
            session.parse().ok()?,
            crate::event_store::StreamNo(stream.parse().ok()?),
        )))
    }
}

/// What a pub/sub channel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Events of one stream.
    Stream(StreamKey),
    /// Messages to one replica.
    Replica(u64),
    /// Messages to every replica.
    Broadcast,
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
        let outcome = match tokio::time::timeout(self.timeout, call).await {
            Ok(outcome) => outcome,
            Err(_) => Err(timeout_error()),
        };
        match outcome {
            Ok(v) => {
                if self.reset() {
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
/// channels. `router` receives every pub/sub message (see [`bus`]).
pub async fn connect(
    config: &StoreConfig,
    router: impl FnOnce(u64, Arc<Keys>) -> Router,
) -> Result<RedisLink, ClusterError> {
    let url = redacted(&config.redis_url);
    let err = |source| ClusterError::Redis {
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
    let router = router(replica, keys.clone());
    let push = move |info: redis::PushInfo| {
        router.route(info);
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
        .subscribe(&[keys.replica_channel(replica), keys.broadcast_channel()])
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
    fn channels_parse_back() {
        let keys = Keys::new("otpmcp");
        let key = StreamKey::new(SessionId::random(), crate::event_store::StreamNo(42));
        assert_eq!(
            keys.parse_channel(keys.channel(key).as_bytes()),
            Some(Channel::Stream(key))
        );
        assert_eq!(
            keys.parse_channel(keys.replica_channel(7).as_bytes()),
            Some(Channel::Replica(7))
        );
        assert_eq!(
            keys.parse_channel(keys.broadcast_channel().as_bytes()),
            Some(Channel::Broadcast)
        );
        assert_eq!(keys.parse_channel(b"other:bus:all"), None);
        assert_eq!(keys.parse_channel(b"otpmcp:{zz}:c:1"), None);
    }

    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            redacted("redis://:secret@10.0.0.1:6379/0"),
            "redis://***@10.0.0.1:6379/0"
        );
        assert_eq!(redacted("redis://127.0.0.1"), "redis://127.0.0.1");
    }
}
