//! Configuration: the [`Config`] struct mirrors `sys.toml`, one file here per section.
//! [`Config`]'s doc comment has the load order, the spelling of values and the errors.
//!
//! Each default is written once, in its section's `Default` impl; the field docs say what
//! a key does, not its value. docs/configuration.md is generated from these types
//! (`otpmcp config docs`, through their JSON Schema: doc comments and defaults), and
//! tests keep it and `sys.toml` in agreement with them. A key that zero would break has a
//! non-zero type (`NonZeroUsize`, [`NonZeroDuration`], ...), so a zero is refused while
//! loading, naming the key, and [`Config::validate`] checks only the rest.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod admin;
mod auth;
mod docs;
mod duration;
mod error;
mod exec;
mod explain;
mod runners;
mod secret;
mod server;
mod sse;
mod stateless;
mod store;
mod supervisor;
mod tasks;
mod telemetry;
mod validate;

#[cfg(test)]
mod defaults;

pub use admin::AdminConfig;
pub(crate) use auth::is_loopback_host;
pub use auth::{ASYMMETRIC_ALGORITHMS, AuthConfig, WELL_KNOWN_RESOURCE};
pub use duration::{NonZeroDuration, parse_duration};
pub use error::ConfigError;
pub use exec::{ArgsPolicy, ExecConfig, IsolationMode, ProgramConfig};
pub use explain::{Effective, ValueSource};
pub use secret::{Secret, SecretUrl, is_secret_name, redact_query, redact_url};
pub use server::{ClientAddressHeader, ServerConfig};
pub use sse::SseConfig;
pub use stateless::StatelessConfig;
pub use store::{BackendKind, CURRENT_FORMAT, OLDEST_FORMAT, StoreConfig, WriteFormatSetting};
pub use supervisor::SupervisorConfig;
pub use tasks::TasksConfig;
pub use telemetry::TelemetryConfig;

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "OTPMCP";
/// Separator between prefix, section and key in environment overrides.
pub const ENV_SEPARATOR: &str = "__";
/// The base file read from the working directory when it exists.
pub const DEFAULT_FILE: &str = "sys.toml";

/// Everything otpmcp reads at start-up: one table per section of `sys.toml`, each key
/// optional. The `sys.toml` at the repository root lists every key with its default; each
/// default is written once, in its section's `Default` impl, and a test keeps `sys.toml`
/// in agreement.
///
/// # Load order
///
/// Later sources override earlier ones, key by key:
///
/// 1. the built-in defaults;
/// 2. `./sys.toml` in the working directory, if it exists; **not for `otpmcp stdio`**,
///    which a desktop or IDE client starts inside a workspace whose files the user may
///    not have written (a library does the same with `Config::load_overlays`);
/// 3. each `--config FILE`, in order (a missing file is an error);
/// 4. environment variables `OTPMCP__<SECTION>__<KEY>`, e.g.
///    `OTPMCP__SSE__KEEPALIVE_INTERVAL=10s` or `OTPMCP__SERVER__ALLOWED_HOSTS=a,b`:
///    booleans and numbers are recognised, lists are comma-separated without spaces,
///    and variables not starting with `OTPMCP__` are ignored;
/// 5. `--bind ADDR:PORT`, which replaces `server.bind`.
///
/// Start-up logs the files it loaded (`configuration loaded files=[…]`). Overlays hold
/// only the keys they change: `config/development.toml` (short timers, debug logs),
/// `config/test.toml` (port 0, what the binary's tests use) and `config/redis.toml` (the
/// Redis backend, [deployment.md](deployment.md)).
///
/// # Values
///
/// A *duration* is a whole number and a unit: `150ms`, `30s`, `5m`, `1h`, `1d`; a bare
/// number (or a TOML integer) is milliseconds. Fractions, signs and compounds (`1h30m`)
/// are refused. A type marked `> 0` or `≥ 1` has no zero: a zero is refused while the
/// value is read. A *secret* is read but never shown.
///
/// # Errors
///
/// The merged result is checked, and the process exits with code 2 and a message naming
/// the key when a value does not parse, a key is unknown (in a file or an `OTPMCP__`
/// variable: a misspelt key is an error, not ignored), a value is zero where its type
/// has none, or a rule of the key below fails:
///
/// ```text
/// otpmcp: configuration: must be greater than zero for key `sse.stream_timeout`
/// otpmcp: configuration key `sse.path`: must start with '/'
/// ```
///
/// It exits with 1 when it cannot bind its address or reach Redis. An embedder gets the
/// same checks from `otpmcp::start` as `StartError::Config`.
///
/// `otpmcp config check [--stdio] [FILE]...` loads the configuration as `otpmcp --config
/// FILE...` would (with `--stdio`, as `otpmcp stdio` would), validates it and prints every
/// key's effective value with its source (`# default`, `# file PATH`, `# environment
/// NAME`), then `# valid`; it exits 0, or 2 with the error. Secrets are never printed,
/// there nor in errors and logs: a secret shows as `"(set)"` (or `""` when unset), and in
/// a URL the user-info and every credential-like query parameter (`password`, `token`,
/// `key`, `secret`, …) show as `(set)`: `redis://(set)@10.0.0.9:6379`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The HTTP listener and its limits.
    pub server: ServerConfig,
    /// SSE streams, the event store and resumption.
    pub sse: SseConfig,
    /// Where events and sessions live: this process, or Redis shared by replicas.
    pub store: StoreConfig,
    /// Restart intensity of the root supervisor.
    pub supervisor: SupervisorConfig,
    /// Logs and OpenTelemetry export.
    pub telemetry: TelemetryConfig,
    /// Stateless (2026-07-28) requests: multi round-trip state, caching hints, listen
    /// streams.
    pub stateless: StatelessConfig,
    /// Tasks (the `io.modelcontextprotocol/tasks` extension): lifetime, polling, limits.
    pub tasks: TasksConfig,
    /// The admin listener: health and readiness probes, metrics, the dashboard.
    pub admin: AdminConfig,
    /// Bearer tokens: otpmcp as an OAuth 2.1 resource server.
    pub auth: AuthConfig,
    /// Supervised execution of configured programs (off by default).
    pub exec: ExecConfig,
}

