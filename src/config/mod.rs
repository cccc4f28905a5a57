//! Configuration: the [`Config`] struct mirrors `sys.toml`.
//!
//! Size: one struct per section of `sys.toml`, each key with its documented default, and
//! the tests of parsing and validation; splitting the sections apart would scatter one
//! file's worth of settings.
//!
//! Sources, later ones winning: built-in defaults, `sys.toml` in the working directory
//! (if present), each `--config FILE` overlay, environment variables
//! `OTPMCP__<SECTION>__<KEY>` (e.g. `OTPMCP__SSE__KEEPALIVE_INTERVAL=10s`), then `--bind`.
//! Durations are human-readable: `150ms`, `30s`, `5m`, `1h`, `1d` (a bare number is
//! milliseconds). Every error names the key it is about.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod auth;
mod exec;
mod runners;
pub use auth::{ASYMMETRIC_ALGORITHMS, AuthConfig, WELL_KNOWN_RESOURCE};
pub use exec::{ArgsPolicy, ExecConfig, IsolationMode, ProgramConfig};

/// Prefix of environment overrides.
pub const ENV_PREFIX: &str = "OTPMCP";
/// Separator between prefix, section and key in environment overrides.
pub const ENV_SEPARATOR: &str = "__";
/// The base file read from the working directory when it exists.
pub const DEFAULT_FILE: &str = "sys.toml";

/// A configuration problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A source could not be read or a value has the wrong type.
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A `--config` file does not exist.
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    /// A value is present but not acceptable.
    #[error("configuration key `{key}`: {problem}")]
    Invalid {
        /// The dotted key, e.g. `sse.keepalive_interval`.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// Everything otpmcp reads at start-up.
#[derive(Debug, Clone, Deserialize, Default)]
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
    /// The admin listener: health and readiness probes.
    pub admin: AdminConfig,
    /// Bearer tokens: otpmcp as an OAuth 2.1 resource server.
    pub auth: AuthConfig,
    /// Supervised execution of configured programs (off by default).
    pub exec: ExecConfig,
}

