//! The connections to Redis that the store, the session directory and the leases share:
//! one for commands and scripts, one for pub/sub, this replica's number, and the breaker
//! that makes an outage cost callers nothing.
//!
//! A connection that stops answering without closing (a NAT or a firewall that forgot it:
//! half-open) is never noticed by redis-rs, which reconnects only when the socket fails.
//! Two things catch it: TCP keepalive on every socket, and a heartbeat that pings both
//! connections every `store.ping_interval`. A ping that gets no answer within
//! `store.command_timeout` trips the breaker and replaces the connection with a new one;
//! callers take the current connection each time ([`RedisLink::commands`]). A new pub/sub
//! connection has lost every subscription, so the router is told that the feed was lost:
//! the store follows its streams again and reads back what they missed.
//!
//! With Redis Sentinel each new connection goes to the primary the sentinels name then,
//! and the heartbeat asks `ROLE` instead of `PING`, so a connection to a primary demoted
//! by a failover is replaced too.
//!
//! A `rediss://` URL is reached over TLS by redis-rs itself (rustls): trusting only
//! `store.redis_ca_file` when it is set, else the system's roots, and presenting
//! `store.redis_client_cert` where the server asks for a client certificate.

use std::sync::{Arc, Weak};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::io::tcp::{TcpSettings, socket2::TcpKeepalive};
use redis::{ConnectionAddr, ConnectionInfo, RedisFuture, TlsCertificates, ToRedisArgs};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

pub use super::breaker::Breaker;

use super::breaker::timeout_error;
use super::keys::Keys;
use super::sentinel::Sentinels;
use super::tls::{TlsFileError, certificates, client, tls_note};
use crate::config::{SecretUrl, StoreConfig};
use crate::event_store::format::WriteFormat;

/// Why Redis could not be set up at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URL, or the connection.
    #[error("redis at {url}{tls}: {source}")]
    Redis {
        /// `store.redis_url` without credentials.
        url: String,
        /// Empty without TLS; else which roots were trusted, and the key that sets them,
        /// since a certificate the server's CA did not sign is the usual TLS failure.
        tls: String,
        /// What failed.
        source: redis::RedisError,
    },
    /// A TLS file (`store.redis_ca_file` and the client's) could not be read.
    #[error(transparent)]
    TlsFile(#[from] TlsFileError),
}

/// Receives every pub/sub message (the cluster's router); runs on redis-rs's connection
/// task, so it must not block.
type Route = Arc<dyn Fn(redis::PushInfo) + Send + Sync>;

/// The connections to Redis and who we are among the replicas.
#[derive(Clone)]
pub struct RedisLink {
    conns: Arc<Conns>,
    /// Key names.
    pub keys: Arc<Keys>,
    /// This replica's number, unique among all replicas that ever used this Redis.
    pub replica: u64,
    /// Events delivered live but not stored because Redis was unavailable.
    pub unstored: Arc<std::sync::atomic::AtomicU64>,
    /// Open after a failure: callers skip Redis for `retry_interval` instead of waiting.
    pub breaker: Breaker,
    /// The shared formats' version to write (`store.write_format`), kept by the lease
    /// keeper.
    pub format: WriteFormat,
}

/// A connection to one Redis server (which redis-rs reconnects by itself), or to a Redis
/// Cluster (one connection per node, routed by each command's keys).
#[derive(Clone)]
pub enum RedisConn {
    /// One server.
    Single(ConnectionManager),
    /// A Redis Cluster (`store.redis_cluster`).
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> RedisFuture<'a, redis::Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(cmd, offset, count),
            Self::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

impl RedisConn {
    /// Subscribes to pub/sub `channels` (RESP3: messages arrive as pushes).
    pub async fn subscribe(&mut self, channels: impl ToRedisArgs) -> redis::RedisResult<()> {
        match self {
            Self::Single(c) => c.subscribe(channels).await,
            Self::Cluster(c) => c.subscribe(channels).await,
        }
    }

