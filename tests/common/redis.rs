//! A real `redis-server` of the test's own, on a free loopback port, that the test can
//! kill and restart.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::WAIT;

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
    persistent: bool,
    /// A node of a Redis Cluster: the port of its cluster bus.
    bus: Option<u16>,
    /// More arguments for redis-server (`--replicaof`).
    extra: Vec<String>,
    /// How clients must reach it: TLS only, an ACL user.
    secured: Secured,
}

/// A CA, a server certificate for 127.0.0.1 and localhost, and a client certificate:
/// the files tests/fixtures/make made with `openssl` (committed, so that the tests need no
/// openssl).
pub struct Certs {
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tls")
        .join(path)
}

impl Certs {
    /// The tests' CA and the certificates it signed.
    pub fn make() -> Arc<Self> {
        Arc::new(Self {
            ca: fixture("main/ca.crt"),
            server_cert: fixture("main/server.crt"),
            server_key: fixture("main/server.key"),
            client_cert: fixture("main/client.crt"),
            client_key: fixture("main/client.key"),
        })
    }

    /// A second CA, which signed none of [`Certs::make`]'s certificates.
    pub fn other_ca() -> PathBuf {
        fixture("other/ca.crt")
    }
}

/// What a client needs to reach a server: TLS (the server listens on its TLS port only)
/// and whether it asks for the client's certificate; an ACL user (the default user off).
#[derive(Clone, Default)]
pub struct Secured {
    pub tls: Option<Arc<Certs>>,
    pub client_auth: bool,
    pub user: Option<(String, String)>,
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port: {e}"))
}

/// The data directory of the redis-server answering on `port`, if one answers.
fn dir_of(port: u16) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(b"CONFIG GET dir\r\n").ok()?;
    // The reply is an array of two bulk strings: five CRLFs in all, perhaps in pieces.
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while reply.windows(2).filter(|w| w == b"\r\n").count() < 5 {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&reply).into_owned())
}

impl RedisServer {
    /// A throwaway server that keeps nothing on disk.
    pub fn start() -> Self {
        Self::launch(false)
    }

    /// A server that writes every change to its append-only file before answering, so a
    /// kill -9 loses nothing it acknowledged.
    pub fn start_persistent() -> Self {
        Self::launch(true)
    }

    fn launch(persistent: bool) -> Self {
        Self::launch_as(persistent, false, &[])
    }

    /// A throwaway server reached only as `secured` says (over TLS with no plain port,
    /// with an ACL user and the default user off).
    pub fn start_secured(secured: Secured) -> Self {
        for _ in 0..20 {
            if let Some(server) = Self::try_launch_secured(false, false, &[], secured.clone()) {
                return server;
            }
        }
        panic!("could not start a redis-server of our own");
    }

    /// A replica of `primary`, which it has finished copying when this returns.
    pub fn start_replica_of(primary: &RedisServer) -> Self {
        Self::start_replica_at(primary.port)
    }

    /// A replica of the primary reached at `port` (perhaps through a relay).
    pub fn start_replica_at(port: u16) -> Self {
        let port = port.to_string();
        let replica = Self::launch_as(false, false, &["--replicaof", "127.0.0.1", &port]);
        replica.wait_for_link();
        replica
    }