/// `[server]`: the listener, security checks and session limits.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on. Default `127.0.0.1:8080`: loopback, so a local server is not
    /// reachable from the network unless you ask for it.
    pub bind: SocketAddr,
    /// Reject requests whose `Host` is not in `allowed_hosts` and whose `Origin` is not in
    /// `allowed_origins` (DNS-rebinding protection). Default true. Turning it off lets any
    /// web page a user visits drive a local server.
    pub dns_rebinding_protection: bool,
    /// Host names (port ignored) accepted in `Host`. Default: localhost, 127.0.0.1, [::1].
    pub allowed_hosts: Vec<String>,
    /// Origins (scheme://host, port ignored) accepted in `Origin`; requests without an
    /// Origin (non-browser clients) pass. Default: http(s) on localhost, 127.0.0.1, [::1].
    pub allowed_origins: Vec<String>,
    /// Largest accepted POST body in bytes (413 above). Default 4 MiB.
    pub max_body_bytes: usize,
    /// Most sessions alive at once; `initialize` beyond it gets 503. Default 10000.
    /// Without a cap, a client looping on `initialize` grows memory without bound.
    pub max_sessions: usize,
    /// Most sessions one client address may have on this replica; 0 (the default) means
    /// no cap. At it, `initialize` from that address ends the address's own least recently
    /// used idle session, or gets 429 with `Retry-After` when all of them are busy, so one
    /// address cannot take the table from everyone else. Clients behind one NAT or proxy
    /// share an address: size it for them.
    pub max_sessions_per_client: u32,
    /// Most requests in progress plus streams open per session; beyond it a request gets
    /// 429. Default 64. Without it, one client can start unbounded work that outlives its
    /// connections.
    pub max_open_per_session: u32,
    /// A session with no request and no open stream or running request for this long is
    /// ended and its events forgotten. Default `30m`. Without it, abandoned sessions and
    /// their events stay in memory until `max_sessions` refuses new clients.
    #[serde(with = "human_duration")]
    pub session_timeout: Duration,
    /// A connection whose client has read nothing for this long while we have data to
    /// send is dropped, with everything buffered for it. Default `30s`. Without it, a
    /// client that stops reading pins its buffered frames for as long as it likes.
    #[serde(with = "human_duration")]
    pub write_timeout: Duration,
    /// How long a handler waits for the client to answer a request the server sent it
    /// (sampling, elicitation, roots). Default `5m`. Without it, a client that never
    /// answers keeps the handler, and its session, busy forever.
    #[serde(with = "human_duration")]
    pub client_request_timeout: Duration,
    /// How long shutdown waits for open connections to finish. Default `10s`.
    #[serde(with = "human_duration")]
    pub shutdown_timeout: Duration,
    /// How long a connection may take to send a request's head: from when the server
    /// waits for one (a new connection, or an idle keep-alive one) to its last header.
    /// Default `10s`. Past it the connection is closed: silent, slowloris and idle
    /// connections do not hold a file descriptor for ever.
    #[serde(with = "human_duration")]
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive. Default `30s`; past it, 408.
    #[serde(with = "human_duration")]
    pub body_timeout: Duration,
    /// Longest `progressToken` a request may carry, in bytes (it is copied into every
    /// progress notification). Default 256; past it, -32602.
    pub max_progress_token_bytes: usize,
    /// Most connections open at once. Default 4096. Past it a new connection is answered
    /// 503 with `Retry-After` and closed, so file descriptors stay for the ones served.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 8080)),
            dns_rebinding_protection: true,
            allowed_hosts: ["localhost", "127.0.0.1", "[::1]"].map(String::from).into(),
            allowed_origins: [
                "http://localhost",
                "http://127.0.0.1",
                "http://[::1]",
                "https://localhost",
                "https://127.0.0.1",
                "https://[::1]",
            ]
            .map(String::from)
            .into(),
            max_body_bytes: 4 * 1024 * 1024,
            max_sessions: 10_000,
            max_sessions_per_client: 0,
            max_open_per_session: 64,
            session_timeout: Duration::from_secs(30 * 60),
            write_timeout: Duration::from_secs(30),
            client_request_timeout: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(10),
            header_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_progress_token_bytes: 256,
        }
    }
}