    /// Leaves pub/sub `channels`.
    pub async fn unsubscribe(&mut self, channels: impl ToRedisArgs) -> redis::RedisResult<()> {
        match self {
            Self::Single(c) => c.unsubscribe(channels).await,
            Self::Cluster(c) => c.unsubscribe(channels).await,
        }
    }
}

/// The current connections, which the heartbeat replaces when they stop answering. A
/// `watch` cell, as for actor slots: readers clone the current value, never wait.
struct Conns {
    commands: watch::Sender<RedisConn>,
    pubsub: watch::Sender<RedisConn>,
    /// Pings both; stops when the last link goes.
    _heartbeat: AbortOnDropHandle<()>,
}

impl RedisLink {
    /// The connection for commands and scripts (never blocking ones).
    pub fn commands(&self) -> RedisConn {
        self.conns.commands.borrow().clone()
    }

    /// The pub/sub connection; it resubscribes by itself after a reconnect.
    pub fn pubsub(&self) -> RedisConn {
        self.conns.pubsub.borrow().clone()
    }

    /// Publishes `body` on pub/sub `channel`, through the breaker (`what` names the
    /// caller in its warnings).
    pub async fn publish(
        &self,
        what: &'static str,
        channel: String,
        body: impl redis::ToRedisArgs + Send + Sync,
    ) -> redis::RedisResult<()> {
        let mut conn = self.commands();
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

fn manager_config(config: &StoreConfig) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(config.connect_timeout.get()))
        .set_response_timeout(Some(config.command_timeout.get()))
        .set_number_of_retries(2)
        .set_max_delay(config.retry_interval.get().max(Duration::from_millis(100)))
}

/// Where Redis is: one server, the seed nodes of a cluster, or the sentinels that name
/// the primary.
enum Servers {
    Single(redis::Client),
    Cluster(Vec<ConnectionInfo>),
    Sentinel(Sentinels),
}

/// What it takes to open the connections again.
struct Opener {
    servers: Servers,
    /// For `rediss://` cluster nodes (a single server's and the sentinels' clients
    /// hold their own).
    certs: Option<TlsCertificates>,
    config: StoreConfig,
    route: Route,
    /// This replica's own channels, subscribed on every new pub/sub connection.
    channels: Vec<String>,
}

impl Opener {
    fn cluster(&self, nodes: &[ConnectionInfo]) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(nodes.to_vec())
            .use_protocol(redis::ProtocolVersion::RESP3)
            .connection_timeout(self.config.connect_timeout.get())
            .response_timeout(self.config.command_timeout.get())
            .tcp_settings(tcp_settings(self.config.tcp_keepalive.get()))
            .retries(2);
        // TLS or not follows the first seed's scheme; the certificates only with TLS
        // (given to plain nodes they would turn TLS on).
        let tls = nodes
            .first()
            .is_some_and(|n| matches!(n.addr(), ConnectionAddr::TcpTls { .. }));
        match &self.certs {
            Some(certs) if tls => builder.certs(certs.clone()),
            _ => builder,
        }
    }

    /// The one server to connect to: `store.redis_url`, or the primary the sentinels
    /// name now. (Not for a cluster.)
    async fn server(&self) -> redis::RedisResult<redis::Client> {
        match &self.servers {
            Servers::Single(client) => Ok(client.clone()),
            Servers::Sentinel(sentinels) => {
                sentinels.primary(self.config.connect_timeout.get()).await
            }
            Servers::Cluster(_) => Err(redis::RedisError::from((
                redis::ErrorKind::InvalidClientConfig,
                "a cluster has no one server",
            ))),
        }
    }

    /// Whether a healthy connection must be to a primary: with sentinels, one to a
    /// server that was demoted by a failover is replaced.
    fn primary_only(&self) -> bool {
        matches!(self.servers, Servers::Sentinel(_))
    }

    async fn commands(&self) -> redis::RedisResult<RedisConn> {
        let open = async {
            if let Servers::Cluster(nodes) = &self.servers {
                let client = self.cluster(nodes).build()?;
                return client.get_async_connection().await.map(RedisConn::Cluster);
            }
            let config = manager_config(&self.config);
            ConnectionManager::new_with_config(self.server().await?, config)
                .await
                .map(RedisConn::Single)
        };
        tokio::time::timeout(self.config.connect_timeout.get(), open)
            .await
            .map_err(|_| timeout_error())?
    }