    /// Waits until this replica's link to its primary is up.
    pub fn wait_for_link(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let info = ask(self.port, "INFO replication", |r| {
                r.contains("master_repl_offset")
            })
            .unwrap_or_default();
            if info.contains("master_link_status:up") {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the replica did not sync: {info}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits (Redis's `WAIT`) until `replicas` replicas have every write made so far.
    pub fn wait_replicated(&self, replicas: usize) {
        let reply = ask(self.port, &format!("WAIT {replicas} 5000"), |r| {
            r.ends_with("\r\n")
        })
        .unwrap_or_default();
        assert_eq!(
            reply.trim(),
            format!(":{replicas}"),
            "replicated before the kill"
        );
    }

    /// Whether this server holds `key` (a cluster node answers `MOVED` for another's).
    pub fn holds(&self, key: &str) -> bool {
        ask(self.port, &format!("EXISTS {key}"), |r| r.ends_with("\r\n"))
            .is_some_and(|r| r.trim() == ":1")
    }

    /// `role:master` or `role:slave`, as `INFO replication` says (`None`: no answer).
    pub fn role(&self) -> Option<String> {
        let info = ask(self.port, "INFO replication", |r| {
            r.contains("master_repl_offset")
        })?;
        info.lines()
            .find(|l| l.starts_with("role:"))
            .map(|l| l.trim().to_owned())
    }

    fn launch_as(persistent: bool, cluster: bool, extra: &[&str]) -> Self {
        // Another test may take the free port first: then the server that answers is not
        // ours (its data directory tells), and we try another port.
        for _ in 0..20 {
            if let Some(server) = Self::try_launch(persistent, cluster, extra) {
                return server;
            }
        }
        panic!("could not start a redis-server of our own");
    }

    fn try_launch(persistent: bool, cluster: bool, extra: &[&str]) -> Option<Self> {
        Self::try_launch_secured(persistent, cluster, extra, Secured::default())
    }

    fn try_launch_secured(
        persistent: bool,
        cluster: bool,
        extra: &[&str],
        secured: Secured,
    ) -> Option<Self> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("otpmcp-redis-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("redis dir: {e}"));
        let mut server = Self {
            child: None,
            port,
            dir,
            persistent,
            bus: cluster.then(free_port),
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
            secured,
        };
        server.spawn().then_some(server)
    }

    /// Starts the server; false if the one answering on the port is not ours.
    fn spawn(&mut self) -> bool {
        let port = self.port.to_string();
        let mut cmd = Command::new("redis-server");
        match &self.secured.tls {
            None => cmd.args(["--port", &port]),
            Some(certs) => cmd
                .args(["--port", "0", "--tls-port", &port])
                .arg("--tls-cert-file")
                .arg(&certs.server_cert)
                .arg("--tls-key-file")
                .arg(&certs.server_key)
                .arg("--tls-ca-cert-file")
                .arg(&certs.ca)
                .arg("--tls-auth-clients")
                .arg(if self.secured.client_auth {
                    "yes"
                } else {
                    "no"
                }),
        };
        if let Some((user, pass)) = &self.secured.user {
            cmd.args([
                "--user",
                user,
                "on",
                &format!(">{pass}"),
                "~*",
                "&*",
                "+@all",
            ])
            .args(["--user", "default", "off"]);
        }
        cmd.args(["--bind", "127.0.0.1", "--save", ""])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--protected-mode", "no", "--loglevel", "warning"]);
        if self.persistent {
            cmd.args(["--appendonly", "yes", "--appendfsync", "always"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        if let Some(bus) = self.bus {
            cmd.args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--cluster-config-file", "nodes.conf"])
                .args(["--cluster-port", &bus.to_string()]);
        }
        cmd.args(&self.extra);
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("redis-server did not start (is it on PATH?): {e}"));
        self.child = Some(child);
        let deadline = Instant::now() + WAIT;
        let ours = self.dir.to_string_lossy().into_owned();
        loop {
            if let Some(dir) = self.dir_of() {
                if dir.contains(&ours) {
                    return true;
                }
                self.kill();
                return false;
            }
            let exited = self
                .child
                .as_mut()
                .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
            if exited {
                self.child = None;
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The data directory as this server says, asked as its clients must.
    fn dir_of(&self) -> Option<String> {
        if self.secured.tls.is_none() && self.secured.user.is_none() {
            return dir_of(self.port);
        }
        self.cli(&["CONFIG", "GET", "dir"])
            .filter(|said| said.contains("dir"))
    }

    /// The reply to `command` by `redis-cli`, connected as this server's clients must
    /// (`None`: it could not connect or the command failed).
    fn cli(&self, command: &[&str]) -> Option<String> {
        let mut cli = Command::new("redis-cli");
        cli.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        if let Some(certs) = &self.secured.tls {
            cli.arg("--tls").arg("--cacert").arg(&certs.ca);
            cli.arg("--cert").arg(&certs.client_cert);
            cli.arg("--key").arg(&certs.client_key);
        }
        if let Some((user, pass)) = &self.secured.user {
            cli.args(["--user", user, "--pass", pass]);
        }
        let out = cli
            .args(command)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        (out.status.success() && !said.starts_with("ERR")).then_some(said)
    }

    pub fn url(&self) -> String {
        let scheme = if self.secured.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        let user = match &self.secured.user {
            Some((user, pass)) => format!("{user}:{pass}@"),
            None => String::new(),
        };
        format!("{scheme}://{user}127.0.0.1:{}", self.port)
    }

    /// The `[store]` settings (as environment variables) that reach this server: its URL,
    /// and over TLS its CA and the client's certificate where it asks for one.
    pub fn store_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![("OTPMCP__STORE__REDIS_URL", self.url())];
        if let Some(certs) = &self.secured.tls {
            let path = |p: &Path| p.display().to_string();
            env.push(("OTPMCP__STORE__REDIS_CA_FILE", path(&certs.ca)));
            if self.secured.client_auth {
                env.push(("OTPMCP__STORE__REDIS_CLIENT_CERT", path(&certs.client_cert)));
                env.push(("OTPMCP__STORE__REDIS_CLIENT_KEY", path(&certs.client_key)));
            }
        }
        env
    }

    /// Sets `store`'s URL and TLS files to reach this server.
    pub fn configure(&self, store: &mut otpmcp::config::StoreConfig) {
        store.redis_url = self.url().into();
        if let Some(certs) = &self.secured.tls {
            store.redis_ca_file.clone_from(&certs.ca);
            if self.secured.client_auth {
                store.redis_client_cert.clone_from(&certs.client_cert);
                store.redis_client_key.clone_from(&certs.client_key);
            }
        }
    }

    /// kill -9: no chance to save anything it had not written yet.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port with the same data directory.
    pub fn restart(&mut self) {
        self.kill();
        assert!(
            self.spawn(),
            "port {} was taken while our redis-server was down",
            self.port
        );
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The reply of one inline command to the server on `port`, read until `done` says it is
/// whole; `None` if nothing answers.
fn ask(port: u16, command: &str, done: impl Fn(&str) -> bool) -> Option<String> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_millis(500))).ok()?;
    s.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while !done(&String::from_utf8_lossy(&reply)) {
        let n = s.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
    }
    Some(String::from_utf8_lossy(&reply).into_owned())
}

/// A Redis Cluster of three primaries of the test's own, on free ports, its slots spread
/// over the three by `redis-cli --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    pub fn start() -> Self {
        Self::start_with(0)
    }

    /// Three primaries, each with `replicas` replicas that take over when it fails.
    pub fn start_with(replicas: usize) -> Self {
        // With replicas, a dead primary is noticed sooner, so its failover fits a test.
        let timeout: &[&str] = if replicas > 0 {
            &["--cluster-node-timeout", "1000"]
        } else {
            &[]
        };
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| RedisServer::launch_as(false, true, timeout))
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let created = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("redis-cli did not start (is it on PATH?): {e}"));
        assert!(
            created.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&created.stdout)
        );
        let cluster = Self { nodes };
        cluster.wait_until_ok(&cluster.nodes.iter().collect::<Vec<_>>());
        for node in &cluster.nodes {
            if node.role().as_deref() == Some("role:slave") {
                node.wait_for_link();
            }
        }
        cluster
    }

    /// Waits until each of `nodes` agrees that all slots are served (and, as the cluster
    /// is created, knows every node).
    pub fn wait_until_ok(&self, nodes: &[&RedisServer]) {
        let known = format!("cluster_known_nodes:{}", self.nodes.len());
        let deadline = Instant::now() + WAIT;
        for node in nodes {
            loop {
                let info = ask(node.port, "CLUSTER INFO", |r| {
                    r.contains("cluster_stats_messages")
                })
                .unwrap_or_default();
                if info.contains("cluster_state:ok") && info.contains(&known) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "the cluster is not serving every slot: {info}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// The first node, as the seed a client connects to.
    pub fn url(&self) -> String {
        self.nodes[0].url()
    }

    /// The other nodes, as further seeds.
    pub fn other_urls(&self) -> Vec<String> {
        self.nodes[1..].iter().map(RedisServer::url).collect()
    }
}

/// What replicas share: one redis-server, or a cluster.
pub trait SharedRedis {
    /// `store.redis_url`, `store.redis_cluster` and `store.redis_nodes` for it.
    fn target(&self) -> (String, bool, Vec<String>);

    /// More `[store]` settings, as environment variables (the TLS files).
    fn more_env(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
}

impl SharedRedis for RedisServer {
    fn target(&self) -> (String, bool, Vec<String>) {
        (self.url(), false, Vec::new())
    }

    fn more_env(&self) -> Vec<(&'static str, String)> {
        self.store_env()
            .into_iter()
            .filter(|(k, _)| *k != "OTPMCP__STORE__REDIS_URL")
            .collect()
    }
}

impl SharedRedis for RedisCluster {
    fn target(&self) -> (String, bool, Vec<String>) {
        (self.url(), true, self.other_urls())
    }
}

/// A Redis Sentinel of the test's own (`redis-server --sentinel`) that monitors `primary`
/// as `mymaster`, with quorum 1 and a 500 ms down-after, so a killed primary is failed
/// over to its replica within a few seconds.
pub struct Sentinel {
    server: RedisServer,
}

/// The name the test sentinels monitor their primary under.
pub const SENTINEL_SERVICE: &str = "mymaster";

impl Sentinel {
    /// Starts a sentinel and waits until it knows `primary` and `replicas` replicas of it.
    pub fn start(primary: &RedisServer, replicas: usize) -> Self {
        Self::start_with(primary, replicas, None)
    }

    /// A sentinel answering over TLS only, that reaches `primary` (a TLS server that
    /// does not ask for client certificates) over TLS, with `certs`.
    pub fn start_tls(primary: &RedisServer, certs: Arc<Certs>) -> Self {
        Self::start_with(primary, 0, Some(certs))
    }

    fn start_with(primary: &RedisServer, replicas: usize, tls: Option<Arc<Certs>>) -> Self {
        let port = free_port();
        let dir =
            std::env::temp_dir().join(format!("otpmcp-sentinel-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("sentinel dir: {e}"));
        // The sentinel rewrites its file as it learns the topology: it must be its own.
        let conf = dir.join("sentinel.conf");
        let ports = match &tls {
            None => format!("port {port}\n"),
            Some(certs) => format!(
                "port 0\ntls-port {port}\ntls-replication yes\ntls-auth-clients no\n\
                 tls-cert-file {}\ntls-key-file {}\ntls-ca-cert-file {}\n",
                certs.server_cert.display(),
                certs.server_key.display(),
                certs.ca.display()
            ),
        };
        let text = format!(
            "{ports}bind 127.0.0.1\nprotected-mode no\ndir {dir}\nloglevel warning\n\
             sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary} 1\n\
             sentinel down-after-milliseconds {SENTINEL_SERVICE} 500\n\
             sentinel failover-timeout {SENTINEL_SERVICE} 5000\n",
            dir = dir.display(),
            primary = primary.port,
        );
        std::fs::write(&conf, text).unwrap_or_else(|e| panic!("sentinel.conf: {e}"));
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("redis-server --sentinel did not start: {e}"));
        let sentinel = Self {
            server: RedisServer {
                child: Some(child),
                port,
                dir,
                persistent: false,
                bus: None,
                extra: Vec::new(),
                secured: Secured {
                    tls: tls.clone(),
                    ..Secured::default()
                },
            },
        };
        let deadline = Instant::now() + WAIT;
        let count = replicas.to_string();
        let slaves = format!("num-slaves\r\n${}\r\n{count}\r\n", count.len());
        loop {
            let (said, ready) = if tls.is_some() {
                // Over TLS, through redis-cli: that the sentinel sees the primary up.
                let said = sentinel
                    .server
                    .cli(&["SENTINEL", "master", SENTINEL_SERVICE])
                    .unwrap_or_default();
                let ready = said.contains("flags\nmaster\n");
                (said, ready)
            } else {
                let said = ask(port, &format!("SENTINEL master {SENTINEL_SERVICE}"), |r| {
                    r.contains("quorum")
                })
                .unwrap_or_default();
                let ready = said.contains(&slaves);
                (said, ready)
            };
            if ready {
                return sentinel;
            }
            assert!(
                Instant::now() < deadline,
                "the sentinel on {port} does not see the primary and its replicas: {said}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The port of the server the sentinel names as primary now.
    pub fn primary_port(&self) -> Option<u16> {
        let said = ask(
            self.server.port,
            &format!("SENTINEL get-master-addr-by-name {SENTINEL_SERVICE}"),
            |r| r.matches("\r\n").count() >= 5,
        )?;
        said.lines().nth(4)?.trim().parse().ok()
    }
}

/// The binary (default tools: `stream_events` may run as a task and run again) with the
/// shipped Redis overlay on `redis`, a short lease, and `tasks.rerun_lost`.
pub async fn binary_on(redis: &RedisServer, rerun_lost: bool) -> super::Binary {
    let url = redis.url();
    let rerun = rerun_lost.to_string();
    super::Binary::start(
        &[
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
        ],
        &[
            ("OTPMCP__STORE__REDIS_URL", url.as_str()),
            ("OTPMCP__STORE__LEASE_TTL", "1s"),
            ("OTPMCP__TASKS__RERUN_LOST", rerun.as_str()),
        ],
    )
    .await
}