/// `[sse]`: the keys of the erlmcp design's SSE table, plus the per-connection buffer.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SseConfig {
    /// Answer requests with SSE streams and serve GET streams. Default true. When false,
    /// every request is answered with a single JSON body and GET gets 405.
    pub enabled: bool,
    /// The MCP endpoint path. Default `/mcp`.
    pub path: String,
    /// Interval between `: ping` comments on an open stream. Default `30s`.
    #[serde(with = "human_duration")]
    pub keepalive_interval: Duration,
    /// A stream with no event for this long is closed after a `retry:` hint, so the client
    /// polls back. Default `5m`. POST streams of clients older than 2025-11-25 are not
    /// closed for idleness before their response: those clients do not poll back.
    #[serde(with = "human_duration")]
    pub stream_timeout: Duration,
    /// The `retry:` value sent to clients: how long they wait before reconnecting.
    /// Default `5s`.
    #[serde(with = "human_duration")]
    pub retry_timeout: Duration,
    /// Events older than this are dropped from the store. Default `1h`.
    #[serde(with = "human_duration")]
    pub event_ttl: Duration,
    /// A `Last-Event-ID` issued longer ago than this is not honoured (no replay).
    /// Default `24h`.
    #[serde(with = "human_duration")]
    pub replay_window: Duration,
    /// Most events kept per session across its streams; the oldest go first. Default 10000.
    pub max_session_events: usize,
    /// Most payload bytes kept per session across its streams; the oldest go first (the
    /// newest event always stays). Default 16 MiB. Without it, large tool outputs times
    /// `max_session_events` can reach gigabytes per session.
    pub max_session_bytes: usize,
    /// Most events the in-memory store keeps across all sessions; past it the oldest of
    /// any session go first, down to nine tenths. Default 1,000,000.
    pub max_total_events: usize,
    /// Most payload bytes the in-memory store keeps across all sessions, likewise.
    /// Default 256 MiB: with the per-session caps alone, 10,000 sessions could keep 160 GiB.
    pub max_total_bytes: usize,
    /// Interval of the store's sweep of expired events. Default `5m`.
    #[serde(with = "human_duration")]
    pub cleanup_interval: Duration,
    /// Store events and honour `Last-Event-ID`. Default true. When false, frames carry no
    /// `id:` line, nothing is stored and `Last-Event-ID` is ignored.
    pub enable_replay: bool,
    /// Frames buffered per connection before the client counts as too slow and the
    /// connection is closed (it resumes from the store). Default 256.
    pub stream_buffer: usize,
    /// Bytes buffered per connection, within `stream_buffer` frames. A replay is written
    /// as the client reads it, within this budget; a live event that does not fit (or
    /// live events waiting behind a replay past it) make the client too slow: the
    /// connection is closed and the client resumes from the store. One event larger than
    /// the budget still goes out alone. Default 256 KiB. Without it, a resume of a 16 MiB
    /// stream that the client does not read held all 16 MiB in frames. Also the budget of
    /// a `tasks/stream` connection, from the task's log to the socket.
    pub stream_buffer_bytes: usize,
    /// Most connections following one request stream on a replica. A newer connection
    /// becomes the active one; older ones are parked and get only the stream's last event
    /// (the response). Past this many, the oldest parked one is closed with a `retry:`
    /// hint. Default 4. With 1, a newer connection closes the older at once, which makes
    /// clients that reconnect in the background while resuming close each other in turn.
    /// Also the most `tasks/stream` connections following one task on a replica: past it
    /// the oldest is closed with a `retry:` hint.
    pub max_connections_per_stream: usize,
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: "/mcp".into(),
            keepalive_interval: Duration::from_secs(30),
            stream_timeout: Duration::from_secs(300),
            retry_timeout: Duration::from_secs(5),
            event_ttl: Duration::from_secs(3600),
            replay_window: Duration::from_secs(86_400),
            max_session_events: 10_000,
            max_session_bytes: 16 * 1024 * 1024,
            max_total_events: 1_000_000,
            max_total_bytes: 256 * 1024 * 1024,
            cleanup_interval: Duration::from_secs(300),
            enable_replay: true,
            stream_buffer: 256,
            stream_buffer_bytes: 256 * 1024,
            max_connections_per_stream: 4,
        }
    }
}

/// Which event-store and session backend to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    /// In this process: nothing to run beside it, nothing shared.
    #[default]
    Memory,
    /// In Redis: any replica serves any session and resumes any stream.
    Redis,
}