    async fn pubsub(&self) -> redis::RedisResult<RedisConn> {
        let route = self.route.clone();
        let push = move |info: redis::PushInfo| {
            route(info);
            Ok::<(), std::convert::Infallible>(())
        };
        let open = async {
            // The cluster connection resubscribes by itself whenever it has a sender.
            if let Servers::Cluster(nodes) = &self.servers {
                let client = self.cluster(nodes).push_sender(push).build()?;
                return client.get_async_connection().await.map(RedisConn::Cluster);
            }
            let config = manager_config(&self.config)
                .set_push_sender(push)
                .set_automatic_resubscription();
            ConnectionManager::new_with_config(self.server().await?, config)
                .await
                .map(RedisConn::Single)
        };
        let mut pubsub = tokio::time::timeout(self.config.connect_timeout.get(), open)
            .await
            .map_err(|_| timeout_error())??;
        pubsub.subscribe(&self.channels).await?;
        Ok(pubsub)
    }
}

/// TCP keepalive: a peer that vanished is noticed by the kernel after about
/// `idle` + 3 × `idle` / 3 of silence, even on a connection nobody writes to.
fn tcp_settings(idle: Duration) -> TcpSettings {
    let keepalive = TcpKeepalive::new()
        .with_time(idle)
        .with_interval((idle / 3).max(Duration::from_secs(1)))
        .with_retries(3);
    TcpSettings::default()
        .set_nodelay(true)
        .set_keepalive(keepalive)
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
    let url = if config.redis_sentinels.is_empty() {
        config.redis_url.to_string()
    } else {
        let sentinels: Vec<String> = config
            .redis_sentinels
            .iter()
            .map(ToString::to_string)
            .collect();
        format!(
            "the primary of {:?} per sentinels {}",
            config.redis_sentinel_service,
            sentinels.join(", ")
        )
    };
    let tls = tls_note(config);
    let err = |source| ConnectError::Redis {
        url: url.clone(),
        tls: tls.clone(),
        source,
    };
    let certs = certificates(config)?;
    let servers = if config.redis_cluster {
        let seeds = std::iter::once(config.redis_url.expose())
            .chain(config.redis_nodes.iter().map(SecretUrl::expose));
        let nodes = seeds
            .map(redis::IntoConnectionInfo::into_connection_info)
            .collect::<redis::RedisResult<Vec<_>>>()
            .map_err(err)?;
        Servers::Cluster(nodes)
    } else {
        let mut info = redis::IntoConnectionInfo::into_connection_info(config.redis_url.expose())
            .map_err(err)?;
        // Pub/sub messages arrive as RESP3 pushes on a connection that can still be used,
        // and that redis-rs reconnects and resubscribes by itself.
        let settings = info
            .redis_settings()
            .clone()
            .set_protocol(redis::ProtocolVersion::RESP3);
        info = info
            .set_redis_settings(settings)
            .set_tcp_settings(tcp_settings(config.tcp_keepalive.get()));
        if config.redis_sentinels.is_empty() {
            Servers::Single(client(info, certs.as_ref()).map_err(err)?)
        } else {
            let sentinels = config
                .redis_sentinels
                .iter()
                .map(|url| {
                    let info = redis::IntoConnectionInfo::into_connection_info(url.expose())?;
                    client(info, certs.as_ref())
                })
                .collect::<redis::RedisResult<Vec<_>>>()
                .map_err(err)?;
            Servers::Sentinel(Sentinels {
                sentinels,
                service: config.redis_sentinel_service.clone(),
                primary: info,
                certs: certs.clone(),
            })
        }
    };
    let keys = Arc::new(Keys::new(&config.key_prefix));
    let mut opener = Opener {
        servers,
        certs,
        config: config.clone(),
        route: Arc::new(|_| {}),
        channels: Vec::new(),
    };
    let mut commands = opener.commands().await.map_err(err)?;
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
    opener.route = Arc::new(on_push(replica, keys.clone()));
    opener.channels = vec![
        keys.replica_channel(replica),
        keys.broadcast_channel(),
        keys.news_channel(),
        keys.task_channel(replica),
    ];
    let pubsub = opener.pubsub().await.map_err(err)?;
    let breaker = Breaker::new(config.retry_interval.get(), config.command_timeout.get());
    let conns = Arc::new_cyclic(|conns| Conns {
        commands: watch::Sender::new(commands),
        pubsub: watch::Sender::new(pubsub),
        _heartbeat: AbortOnDropHandle::new(tokio::spawn(heartbeat(
            conns.clone(),
            opener,
            breaker.clone(),
        ))),
    });
    tracing::info!(replica, redis = %url, "joined the replicas sharing this Redis");
    Ok(RedisLink {
        conns,
        keys,
        replica,
        unstored: Arc::default(),
        breaker,
        format: WriteFormat::new(config.write_format),
    })
}

