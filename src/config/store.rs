//! `[store]`: where events, sessions and request leases live.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::duration::NonZeroDuration;
use super::secret::SecretUrl;

/// Which event-store and session backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// In this process: nothing to run beside it, nothing shared.
    #[default]
    Memory,
    /// In Redis: any replica serves any session and resumes any stream.
    Redis,
}

/// `[store]`: the backend of the event store and of shared sessions.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `memory` or `redis`.
    pub backend: BackendKind,
    /// Event-store shards: each an actor owning the sessions, streams and records whose
    /// ids hash to it. `0`: as many as the cores the process may run on.
    pub shards: usize,
    /// Redis URL, e.g. `redis://127.0.0.1:6379/0`, `redis://:password@host:6379`, or
    /// over TLS `rediss://user:password@host:6380`.
    pub redis_url: SecretUrl,
    /// `redis_url` (and `redis_nodes`) are nodes of a Redis Cluster: connect with the
    /// cluster client, which finds the other nodes and routes each command by its keys.
    pub redis_cluster: bool,
    /// More seed nodes of the cluster, besides `redis_url` (any one that answers is
    /// enough).
    pub redis_nodes: Vec<SecretUrl>,
    /// Redis Sentinel URLs, e.g. `redis://10.0.0.5:26379`. When set, each connection goes
    /// to the primary these sentinels name for `redis_sentinel_service` at that moment,
    /// and a failover is followed; `redis_url` then gives only the primary's password,
    /// user and database, its host is not used.
    pub redis_sentinels: Vec<SecretUrl>,
    /// The name the sentinels monitor the primary under (`sentinel monitor <name> ...`).
    pub redis_sentinel_service: String,
    /// A PEM file of the CA certificates that sign the Redis servers' certificates, for
    /// `rediss://` URLs: when set, only these are trusted. Empty: the system's roots.
    pub redis_ca_file: PathBuf,
    /// A PEM certificate (chain) this replica presents to Redis over TLS (mutual TLS,
    /// `tls-auth-clients yes`); with `redis_client_key`. Empty: none.
    pub redis_client_cert: PathBuf,
    /// The PEM private key of `redis_client_cert`. Empty: none.
    pub redis_client_key: PathBuf,
    /// Prefix of every Redis key and channel, so several deployments can share one Redis.
    pub key_prefix: String,
    /// Longest wait for a connection to Redis.
    pub connect_timeout: NonZeroDuration,
    /// Longest wait for one Redis command; a command that takes longer counts as a
    /// failure.
    pub command_timeout: NonZeroDuration,
    /// After a failed Redis command, events are delivered live without being stored for
    /// this long before Redis is tried again, so an outage costs no waiting per event.
    pub retry_interval: NonZeroDuration,
    /// Both connections to Redis are pinged this often; one that does not answer within
    /// `command_timeout` trips the breaker and is replaced. Without it, a connection
    /// dropped silently by a NAT or a firewall (half-open) is never noticed: commands time
    /// out for ever and the pub/sub feed goes quiet.
    pub ping_interval: NonZeroDuration,
    /// TCP keepalive on the connections to Redis: probes start after this much silence,
    /// so the kernel notices a peer that vanished.
    pub tcp_keepalive: NonZeroDuration,
    /// A replica renews its lease on its running requests this often; another replica
    /// answers them with an error once the lease is `lease_ttl` old.
    pub lease_ttl: NonZeroDuration,
    /// At a planned shutdown, a running call of a tool declared re-runnable is run again
    /// from its start by another replica, on the same stream; off, it ends with an error
    /// that says it may be retried.
    pub hand_over_calls: bool,
    /// The format version of what this replica writes to Redis for the others to read
    /// (docs/deployment.md, Upgrades and rollbacks). `"auto"`: the oldest format a live
    /// replica reads, learned at each lease renewal, so a rolling upgrade never writes
    /// what a replica of the version before cannot read. A number pins it: during an
    /// upgrade, the previous version's, to keep a rollback open after every replica runs
    /// the new one.
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