/// `[store]`: the backend of the event store and of shared sessions.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// `memory` (default) or `redis`.
    pub backend: BackendKind,
    /// Redis URL, e.g. `redis://127.0.0.1:6379/0` or `redis://:password@host:6379`.
    /// Default `redis://127.0.0.1:6379`.
    pub redis_url: String,
    /// `redis_url` (and `redis_nodes`) are nodes of a Redis Cluster: connect with the
    /// cluster client, which finds the other nodes and routes each command by its keys.
    /// Default false.
    pub redis_cluster: bool,
    /// More seed nodes of the cluster, besides `redis_url` (any one that answers is
    /// enough). Default none.
    pub redis_nodes: Vec<String>,
    /// Prefix of every Redis key and channel, so several deployments can share one Redis.
    /// Default `otpmcp`.
    pub key_prefix: String,
    /// Longest wait for a connection to Redis. Default `2s`.
    #[serde(with = "human_duration")]
    pub connect_timeout: Duration,
    /// Longest wait for one Redis command; a command that takes longer counts as a
    /// failure. Default `2s`.
    #[serde(with = "human_duration")]
    pub command_timeout: Duration,
    /// After a failed Redis command, events are delivered live without being stored for
    /// this long before Redis is tried again, so an outage costs no waiting per event.
    /// Default `1s`.
    #[serde(with = "human_duration")]
    pub retry_interval: Duration,
    /// Both connections to Redis are pinged this often; one that does not answer within
    /// `command_timeout` trips the breaker and is replaced. Default `5s`. Without it, a
    /// connection dropped silently by a NAT or a firewall (half-open) is never noticed:
    /// commands time out for ever and the pub/sub feed goes quiet.
    #[serde(with = "human_duration")]
    pub ping_interval: Duration,
    /// TCP keepalive on the connections to Redis: probes start after this much silence,
    /// so the kernel notices a peer that vanished. Default `15s`.
    #[serde(with = "human_duration")]
    pub tcp_keepalive: Duration,
    /// A replica renews its lease on its running requests this often; another replica
    /// answers them with an error once the lease is `lease_ttl` old. Default `10s`.
    #[serde(with = "human_duration")]
    pub lease_ttl: Duration,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            backend: BackendKind::Memory,
            redis_url: "redis://127.0.0.1:6379".into(),
            redis_cluster: false,
            redis_nodes: Vec::new(),
            key_prefix: "otpmcp".into(),
            connect_timeout: Duration::from_secs(2),
            command_timeout: Duration::from_secs(2),
            retry_interval: Duration::from_secs(1),
            ping_interval: Duration::from_secs(5),
            tcp_keepalive: Duration::from_secs(15),
            lease_ttl: Duration::from_secs(10),
        }
    }
}

/// `[supervisor]`: OTP restart intensity of the root supervisor.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Restarts allowed within `max_window` before the supervisor gives up and the process
    /// exits non-zero. Default 3.
    pub max_restarts: u32,
    /// The intensity window. Default `5s`.
    #[serde(with = "human_duration")]
    pub max_window: Duration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            max_window: Duration::from_secs(5),
        }
    }
}

/// `[telemetry]`: logs and traces.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// `service.name` of exported spans. Default `otpmcp`.
    pub service_name: String,
    /// OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`. Empty (default):
    /// no export, readable logs on stderr only.
    pub otlp_endpoint: String,
    /// Log filter in `tracing` target syntax, e.g. `info,otpmcp=debug`. Default `info`.
    pub log_filter: String,
    /// OTLP/HTTP metrics endpoint. Empty (default): beside the traces, the traces
    /// endpoint with `/v1/traces` replaced by `/v1/metrics`; no export without either.
    pub otlp_metrics_endpoint: String,
    /// How often metrics are exported over OTLP. Default `10s`.
    #[serde(with = "human_duration")]
    pub metrics_interval: Duration,
}

impl TelemetryConfig {
    /// Where metrics go over OTLP, if anywhere.
    pub fn metrics_endpoint(&self) -> Option<String> {
        if !self.otlp_metrics_endpoint.is_empty() {
            return Some(self.otlp_metrics_endpoint.clone());
        }
        let traces = self.otlp_endpoint.trim_end_matches('/');
        if traces.is_empty() {
            return None;
        }
        Some(match traces.strip_suffix("/v1/traces") {
            Some(base) => format!("{base}/v1/metrics"),
            None => format!("{traces}/v1/metrics"),
        })
    }
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            service_name: "otpmcp".into(),
            otlp_endpoint: String::new(),
            log_filter: "info".into(),
            otlp_metrics_endpoint: String::new(),
            metrics_interval: Duration::from_secs(10),
        }
    }
}