/// Which connection a heartbeat is about.
#[derive(Debug, Clone, Copy)]
enum Which {
    Commands,
    PubSub,
}

/// Pings both connections every `store.ping_interval`, together; replaces each that does
/// not answer within `store.command_timeout`.
async fn heartbeat(conns: Weak<Conns>, opener: Opener, breaker: Breaker) {
    let mut tick = tokio::time::interval(opener.config.ping_interval.get());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let Some(current) = conns.upgrade() else {
            return;
        };
        let (commands, pubsub) = (
            current.commands.borrow().clone(),
            current.pubsub.borrow().clone(),
        );
        drop(current);
        let timeout = opener.config.command_timeout.get();
        let primary = opener.primary_only();
        let (commands_ok, pubsub_ok) = tokio::join!(
            ping(commands, timeout, primary),
            ping(pubsub, timeout, primary)
        );
        for (which, answered) in [(Which::Commands, commands_ok), (Which::PubSub, pubsub_ok)] {
            if answered {
                continue;
            }
            if breaker.trip() {
                tracing::warn!(connection = ?which, "redis did not answer a ping in time; connecting again");
            }
            replace(&conns, &opener, which).await;
        }
    }
}

/// Whether `conn` answers a PING within `timeout` (every primary of a cluster), or with
/// `primary` asks `ROLE` instead and is answered `master`: a primary demoted by a failover
/// still answers, but refuses writes.
async fn ping(mut conn: RedisConn, timeout: Duration, primary: bool) -> bool {
    if primary {
        let cmd = redis::cmd("ROLE");
        let role = cmd.query_async::<Vec<redis::Value>>(&mut conn);
        return match tokio::time::timeout(timeout, role).await {
            Ok(Ok(role)) => matches!(
                role.first(),
                Some(redis::Value::BulkString(b)) if b.as_slice() == b"master"
            ),
            _ => false,
        };
    }
    let cmd = redis::cmd("PING");
    let ping = cmd.query_async::<String>(&mut conn);
    matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)))
}

/// Opens a new connection in place of `which`. A connection that was merely slow, or a
/// Redis that is down, costs one more attempt at the next ping.
async fn replace(conns: &Weak<Conns>, opener: &Opener, which: Which) {
    let opened = match which {
        Which::Commands => opener.commands().await,
        Which::PubSub => opener.pubsub().await,
    };
    let fresh = match opened {
        Ok(fresh) => fresh,
        Err(e) => {
            tracing::debug!(connection = ?which, error = %e, "could not connect to redis yet");
            return;
        }
    };
    let Some(current) = conns.upgrade() else {
        return;
    };
    match which {
        Which::Commands => {
            current.commands.send_replace(fresh);
        }
        Which::PubSub => {
            current.pubsub.send_replace(fresh);
            // Its subscriptions to streams are gone with the old one: the store follows
            // them again and reads back what they missed.
            (opener.route)(redis::PushInfo {
                kind: redis::PushKind::Disconnection,
                data: Vec::new(),
            });
        }
    }
    tracing::info!(connection = ?which, "a new redis connection replaces one that stopped answering");
}