impl Config {
    /// Loads `sys.toml` from `dir` (if present), then `overlays` in order, then the
    /// environment, and validates the result.
    pub fn load(dir: &Path, overlays: &[PathBuf]) -> Result<Self, ConfigError> {
        Self::read(Some(dir), overlays, std::env::vars())
    }

    /// [`Config::load`] with an explicit environment, for tests.
    pub fn load_with_env(
        dir: &Path,
        overlays: &[PathBuf],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        Self::read(Some(dir), overlays, env)
    }

    /// Loads only `overlays` and the environment: no `sys.toml` from the working
    /// directory. `otpmcp stdio` loads this way because a desktop or IDE client starts it
    /// inside the user's workspace, whose files the user may not have written: a
    /// repository must not be able to add programs, lower isolation or redirect
    /// telemetry and the store by shipping a `sys.toml`.
    pub fn load_overlays(overlays: &[PathBuf]) -> Result<Self, ConfigError> {
        Self::read(None, overlays, std::env::vars())
    }

    /// [`Config::load_overlays`] with an explicit environment, for tests.
    pub fn load_overlays_with_env(
        overlays: &[PathBuf],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        Self::read(None, overlays, env)
    }

    /// The files a load reads, in order: `sys.toml` in `dir` when `dir` is given and the
    /// file exists, then `overlays`. What start-up logs as loaded.
    pub fn files(dir: Option<&Path>, overlays: &[PathBuf]) -> Vec<PathBuf> {
        let base = dir
            .map(|dir| dir.join(DEFAULT_FILE))
            .filter(|base| base.is_file());
        base.into_iter().chain(overlays.iter().cloned()).collect()
    }