/// `[stateless]`: what 2026-07-28 requests need beyond the handlers.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatelessConfig {
    /// Secret that signs `requestState` (HMAC-SHA256), so a client cannot forge what a
    /// multi round-trip request has learned. Every replica must share it. Empty (default):
    /// a random key per process, which is right for one process; with Redis, set it, or a
    /// retry that reaches another replica is refused.
    pub request_state_key: String,
    /// How long a `requestState` is accepted after it was issued. Default `10m`.
    #[serde(with = "human_duration")]
    pub request_state_ttl: Duration,
    /// `ttlMs` on lists and reads: how long a client may reuse them. Default `0s` (ask
    /// every time; listen streams announce changes anyway).
    #[serde(with = "human_duration")]
    pub cache_ttl: Duration,
    /// `cacheScope`: `public` (the same for every user) or `private`. Default `public`.
    pub cache_scope: String,
    /// Most listen notifications kept for a listener that has fallen behind; past it, its
    /// stream ends and the client listens again. Default 1024.
    pub listen_backlog: usize,
    /// Most `subscriptions/listen` streams open at once on this replica; past it a new one
    /// gets 503. Default 10000. Without it, clients could hold connections and their
    /// buffers without bound.
    pub max_listen_streams: usize,
}

impl Default for StatelessConfig {
    fn default() -> Self {
        Self {
            request_state_key: String::new(),
            request_state_ttl: Duration::from_secs(600),
            cache_ttl: Duration::ZERO,
            cache_scope: "public".into(),
            listen_backlog: 1024,
            max_listen_streams: 10_000,
        }
    }
}

/// `[admin]`: the admin listener (`/healthz`, `/readyz`, `/metrics`, `/dashboard`), on a
/// socket of its own.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AdminConfig {
    /// Serve it. Default false: nothing listens beyond the MCP endpoint.
    pub enabled: bool,
    /// Where. Default `127.0.0.1:9464`: loopback, so the probes are not reachable from
    /// the network unless you ask for it (`allow_remote`).
    pub bind: SocketAddr,
    /// Let `bind` be an address other than loopback. Default false: such a `bind` is
    /// refused at start-up, since the listener has no authentication of its own.
    pub allow_remote: bool,
    /// Host names (port ignored) accepted in `Host`, as `server.allowed_hosts`; empty:
    /// any. Default: localhost, 127.0.0.1, [::1].
    pub allowed_hosts: Vec<String>,
    /// Origins (scheme://host, port ignored) accepted in `Origin`; requests without one
    /// (probes, Prometheus) pass. Default: http(s) on localhost, 127.0.0.1, [::1].
    pub allowed_origins: Vec<String>,
    /// How often `/dashboard` gets a new snapshot. Default `1s`.
    #[serde(with = "human_duration")]
    pub dashboard_interval: Duration,
    /// Snapshots kept for a dashboard that (re)connects: it gets those after its
    /// `Last-Event-ID`, or all of them. Default 300 (five minutes at `1s`).
    pub dashboard_history: usize,
    /// Serve `POST /fault/panic/{child}`, which makes an actor panic, for soaks and
    /// drills. Default false. Anyone who reaches the admin listener can then crash actors.
    pub fault_injection: bool,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            bind: SocketAddr::from(([127, 0, 0, 1], 9464)),
            allow_remote: false,
            allowed_hosts: ServerConfig::default().allowed_hosts,
            allowed_origins: ServerConfig::default().allowed_origins,
            dashboard_interval: Duration::from_secs(1),
            dashboard_history: 300,
            fault_injection: false,
        }
    }
}

/// `[tasks]`: long-running tool calls a client polls (`tasks/get`) instead of waiting.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// How long a task (and its result) is kept from its creation (`ttlMs`); after it a
    /// task that still works is stopped, and its record, like a finished one's, dropped.
    /// Default `1h`.
    #[serde(with = "human_duration")]
    pub ttl: Duration,
    /// The poll interval suggested to clients (`pollIntervalMs`). Default `1s`.
    #[serde(with = "human_duration")]
    pub poll_interval: Duration,
    /// Most task records the in-memory store keeps at once; past it a new task is refused
    /// (-32603). Redis keeps as many as it has memory for. Default 10000.
    pub max_tasks: usize,
    /// Most tasks running on this replica at once; past it a new task is refused. Default
    /// 1000.
    pub max_running: usize,
    /// When a replica dies, run its tasks whose tools are declared re-runnable again (once)
    /// on another replica, instead of ending them `failed`. Default true.
    pub rerun_lost: bool,
}

