//! `[store]`: where events, sessions and request leases live.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::duration::NonZeroDuration;
use super::secret::SecretUrl;

/// Which event-store and session backend to use.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// in this process: nothing to run beside it, nothing shared.
    #[default]
    Memory,
    /// in Redis, shared: any replica serves any session and resumes any stream.
    Redis,
}

/// Where events, sessions and request leases live. With `memory` (the default) the Redis
/// keys are not used. With `redis`, every replica with the same `redis_url` and
/// `key_prefix` serves every session ([deployment.md](deployment.md)); a Redis that cannot
/// be reached at start-up exits 1.
///
/// Some limits stay per replica with Redis: `server.max_sessions` and
/// `server.max_open_per_session` count what one replica holds. The retention keys of
/// `[sse]` and `server.session_timeout` are applied by whichever replica stores or reads an
/// event, so give every replica the same values
/// ([deployment.md](deployment.md#what-is-shared-and-what-is-per-replica)).
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// Where events and sessions live.
    pub backend: BackendKind,
    /// Event-store shards, each an actor under the root supervisor owning the sessions,
    /// streams and tasks whose ids hash to it; the store-wide budgets stay exact across
    /// shards. 0: one per core the process may run on. At most 1024. With 1, one actor
    /// carries every event, near 300,000 a second at most.
    pub shards: usize,
    /// The Redis server: `redis://[user][:password@]host[:port][/db]`, `rediss://…` for
    /// TLS, or `unix:///path/redis.sock`. An ACL user is the URL's user; a password alone
    /// is the `default` user's. Over TLS the server's certificate must name the host and be
    /// signed by a root of `redis_ca_file`, or of the system when that is unset. Needs
    /// Redis 6 or newer (RESP3).
    pub redis_url: SecretUrl,
    /// `redis_url` and `redis_nodes` are nodes of a Redis Cluster: the cluster client finds
    /// the others and sends each command to the node serving its keys (a session's keys
    /// share a hash tag). Without it, a cluster answers `MOVED`.
    pub redis_cluster: bool,
    /// More seed nodes of the cluster besides `redis_url`; one that answers is enough.
    pub redis_nodes: Vec<SecretUrl>,
    /// Redis Sentinel URLs. When set, each connection goes to the primary they name for
    /// `redis_sentinel_service` (asked in order, the first that answers decides), and the
    /// heartbeat asks `ROLE`, so a connection to a demoted server is replaced by one to the
    /// new primary. `redis_url` then gives only the password, user and database. Not with
    /// `redis_cluster`.
    pub redis_sentinels: Vec<SecretUrl>,
    /// The name the sentinels monitor the primary under (`sentinel monitor <name> …`); used
    /// only with `redis_sentinels`, and must not be empty.
    pub redis_sentinel_service: String,
    /// For `rediss://` URLs: a PEM file of the CA certificates that sign the Redis servers'
    /// certificates; when set, only these are trusted. Empty: the system's roots
    /// (`/etc/ssl/certs`, or `SSL_CERT_FILE`). Unreadable, holding no certificate, or set
    /// while no URL is `rediss://`: exits 2.
    pub redis_ca_file: PathBuf,
    /// For `rediss://`: a PEM certificate (chain) presented to a Redis that asks for one
    /// (mutual TLS), with `redis_client_key`. Empty: none.
    pub redis_client_cert: PathBuf,
    /// The PEM private key of `redis_client_cert`; keep it readable by the server's user
    /// only. Empty: none.
    pub redis_client_key: PathBuf,
    /// Prefix of every Redis key and channel, so several deployments can share one Redis;
    /// non-empty, without braces or spaces. Replicas with different prefixes do not see
    /// each other.
    pub key_prefix: String,
    /// Longest wait for a connection to Redis, at start-up and at each reconnect.
    pub connect_timeout: NonZeroDuration,
    /// Longest wait for one Redis command or script; slower counts as a failure. A catch-up
    /// reads up to `sse.max_session_bytes` in one reply: keep it well above the time that
    /// takes.
    pub command_timeout: NonZeroDuration,
    /// After a failed Redis call, Redis is not tried again for this long (one breaker for
    /// the store, sessions, leases and pub/sub): calls fail at once, and events go live to
    /// this replica's connections without being stored. Also the longest back-off between
    /// reconnects.
    pub retry_interval: NonZeroDuration,
    /// Both connections to Redis are pinged this often; one that does not answer within
    /// `command_timeout` trips the breaker and is replaced. Without it, a connection
    /// dropped silently by a NAT or firewall is never noticed.
    pub ping_interval: NonZeroDuration,
    /// TCP keepalive on the connections to Redis: after this much silence the kernel
    /// probes, and closes a connection whose peer is gone.
    pub tcp_keepalive: NonZeroDuration,
    /// Each replica renews a lease every third of this and registers its running requests
    /// under it. When a replica's lease is older than this, another replica ends those
    /// requests' streams with an error (-32603), so a resuming client gets an answer.
    /// Shorter answers sooner, but a replica cut off from Redis for longer is treated as
    /// dead.
    pub lease_ttl: NonZeroDuration,
    /// At a planned shutdown, a running call of a tool declared re-runnable is run again
    /// from its start by the replica that claims its lease, on the same stream, after a
    /// warning notification. Off, or for other tools, the call ends with -32603 and
    /// `data.retryable = true`.
    pub hand_over_calls: bool,
    /// The version of the shared formats this replica writes to Redis (deployment.md,
    /// Upgrades and rollbacks). A number pins it: the previous version's during an
    /// upgrade keeps a rollback open once every replica runs the new one.
    pub write_format: WriteFormatSetting,
}

