//! The rules a configuration must meet beyond what its field types refuse: the checks
//! that span keys or need a parser (URLs, filters, TLS files), run once every source is
//! merged, each error naming its key.

use std::path::Path;

use super::error::invalid;
use super::{BackendKind, Config, ConfigError, store};

impl Config {
    /// Checks what the field types cannot: a usable path, a known cache scope, a
    /// loopback admin address, a Redis URL and prefix, a log filter, and the `[auth]` and
    /// `[exec]` rules. (A zero where it would break is refused by the types.)
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.sse.path.starts_with('/') {
            return invalid("sse.path", "must start with '/'");
        }
        if !matches!(self.stateless.cache_scope.as_str(), "public" | "private") {
            return invalid("stateless.cache_scope", "must be `public` or `private`");
        }
        if self.admin.enabled && !self.admin.bind.ip().is_loopback() && !self.admin.allow_remote {
            return invalid(
                "admin.bind",
                "is not a loopback address: the admin listener has no authentication (set admin.allow_remote = true to allow it)",
            );
        }
        if self.tasks.principal_event_percent.get() > 100 {
            return invalid(
                "tasks.principal_event_percent",
                "must be at most 100 (a percentage of sse.max_total_events and sse.max_total_bytes)",
            );
        }
        if self.store.shards > store::MAX_SHARDS {
            return invalid(
                "store.shards",
                format!("must be at most {} (0: one per core)", store::MAX_SHARDS),
            );
        }
        if self.store.backend == BackendKind::Redis {
            if redis::Client::open(self.store.redis_url.expose()).is_err() {
                return invalid(
                    "store.redis_url",
                    "is not a redis://, rediss:// (TLS) or unix:// URL",
                );
            }
            self.validate_sentinels()?;
            self.validate_redis_tls()?;
            let prefix = &self.store.key_prefix;
            if prefix.is_empty() || prefix.contains(['{', '}', ' ']) {
                return invalid(
                    "store.key_prefix",
                    "must be non-empty, without braces or spaces",
                );
            }
        }
        if self
            .telemetry
            .log_filter
            .parse::<tracing_subscriber::filter::Targets>()
            .is_err()
        {
            return invalid("telemetry.log_filter", "is not a valid filter");
        }
        self.auth.validate()?;
        self.exec.validate()?;
        self.validate_run_as()
    }

    /// Sentinels name the primary of one server; a cluster finds its own primaries.
    fn validate_sentinels(&self) -> Result<(), ConfigError> {
        let store = &self.store;
        if store.redis_sentinels.is_empty() {
            return Ok(());
        }
        if store.redis_cluster {
            return invalid(
                "store.redis_sentinels",
                "cannot be combined with store.redis_cluster (a cluster follows its own failovers)",
            );
        }
        if store
            .redis_sentinels
            .iter()
            .any(|url| redis::Client::open(url.expose()).is_err())
        {
            return invalid(
                "store.redis_sentinels",
                "must all be redis://, rediss:// or unix:// URLs of sentinels",
            );
        }
        if store.redis_sentinel_service.is_empty() {
            return invalid(
                "store.redis_sentinel_service",
                "must name the primary the sentinels monitor",
            );
        }
        Ok(())
    }

    /// The TLS files of the Redis connections: each one set is a readable PEM file of what
    /// it should hold, the client's certificate and key come together, and they are set
    /// only where some URL is `rediss://` (else they would silently not be used).
    fn validate_redis_tls(&self) -> Result<(), ConfigError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let store = &self.store;
        let set = |path: &Path| !path.as_os_str().is_empty();
        let files = [
            ("store.redis_ca_file", &store.redis_ca_file),
            ("store.redis_client_cert", &store.redis_client_cert),
            ("store.redis_client_key", &store.redis_client_key),
        ];
        if set(&store.redis_client_cert) != set(&store.redis_client_key) {
            let (key, other) = if set(&store.redis_client_cert) {
                ("store.redis_client_key", "store.redis_client_cert")
            } else {
                ("store.redis_client_cert", "store.redis_client_key")
            };
            return invalid(
                key,
                format!("must be set with {other} (mutual TLS needs both, or neither)"),
            );
        }
        if let Some((key, _)) = files.iter().find(|(_, path)| set(path))
            && !store.redis_tls()
        {
            return invalid(
                key,
                "is set, but no Redis URL is rediss://: the connections would not use TLS",
            );
        }
        for (key, path) in files.into_iter().filter(|(_, path)| set(path)) {
            let pem = match std::fs::read(path) {
                Ok(pem) => pem,
                Err(e) => return invalid(key, format!("{}: {e}", path.display())),
            };
            let holds = if key == "store.redis_client_key" {
                PrivateKeyDer::from_pem_slice(&pem).is_ok()
            } else {
                let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&pem).collect();
                certs.is_ok_and(|certs| !certs.is_empty())
            };
            if !holds {
                let what = if key == "store.redis_client_key" {
                    "a PEM private key"
                } else {
                    "PEM certificates"
                };
                return invalid(key, format!("{}: holds no {what}", path.display()));
            }
        }
        Ok(())
    }

    /// With `[auth]` on, a program running as the server's user could read the server's
    /// secrets (its environment, its memory) and, through the store, other principals'
    /// data: each entry must name a `uid` or say that it runs as the server's user.
    fn validate_run_as(&self) -> Result<(), ConfigError> {
        if !(self.auth.enabled && self.exec.enabled) {
            return Ok(());
        }
        let unsaid = self
            .exec
            .programs
            .iter()
            .find(|(_, p)| p.uid.is_none() && !p.run_as_server_user);
        match unsaid {
            Some((name, _)) => invalid(
                "exec.programs",
                format!(
                    "`{name}`: with auth.enabled, set `uid` (a user of its own) or `run_as_server_user = true` (it can then read what the server's user can)"
                ),
            ),
            None => Ok(()),
        }
    }
}