impl Default for TasksConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(3600),
            poll_interval: Duration::from_secs(1),
            max_tasks: 10_000,
            max_running: 1000,
            rerun_lost: true,
        }
    }
}

impl Config {
    /// Loads `sys.toml` from `dir` (if present), then `overlays` in order, then the
    /// environment, and validates the result.
    pub fn load(dir: &Path, overlays: &[PathBuf]) -> Result<Self, ConfigError> {
        Self::load_with_env(dir, overlays, std::env::vars())
    }

    /// [`Config::load`] with an explicit environment, for tests.
    pub fn load_with_env(
        dir: &Path,
        overlays: &[PathBuf],
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, ConfigError> {
        let mut builder = config::Config::builder().add_source(
            config::File::from(dir.join(DEFAULT_FILE))
                .format(config::FileFormat::Toml)
                .required(false),
        );
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
                .with_list_parse_key("admin.allowed_hosts")
                .with_list_parse_key("admin.allowed_origins")
                .with_list_parse_key("store.redis_nodes")
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
    /// assert_eq!(config.server.max_sessions, 5);
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

    /// Checks the relations serde cannot: non-zero intervals, a usable path.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key, problem: &str| {
            Err(ConfigError::Invalid {
                key,
                problem: problem.into(),
            })
        };
        let s = &self.sse;
        if !s.path.starts_with('/') {
            return invalid("sse.path", "must start with '/'");
        }
        if !matches!(self.stateless.cache_scope.as_str(), "public" | "private") {
            return invalid("stateless.cache_scope", "must be `public` or `private`");
        }
        if self.sse.max_total_events == 0 || self.sse.max_total_bytes == 0 {
            return invalid(
                "sse.max_total_events",
                "and sse.max_total_bytes must be at least 1",
            );
        }
        if self.server.max_connections == 0 {
            return invalid("server.max_connections", "must be at least 1");
        }
        if self.admin.dashboard_interval.is_zero() {
            return invalid("admin.dashboard_interval", "must be more than zero");
        }
        if self.admin.dashboard_history == 0 {
            return invalid("admin.dashboard_history", "must be at least 1");
        }
        if self.admin.enabled && !self.admin.bind.ip().is_loopback() && !self.admin.allow_remote {
            return invalid(
                "admin.bind",
                "is not a loopback address: the admin listener has no authentication (set admin.allow_remote = true to allow it)",
            );
        }
        if self.stateless.listen_backlog == 0 {
            return invalid("stateless.listen_backlog", "must be at least 1");
        }
        if self.stateless.max_listen_streams == 0 {
            return invalid("stateless.max_listen_streams", "must be at least 1");
        }
        if self.tasks.max_tasks == 0 || self.tasks.max_running == 0 {
            return invalid(
                "tasks.max_tasks",
                "and tasks.max_running must be at least 1",
            );
        }
        let non_zero: [(&'static str, Duration); 20] = [
            ("tasks.ttl", self.tasks.ttl),
            ("tasks.poll_interval", self.tasks.poll_interval),
            (
                "stateless.request_state_ttl",
                self.stateless.request_state_ttl,
            ),
            (
                "server.client_request_timeout",
                self.server.client_request_timeout,
            ),
            ("server.write_timeout", self.server.write_timeout),
            ("server.header_timeout", self.server.header_timeout),
            ("server.body_timeout", self.server.body_timeout),
            ("sse.keepalive_interval", s.keepalive_interval),
            ("sse.stream_timeout", s.stream_timeout),
            ("sse.event_ttl", s.event_ttl),
            ("sse.replay_window", s.replay_window),
            ("sse.cleanup_interval", s.cleanup_interval),
            ("server.session_timeout", self.server.session_timeout),
            ("supervisor.max_window", self.supervisor.max_window),
            ("store.connect_timeout", self.store.connect_timeout),
            ("store.command_timeout", self.store.command_timeout),
            ("store.retry_interval", self.store.retry_interval),
            ("store.ping_interval", self.store.ping_interval),
            ("store.tcp_keepalive", self.store.tcp_keepalive),
            ("store.lease_ttl", self.store.lease_ttl),
        ];
        for (key, value) in non_zero {
            if value.is_zero() {
                return invalid(key, "must be greater than zero");
            }
        }
        if s.max_session_events == 0 {
            return invalid("sse.max_session_events", "must be at least 1");
        }
        if s.max_connections_per_stream == 0 {
            return invalid("sse.max_connections_per_stream", "must be at least 1");
        }
        if s.stream_buffer_bytes == 0 {
            return invalid("sse.stream_buffer_bytes", "must be at least 1");
        }
        if s.stream_buffer == 0 {
            return invalid("sse.stream_buffer", "must be at least 1");
        }
        if self.server.max_sessions == 0 {
            return invalid("server.max_sessions", "must be at least 1");
        }
        if self.server.max_open_per_session == 0 {
            return invalid("server.max_open_per_session", "must be at least 1");
        }
        if self.store.backend == BackendKind::Redis {
            if redis::Client::open(self.store.redis_url.as_str()).is_err() {
                return invalid(
                    "store.redis_url",
                    "is not a redis:// or unix:// URL (TLS, rediss://, is not built in)",
                );
            }
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
            Some((name, _)) => Err(ConfigError::Invalid {
                key: "exec.programs",
                problem: format!(
                    "`{name}`: with auth.enabled, set `uid` (a user of its own) or `run_as_server_user = true` (it can then read what the server's user can)"
                ),
            }),
            None => Ok(()),
        }
    }
}

/// Parses `150ms`, `30s`, `5m`, `1h`, `1d`, or a bare number of milliseconds.
///
/// ```
/// use std::time::Duration;
/// use otpmcp::config::parse_duration;
///
/// assert_eq!(parse_duration("150ms"), Ok(Duration::from_millis(150)));
/// assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
/// assert!(parse_duration("soon").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(format!(
            "{text:?} is not a duration (try \"30s\" or \"150ms\")"
        ));
    }
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is too large"))?;
    let ms_per = match unit.trim() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?} (use ms, s, m, h or d)"
            ));
        }
    };
    n.checked_mul(ms_per)
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too large"))
}