/// The first version of the shared formats (0.1.0's), which this build still reads.
pub const OLDEST_FORMAT: u8 = 1;
/// The version of the shared formats this build reads and writes by default.
pub const CURRENT_FORMAT: u8 = 2;

/// `store.write_format`: learned from the live replicas, or pinned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteFormatSetting {
    /// The oldest format any live replica reads.
    #[default]
    Auto,
    /// This version, whatever the others read.
    Pinned(u8),
}

impl schemars::JsonSchema for WriteFormatSetting {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "WriteFormatSetting".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "oneOf": [
                {"const": "auto", "description": "the oldest format a live replica reads, learned at each lease renewal"},
                {"type": "integer", "minimum": OLDEST_FORMAT, "maximum": CURRENT_FORMAT,
                 "description": "this version, whatever the others read"}
            ]
        })
    }
}

impl Serialize for WriteFormatSetting {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => s.serialize_str("auto"),
            Self::Pinned(v) => s.serialize_u8(*v),
        }
    }
}

impl<'de> Deserialize<'de> for WriteFormatSetting {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = WriteFormatSetting;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(
                    f,
                    "\"auto\" or a format version ({OLDEST_FORMAT} to {CURRENT_FORMAT})"
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                match v {
                    "auto" => Ok(WriteFormatSetting::Auto),
                    v => v
                        .parse()
                        .map_err(|_| E::invalid_value(serde::de::Unexpected::Str(v), &self))
                        .and_then(|n| self.visit_u64(n)),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                u8::try_from(v)
                    .ok()
                    .filter(|v| (OLDEST_FORMAT..=CURRENT_FORMAT).contains(v))
                    .map(WriteFormatSetting::Pinned)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::invalid_value(serde::de::Unexpected::Signed(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Memory,
            shards: 0,
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_cluster: false,
            redis_nodes: Vec::new(),
            redis_sentinels: Vec::new(),
            redis_sentinel_service: "mymaster".into(),
            redis_ca_file: PathBuf::new(),
            redis_client_cert: PathBuf::new(),
            redis_client_key: PathBuf::new(),
            key_prefix: "otpmcp".into(),
            connect_timeout: NonZeroDuration::from_secs(2),
            command_timeout: NonZeroDuration::from_secs(2),
            retry_interval: NonZeroDuration::from_secs(1),
            ping_interval: NonZeroDuration::from_secs(5),
            tcp_keepalive: NonZeroDuration::from_secs(15),
            lease_ttl: NonZeroDuration::from_secs(10),
            hand_over_calls: true,
            write_format: WriteFormatSetting::Auto,
        }
    }
}

/// Most event-store shards `store.shards` may ask for.
pub(super) const MAX_SHARDS: usize = 1024;

impl StoreConfig {
    /// Whether any Redis URL this replica connects to is `rediss://` (TLS).
    pub fn redis_tls(&self) -> bool {
        std::iter::once(&self.redis_url)
            .chain(&self.redis_nodes)
            .chain(&self.redis_sentinels)
            .any(|url| {
                url.expose()
                    .get(..9)
                    .is_some_and(|scheme| scheme.eq_ignore_ascii_case("rediss://"))
            })
    }

    /// The number of event-store shards to run: `shards`, or the cores the process may
    /// run on when it is 0.
    pub fn shard_count(&self) -> usize {
        match self.shards {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n,
        }
        .min(MAX_SHARDS)
    }
}
