//! Redis Sentinel: the primary that the sentinels name when a connection is opened.

use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, TlsCertificates};

use super::breaker::timeout_error;
use super::tls::client;

/// Redis Sentinel (`store.redis_sentinels`): every new connection goes to the primary the
/// sentinels name at that moment. A failover is followed by the heartbeat, which replaces
/// a connection whose server fails or is no longer primary.
pub(super) struct Sentinels {
    pub(super) sentinels: Vec<redis::Client>,
    pub(super) service: String,
    /// `store.redis_url`'s password, user, database, settings and scheme (TLS or not);
    /// the address is the primary's.
    pub(super) primary: ConnectionInfo,
    /// For a `rediss://` primary.
    pub(super) certs: Option<TlsCertificates>,
}

impl Sentinels {
    /// A client of the primary named by the first sentinel that answers within `timeout`
    /// and knows the service.
    pub(super) async fn primary(&self, timeout: Duration) -> redis::RedisResult<redis::Client> {
        let mut failure = None;
        for sentinel in &self.sentinels {
            match ask_sentinel(sentinel, &self.service, timeout).await {
                Ok(Some((host, port))) => {
                    let addr = match self.primary.addr() {
                        ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                            host,
                            port,
                            insecure: *insecure,
                            tls_params: None,
                        },
                        _ => ConnectionAddr::Tcp(host, port),
                    };
                    let info = self.primary.clone().set_addr(addr);
                    return client(info, self.certs.as_ref());
                }
                Ok(None) => {
                    failure = Some(redis::RedisError::from((
                        redis::ErrorKind::InvalidClientConfig,
                        "a sentinel does not monitor store.redis_sentinel_service",
                        self.service.clone(),
                    )));
                }
                Err(e) => failure = Some(e),
            }
        }
        Err(failure.unwrap_or_else(|| {
            redis::RedisError::from((redis::ErrorKind::InvalidClientConfig, "no sentinels"))
        }))
    }
}

/// The primary's address as one sentinel knows it (`None`: not a service it monitors).
async fn ask_sentinel(
    sentinel: &redis::Client,
    service: &str,
    timeout: Duration,
) -> redis::RedisResult<Option<(String, u16)>> {
    let ask = async {
        let mut conn = sentinel.get_multiplexed_async_connection().await?;
        redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(service)
            .query_async(&mut conn)
            .await
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| timeout_error())?
}