/// Serde glue: durations are written as human-readable strings (or integer milliseconds).
mod human_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Millis(u64),
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        match Raw::deserialize(d)? {
            Raw::Text(text) => super::parse_duration(&text).map_err(serde::de::Error::custom),
            Raw::Millis(ms) => Ok(Duration::from_millis(ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_every_unit() {
        let ms = Duration::from_millis;
        let cases = [
            ("150ms", Ok(ms(150))),
            ("30s", Ok(ms(30_000))),
            ("5m", Ok(ms(300_000))),
            ("1h", Ok(ms(3_600_000))),
            ("1d", Ok(ms(86_400_000))),
            ("250", Ok(ms(250))),
            (" 2s ", Ok(ms(2_000))),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), want, "{text}");
        }
        for bad in [
            "",
            "s",
            "ten seconds",
            "5 weeks",
            "-1s",
            "1.5s",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be rejected");
        }
    }

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
        assert_eq!(c.sse.keepalive_interval, Duration::from_secs(30));
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
        assert_eq!(c.sse.keepalive_interval, Duration::from_millis(150));
        assert!(!c.sse.enable_replay);
        assert_eq!(c.server.allowed_hosts, ["example.com", "localhost"]);
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
            (
                "OTPMCP__SSE__MAX_SESSION_EVENTS",
                "lots",
                "max_session_events",
            ),
            ("OTPMCP__SSE__PATH", "mcp", "sse.path"),
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
}
