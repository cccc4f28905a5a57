//! TLS for `rediss://` connections, through redis-rs's own rustls: the roots to trust
//! (`store.redis_ca_file`, else the system's) and the client's certificate (mutual TLS).

use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, TlsCertificates};

use crate::config::StoreConfig;

/// A TLS file (`store.redis_ca_file` and the client's) could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{key} ({path}): {source}")]
pub struct TlsFileError {
    /// The configuration key.
    pub key: &'static str,
    /// Its value.
    pub path: String,
    /// Why it could not be read.
    pub source: std::io::Error,
}

/// What every `rediss://` connection trusts and presents: `store.redis_ca_file` as its
/// only roots, and `store.redis_client_cert` and its key. `None`: neither is set, and the
/// system's roots are trusted (redis-rs reads them through rustls-native-certs).
pub(super) fn certificates(config: &StoreConfig) -> Result<Option<TlsCertificates>, TlsFileError> {
    let read = |key: &'static str, path: &std::path::Path| {
        if path.as_os_str().is_empty() {
            return Ok(None);
        }
        std::fs::read(path)
            .map(Some)
            .map_err(|source| TlsFileError {
                key,
                path: path.display().to_string(),
                source,
            })
    };
    let root_cert = read("store.redis_ca_file", &config.redis_ca_file)?;
    let cert = read("store.redis_client_cert", &config.redis_client_cert)?;
    let key = read("store.redis_client_key", &config.redis_client_key)?;
    let client_tls = match (cert, key) {
        (Some(client_cert), Some(client_key)) => Some(ClientTlsConfig {
            client_cert,
            client_key,
        }),
        // Configuration refuses one without the other.
        _ => None,
    };
    Ok(
        (root_cert.is_some() || client_tls.is_some()).then_some(TlsCertificates {
            client_tls,
            root_cert,
        }),
    )
}

/// A client of the server at `info`, with `certs` when it is reached over TLS.
pub(super) fn client(
    info: ConnectionInfo,
    certs: Option<&TlsCertificates>,
) -> redis::RedisResult<redis::Client> {
    match (info.addr(), certs) {
        (ConnectionAddr::TcpTls { .. }, Some(certs)) => {
            redis::Client::build_with_tls(info, certs.clone())
        }
        _ => redis::Client::open(info),
    }
}

/// How TLS connections are trusted, for start-up errors: empty without TLS.
pub(super) fn tls_note(config: &StoreConfig) -> String {
    if !config.redis_tls() {
        String::new()
    } else if config.redis_ca_file.as_os_str().is_empty() {
        " (TLS, trusting the system's root certificates; store.redis_ca_file is unset)".into()
    } else {
        format!(
            " (TLS, trusting only store.redis_ca_file = {})",
            config.redis_ca_file.display()
        )
    }
}
