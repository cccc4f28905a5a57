//! The deployment examples stay true: the Kubernetes manifest's configuration loads with
//! otpmcp's own loader and its timings fit the drain, it runs the image `scripts/image`
//! builds for this version, and the nginx configuration passes `nginx -t` (Debian's
//! nginx, installed by `scripts/test`). `scripts/image --test` checks that image serves.

use std::path::{Path, PathBuf};
use std::time::Duration;

use otpmcp::Config;

mod common;

/// An empty directory of this test's own, under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("otpmcp-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The integer after `key:` on the first line (after `after`, if given) that has it.
fn number_after(text: &str, after: Option<&str>, key: &str) -> u64 {
    let start = after.map_or(0, |marker| {
        text.find(marker)
            .unwrap_or_else(|| panic!("the manifest has no `{marker}`"))
    });
    text[start..]
        .lines()
        .find_map(|line| line.trim().strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{key}` with a number after {after:?}"))
}

/// The ConfigMap's `otpmcp.toml`, unindented.
fn config_map_toml(manifest: &str) -> String {
    let mut lines = manifest
        .lines()
        .skip_while(|line| line.trim() != "otpmcp.toml: |");
    lines.next();
    lines
        .take_while(|line| line.is_empty() || line.starts_with("    "))
        .map(|line| line.get(4..).unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The configuration a replica of the manifest loads: its ConfigMap as the overlay, and
/// every variable it sets (a stand-in for the secret's value).
fn manifest_config(manifest: &str, name: &str) -> Config {
    let dir = scratch(name);
    let overlay = dir.join("otpmcp.toml");
    std::fs::write(&overlay, config_map_toml(manifest)).unwrap_or_else(|e| panic!("{e}"));
    let env: Vec<(String, String)> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- name: OTPMCP__"))
        .map(|rest| (format!("OTPMCP__{rest}"), "stand-in".to_owned()))
        .collect();
    assert!(!env.is_empty(), "the manifest sets the request-state key");
    // `dir` has no sys.toml: the defaults, the overlay, the environment.
    Config::load_with_env(&dir, &[overlay], env)
        .unwrap_or_else(|e| panic!("the manifest's configuration: {e}"))
}

#[test]
fn the_kubernetes_example_loads_and_its_timings_fit_the_drain() {
    let manifest = read("deploy/kubernetes/otpmcp.yaml");
    let config = manifest_config(&manifest, "k8s");

    let grace = number_after(&manifest, None, "terminationGracePeriodSeconds:");
    let pre_stop = number_after(&manifest, Some("preStop:"), "seconds:");
    // The drain, then up to 5 s for each actor to stop, then exit.
    let drain = Duration::from_secs(pre_stop) + config.server.shutdown_timeout;
    assert!(
        Duration::from_secs(grace) >= drain + Duration::from_secs(10),
        "terminationGracePeriodSeconds {grace} leaves the drain ({drain:?}) no room"
    );
    let admin = u64::from(config.admin.bind.port());
    assert!(config.admin.enabled && config.admin.allow_remote);
    assert!(
        config.admin.allowed_hosts.is_empty(),
        "kubelet sends the pod IP as Host"
    );
    assert_eq!(
        number_after(&manifest, Some("path: /readyz"), "port:"),
        admin
    );
    assert_eq!(
        number_after(&manifest, Some("path: /healthz"), "port:"),
        admin
    );
    let mcp = u64::from(config.server.bind.port());
    assert_eq!(
        number_after(&manifest, Some("- name: mcp"), "containerPort:"),
        mcp
    );
    let service = &manifest[manifest.find("kind: Service").unwrap_or(0)..];
    assert_eq!(number_after(service, None, "targetPort:"), mcp);
    assert!(
        !service.contains(&admin.to_string()),
        "the Service does not expose the admin listener"
    );
}

/// The manifest names the tag `scripts/image` builds for this version, and the image
/// listens where the manifest's configuration says and runs as a numeric user other than
/// root (what `runAsNonRoot` can check).
#[test]
fn the_kubernetes_example_runs_this_versions_image() {
    let manifest = read("deploy/kubernetes/otpmcp.yaml");
    let images: Vec<&str> = manifest
        .lines()
        .filter_map(|line| line.trim().strip_prefix("image:"))
        .map(str::trim)
        .collect();
    let tag = format!("otpmcp:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(images, [tag.as_str()], "scripts/image builds {tag}");

    let containerfile = read("deploy/image/Containerfile");
    let instruction = |name: &str| {
        containerfile
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("the Containerfile has no {name}"))
    };
    let user = instruction("USER");
    let uid: u32 = user
        .split(':')
        .next()
        .and_then(|uid| uid.parse().ok())
        .unwrap_or_else(|| panic!("USER {user}: not a numeric uid"));
    assert_ne!(uid, 0, "the image runs as root");
    assert!(manifest.contains("runAsNonRoot: true"));

    let config = manifest_config(&manifest, "k8s-image");
    let exposed: Vec<u16> = instruction("EXPOSE")
        .split_whitespace()
        .map(|port| {
            port.parse()
                .unwrap_or_else(|e| panic!("EXPOSE {port}: {e}"))
        })
        .collect();
    assert_eq!(
        exposed,
        [config.server.bind.port(), config.admin.bind.port()],
        "EXPOSE: server.bind's port, then admin.bind's"
    );
}

#[test]
#[ignore = "needs nginx; ./scripts/test runs it"]
fn the_nginx_example_passes_nginx_t() {
    let dir = scratch("nginx");
    let main = common::nginx::main_conf(&dir, &repo("deploy/nginx/otpmcp.conf"), false);
    let conf = dir.join("nginx.conf");
    std::fs::write(&conf, main).unwrap_or_else(|e| panic!("{e}"));
    let out = common::nginx::command()
        .arg("-t")
        .arg("-p")
        .arg(&dir)
        .arg("-c")
        .arg(&conf)
        .output()
        .unwrap_or_else(|e| panic!("nginx (./scripts/test installs Debian's): {e}"));
    assert!(
        out.status.success(),
        "nginx -t: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
