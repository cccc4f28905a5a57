//! cgroup v2 containment (`exec.isolation = "cgroup"`): each execution runs in a cgroup
//! of its own under `exec.cgroup_parent`, which the child joins before it executes the
//! program. Nothing the program starts can leave it (`setsid` and double forks included),
//! so `cgroup.kill` ends all of it, and `pids.max`/`memory.max` bound it as a whole where
//! the host delegates those controllers.
#![allow(unsafe_code)]

use std::io::Write as _;
use std::os::fd::{AsRawFd as _, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// `statfs` magic of the cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// How long removing a killed cgroup may wait for its processes to be gone.
const REMOVE_BOUND: Duration = Duration::from_secs(10);

/// Why `exec.cgroup_parent` cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("exec.cgroup_parent {path}: {problem}")]
pub struct CgroupError {
    /// The configured directory.
    pub path: PathBuf,
    /// What is wrong with it.
    pub problem: String,
}

/// The cgroup v2 mount points of this host, from `/proc/self/mountinfo`.
pub fn v2_mounts() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            // `id parent major:minor root mountpoint options [optional...] - fstype ...`
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split_whitespace().next()?;
            let mountpoint = left.split_whitespace().nth(4)?;
            (fstype == "cgroup2").then(|| PathBuf::from(unescape(mountpoint)))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    field
        .replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// A prepared `exec.cgroup_parent`: on cgroup v2, holding no process, with the
/// controllers it could enable for its children.
#[derive(Debug)]
pub struct CgroupParent {
    path: PathBuf,
    /// `pids.max` is enforced.
    pub pids: bool,
    /// `memory.max` is enforced.
    pub memory: bool,
}

impl CgroupParent {
    /// Makes `path` if missing, checks that it is a cgroup v2 directory that holds no
    /// process and whose children have `cgroup.kill`, and enables the `pids` and `memory`
    /// controllers for its children where the host offers them.
    pub fn prepare(path: &Path) -> Result<Self, CgroupError> {
        let fail = |problem: String| CgroupError {
            path: path.to_owned(),
            problem,
        };
        let mounts = v2_mounts();
        if !mounts.iter().any(|m| path.starts_with(m)) {
            return Err(fail(format!(
                "is not under a cgroup v2 mount (this host has {})",
                match mounts.is_empty() {
                    true => "none".to_owned(),
                    false => mounts
                        .iter()
                        .map(|m| m.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            )));
        }
        std::fs::create_dir_all(path).map_err(|e| fail(format!("cannot be made: {e}")))?;
        if !on_cgroup2(path) {
            return Err(fail("is not on the cgroup v2 file system".into()));
        }
        let procs = std::fs::read_to_string(path.join("cgroup.procs"))
            .map_err(|e| fail(format!("cannot be read: {e}")))?;
        if !procs.trim().is_empty() && !mounts.iter().any(|m| m == path) {
            return Err(fail(
                "holds processes: give executions a cgroup that holds none (cgroup v2 puts processes only in leaves)".into(),
            ));
        }
        // Each execution's cgroup must be killable whole (Linux 5.14 and later).
        static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let probe = path.join(format!("otpmcp-probe-{}-{n}", std::process::id()));
        std::fs::create_dir(&probe)
            .map_err(|e| fail(format!("a child cgroup cannot be made in it: {e}")))?;
        let killable = probe.join("cgroup.kill").exists();
        let _ = std::fs::remove_dir(&probe);
        if !killable {
            return Err(fail(
                "its children have no cgroup.kill (Linux 5.14 or later is needed)".into(),
            ));
        }
        let offered = std::fs::read_to_string(path.join("cgroup.controllers")).unwrap_or_default();
        for controller in ["pids", "memory"] {
            if offered.split_whitespace().any(|c| c == controller) {
                // Already enabled, or refused (then it is reported as not enforced).
                let _ = std::fs::write(
                    path.join("cgroup.subtree_control"),
                    format!("+{controller}"),
                );
            }
        }
        let enabled =
            std::fs::read_to_string(path.join("cgroup.subtree_control")).unwrap_or_default();
        let has = |c: &str| enabled.split_whitespace().any(|e| e == c);
        Ok(Self {
            path: path.to_owned(),
            pids: has("pids"),
            memory: has("memory"),
        })
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Makes the cgroup of one execution, with its limits (0: none), ready to be joined.
    pub fn create(&self, name: &str, processes: u64, memory: u64) -> std::io::Result<Cgroup> {
        let path = self.path.join(name);
        std::fs::create_dir(&path)?;
        // From here on, dropping it removes the directory.
        let mut cgroup = Cgroup { path, procs: None };
        if self.pids && processes > 0 {
            std::fs::write(cgroup.path.join("pids.max"), processes.to_string())?;
        }
        if self.memory && memory > 0 {
            std::fs::write(cgroup.path.join("memory.max"), memory.to_string())?;
            // Past the limit the kernel kills rather than swaps.
            let _ = std::fs::write(cgroup.path.join("memory.swap.max"), "0");
        }
        let procs = std::fs::OpenOptions::new()
            .write(true)
            .open(cgroup.path.join("cgroup.procs"))?;
        cgroup.procs = Some(OwnedFd::from(procs));
        Ok(cgroup)
    }
}

fn on_cgroup2(path: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs fills the plain-data struct from a NUL-terminated path.
    unsafe {
        let mut fs: libc::statfs = std::mem::zeroed();
        libc::statfs(c_path.as_ptr(), &mut fs) == 0 && fs.f_type as i64 == CGROUP2_SUPER_MAGIC
    }
}

/// One execution's cgroup. Dropping it kills what is left in it and removes it, on a
/// blocking thread (the processes may take a moment to go).
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    /// Its `cgroup.procs`, open for the child to write "0" into before it executes.
    procs: Option<OwnedFd>,
}

impl Cgroup {
    /// The descriptor the child joins through, while it is open.
    pub fn procs_fd(&self) -> Option<RawFd> {
        self.procs.as_ref().map(|fd| fd.as_raw_fd())
    }

    /// Closes the descriptor once the child has joined.
    pub fn joined(&mut self) {
        self.procs = None;
    }

    /// Kills every process in it at once (SIGKILL from the kernel, none can escape).
    pub fn kill(&self) {
        let killed = std::fs::OpenOptions::new()
            .write(true)
            .open(self.path.join("cgroup.kill"))
            .and_then(|mut f| f.write_all(b"1"));
        if let Err(e) = killed {
            tracing::warn!(cgroup = %self.path.display(), error = %e, "could not kill an execution's cgroup");
        }
    }

    /// Whether any process is left in it.
    pub fn populated(&self) -> bool {
        populated(&self.path)
    }

    /// Resolves once no process is left in it, or after `bound`: true when empty.
    pub fn emptied(
        &self,
        bound: Duration,
    ) -> impl std::future::Future<Output = bool> + Send + 'static {
        let path = self.path.clone();
        let wait = async move {
            let mut pause = Duration::from_millis(1);
            // cgroup.events has no readiness Tokio can wait on; a short, growing pause.
            while populated(&path) {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(20));
            }
        };
        async move { tokio::time::timeout(bound, wait).await.is_ok() }
    }
}

fn populated(path: &Path) -> bool {
    match std::fs::read_to_string(path.join("cgroup.events")) {
        Ok(events) => events
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["populated", "1"]),
        Err(_) => false,
    }
}

/// Waits (bounded) for the cgroup at `path` to be empty, then removes it.
fn remove(path: &Path) {
    let deadline = Instant::now() + REMOVE_BOUND;
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(e) if Instant::now() >= deadline => {
                tracing::warn!(cgroup = %path.display(), error = %e, "could not remove an execution's cgroup");
                return;
            }
            // Busy while the killed processes exit.
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.procs = None;
        if self.populated() {
            self.kill();
        }
        let path = std::mem::take(&mut self.path);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || remove(&path));
            }
            Err(_) => remove(&path),
        }
    }
}
