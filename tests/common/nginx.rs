//! Debian's nginx for the tests that run `deploy/nginx/otpmcp.conf` (installed by
//! `scripts/test`).

use std::path::Path;
use std::process::Command;

/// The nginx command: Debian puts it in /usr/sbin, which a user's PATH may lack.
pub fn command() -> Command {
    let nginx = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .unwrap_or("nginx");
    Command::new(nginx)
}

/// A main configuration that keeps everything under `prefix` and includes `site` in its
/// `http` block; in the foreground when `foreground`.
pub fn main_conf(prefix: &Path, site: &Path, foreground: bool) -> String {
    let prefix = prefix.display();
    let daemon = if foreground { "daemon off;\n" } else { "" };
    format!(
        "{daemon}pid {prefix}/nginx.pid;\nerror_log {prefix}/error.log;\nevents {{}}\nhttp {{\n    access_log off;\n    client_body_temp_path {prefix}/body;\n    proxy_temp_path {prefix}/proxy;\n    include {};\n}}\n",
        site.display()
    )
}

/// nginx with the recommended configuration, its upstreams and port rewritten.
pub struct Nginx {
    child: std::process::Child,
    pub url: String,
}

impl Nginx {
    /// nginx in front of the replicas on `replicas` (at most three, the shipped
    /// upstreams), on a free port of 127.0.0.1.
    pub async fn start(replicas: &[u16]) -> Self {
        // Tests of one binary may each start one: a folder each.
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("otpmcp-nginx-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/nginx/otpmcp.conf");
        let mut site = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{e}"));
        // Fewer replicas than the shipped three: the rest of the upstreams name them again.
        for (n, port) in replicas.iter().cycle().take(3).enumerate() {
            let shipped = format!("127.0.0.1:{}", 8081 + n);
            assert!(site.contains(&shipped), "the shipped upstream {shipped}");
            site = site.replace(&shipped, &format!("127.0.0.1:{port}"));
        }
        let port = super::redis::free_port();
        assert!(site.contains("listen 8080;"));
        site = site.replace("listen 8080;", &format!("listen 127.0.0.1:{port};"));
        std::fs::write(dir.join("otpmcp.conf"), site).unwrap_or_else(|e| panic!("{e}"));
        let main = main_conf(&dir, &dir.join("otpmcp.conf"), true);
        std::fs::write(dir.join("nginx.conf"), main).unwrap_or_else(|e| panic!("{e}"));
        let child = command()
            .arg("-p")
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("nginx (./scripts/test installs Debian's): {e}"));
        let addr = format!("127.0.0.1:{port}");
        super::eventually("nginx to listen", || async {
            tokio::net::TcpStream::connect(&addr).await.ok().map(drop)
        })
        .await;
        Self {
            child,
            url: format!("http://{addr}/mcp"),
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        super::stop(&mut self.child);
    }
}