    /// Reads `sys.toml` from `dir` (when given), `overlays`, then `env`, and validates.
    fn read(
        dir: Option<&Path>,
        overlays: &[PathBuf],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder();
        if let Some(dir) = dir {
            builder = builder.add_source(
                config::File::from(dir.join(DEFAULT_FILE))
                    .format(config::FileFormat::Toml)
                    .required(false),
            );
        }
        for path in overlays {
            if !path.is_file() {
                return Err(ConfigError::MissingFile(path.clone()));
            }
            builder = builder
                .add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml));
        }
        let env: config::Map<String, String> = env
            .into_iter()
            .filter(|(k, _)| k.starts_with(&format!("{ENV_PREFIX}{ENV_SEPARATOR}")))
            .collect();
        builder = builder.add_source(
            config::Environment::with_prefix(ENV_PREFIX)
                .prefix_separator(ENV_SEPARATOR)
                .separator(ENV_SEPARATOR)
                .list_separator(",")
                .with_list_parse_key("server.allowed_hosts")
                .with_list_parse_key("server.allowed_origins")
                .with_list_parse_key("server.trusted_proxies")
                .with_list_parse_key("admin.allowed_hosts")
                .with_list_parse_key("admin.allowed_origins")
                .with_list_parse_key("store.redis_nodes")
                .with_list_parse_key("store.redis_sentinels")
                .with_list_parse_key("auth.algorithms")
                .with_list_parse_key("auth.required_scopes")
                .with_list_parse_key("auth.scopes_supported")
                .try_parsing(true)
                .source(Some(env)),
        );
        let config: Config = builder.build()?.try_deserialize()?;
        config.validate()?;
        Ok(config)
    }

    /// A configuration from the text of a TOML file alone (no `sys.toml`, no
    /// environment), validated.
    ///
    /// ```
    /// let config = otpmcp::Config::from_toml("[server]\nmax_sessions = 5").unwrap();
    /// assert_eq!(config.server.max_sessions.get(), 5);
    /// assert!(otpmcp::Config::from_toml("[server]\nmax_session = 5").is_err());
    /// ```
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        let source = config::File::from_str(text, config::FileFormat::Toml);
        let config: Config = config::Config::builder()
            .add_source(source)
            .build()?
            .try_deserialize()?;
        config.validate()?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_apply_without_any_file() {
        let dir = std::env::temp_dir().join("otpmcp-no-such-dir");
        let c = Config::load_with_env(&dir, &[], env(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.sse.path, "/mcp");
        assert_eq!(c.sse.keepalive_interval.get(), Duration::from_secs(30));
        assert_eq!(c.server.bind.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn environment_overrides_name_section_and_key() {
        let dir = std::env::temp_dir().join("otpmcp-no-such-dir");
        let c = Config::load_with_env(
            &dir,
            &[],
            env(&[
                ("OTPMCP__SSE__KEEPALIVE_INTERVAL", "150ms"),
                ("OTPMCP__SSE__ENABLE_REPLAY", "false"),
                ("OTPMCP__SERVER__ALLOWED_HOSTS", "example.com,localhost"),
                ("UNRELATED", "x"),
            ]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.sse.keepalive_interval.get(), Duration::from_millis(150));
        assert!(!c.sse.enable_replay);
        assert_eq!(c.server.allowed_hosts, ["example.com", "localhost"]);
    }

    #[test]
    fn sentinels_come_from_the_environment_and_exclude_a_cluster() {
        let dir = std::env::temp_dir().join("otpmcp-no-such-dir");
        let load = |extra: &[(&str, &str)]| {
            let mut pairs = vec![
                ("OTPMCP__STORE__BACKEND", "redis"),
                (
                    "OTPMCP__STORE__REDIS_SENTINELS",
                    "redis://10.0.0.5:26379,redis://10.0.0.6:26379",
                ),
                ("OTPMCP__STORE__REDIS_SENTINEL_SERVICE", "otpmcp"),
            ];
            pairs.extend_from_slice(extra);
            Config::load_with_env(&dir, &[], env(&pairs))
        };
        let c = load(&[]).unwrap_or_else(|e| panic!("{e}"));
        let sentinels: Vec<&str> = c.store.redis_sentinels.iter().map(|u| u.expose()).collect();
        assert_eq!(
            sentinels,
            ["redis://10.0.0.5:26379", "redis://10.0.0.6:26379"]
        );
        assert_eq!(c.store.redis_sentinel_service, "otpmcp");
        for (extra, problem) in [
            (("OTPMCP__STORE__REDIS_CLUSTER", "true"), "redis_cluster"),
            (("OTPMCP__STORE__REDIS_SENTINEL_SERVICE", ""), "must name"),
        ] {
            let err = load(&[extra])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(problem), "{err:?}");
        }
    }

    #[test]
    fn rediss_is_accepted_and_its_files_are_checked_naming_the_key() {
        let dir = std::env::temp_dir().join(format!("otpmcp-tls-keys-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let junk = dir.join("junk.pem");
        let _ = std::fs::write(&junk, "not a certificate\n");
        let junk = junk.display().to_string();
        let load = |pairs: &[(&str, &str)]| {
            let mut all = vec![("OTPMCP__STORE__BACKEND", "redis")];
            all.extend_from_slice(pairs);
            Config::load_with_env(&dir, &[], env(&all))
                .err()
                .map(|e| e.to_string())
        };
        let tls = (
            "OTPMCP__STORE__REDIS_URL",
            "rediss://otpmcp:pw@redis.example:6380",
        );
        assert_eq!(load(&[tls]), None, "rediss:// with the system's roots");
        let sentinel_tls = ("OTPMCP__STORE__REDIS_SENTINELS", "rediss://10.0.0.5:26379");
        assert_eq!(load(&[sentinel_tls]), None, "sentinels over TLS");
        for (pairs, key, problem) in [
            (
                vec![tls, ("OTPMCP__STORE__REDIS_CA_FILE", "/nonexistent/ca.pem")],
                "store.redis_ca_file",
                "/nonexistent/ca.pem",
            ),
            (
                vec![tls, ("OTPMCP__STORE__REDIS_CA_FILE", junk.as_str())],
                "store.redis_ca_file",
                "holds no PEM certificates",
            ),
            (
                vec![tls, ("OTPMCP__STORE__REDIS_CLIENT_CERT", junk.as_str())],
                "store.redis_client_key",
                "must be set with store.redis_client_cert",
            ),
            (
                vec![tls, ("OTPMCP__STORE__REDIS_CLIENT_KEY", junk.as_str())],
                "store.redis_client_cert",
                "must be set with store.redis_client_key",
            ),
            (
                vec![("OTPMCP__STORE__REDIS_CA_FILE", junk.as_str())],
                "store.redis_ca_file",
                "no Redis URL is rediss://",
            ),
        ] {
            let err = load(&pairs).unwrap_or_default();
            assert!(
                err.contains(&format!("`{key}`")) && err.contains(problem),
                "{pairs:?}: {err:?}"
            );
            assert!(!err.contains("pw@"), "no password: {err}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    // Issue 22, finding 6: the admin listener bound anywhere it was told, unauthenticated.
    #[test]
    fn an_admin_listener_off_loopback_needs_allow_remote() {
        let mut c = Config::default();
        c.admin.enabled = true;
        c.admin.bind = SocketAddr::from(([0, 0, 0, 0], 9464));
        let err = c
            .validate()
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("admin.bind") && err.contains("admin.allow_remote"),
            "{err:?}"
        );
        c.admin.allow_remote = true;
        assert!(c.validate().is_ok());
        c.admin.allow_remote = false;
        c.admin.bind = SocketAddr::from(([127, 0, 0, 1], 9464));
        assert!(c.validate().is_ok());
    }

    #[test]
    fn bad_values_name_their_key() {
        let dir = std::env::temp_dir().join("otpmcp-no-such-dir");
        let cases = [
            (
                "OTPMCP__SSE__KEEPALIVE_INTERVAL",
                "soon",
                "keepalive_interval",
            ),
            ("OTPMCP__SSE__STREAM_TIMEOUT", "0s", "sse.stream_timeout"),
            ("OTPMCP__SSE__STREAM_BUFFER", "0", "sse.stream_buffer"),
            ("OTPMCP__AUTH__FAILURE_CLIENTS", "0", "auth.failure_clients"),
            (
                "OTPMCP__SSE__MAX_SESSION_EVENTS",
                "lots",
                "max_session_events",
            ),
            ("OTPMCP__SSE__PATH", "mcp", "sse.path"),
            (
                "OTPMCP__TASKS__PRINCIPAL_EVENT_PERCENT",
                "101",
                "tasks.principal_event_percent",
            ),
            ("OTPMCP__SERVER__BIND", "nowhere", "bind"),
        ];
        for (key, value, named) in cases {
            let err = Config::load_with_env(&dir, &[], env(&[(key, value)]))
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(named),
                "{key}={value}: error {err:?} should name {named}"
            );
        }
    }

    // A zero where the key's type is non-zero is refused while loading, in the config
    // crate's words, with the key: the message docs/configuration.md shows (from
    // `Config`'s doc comment).
    #[test]
    fn a_zero_is_refused_at_load_naming_the_key() {
        let message = |text: &str| {
            Config::from_toml(text)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        assert_eq!(
            message("[sse]\nstream_timeout = \"0s\""),
            "configuration: must be greater than zero for key `sse.stream_timeout`"
        );
        assert_eq!(
            message("[server]\nmax_sessions = 0"),
            "configuration: invalid value: integer `0`, expected a nonzero usize for key `server.max_sessions`"
        );
        assert_eq!(
            message("[exec.programs.x]\nwall_time = 0"),
            "configuration: must be greater than zero for key `exec.programs.x.wall_time`"
        );
    }
}
