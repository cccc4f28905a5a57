//! One program as an OS process group: spawned with no shell in a directory of its own,
//! contained, limited and tied to this process before `exec` ([`super::child`]),
//! signalled as a group, and reaped with its resource usage.
//!
//! `unsafe` here is for system calls std does not wrap (`pidfd_open`, `wait4`, `kill`
//! of a group). Each block says why it is sound.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::net::unix::pipe;

use super::cgroup::Cgroup;
use super::child::{ChildPlan, PrivateMounts};
use super::reaper;
use crate::config::ProgramConfig;

/// Why a program could not start.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// Its working directory could not be made.
    #[error("cannot make the working directory {path}: {source}")]
    Workdir {
        /// Where.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// `fork`/`exec` failed (no such program, a limit refused, ...).
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program's path.
        program: String,
        /// Why.
        source: std::io::Error,
    },
}

/// How a process ended, and what it used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExitInfo {
    /// Its exit code, when it exited.
    pub code: Option<i32>,
    /// The signal that ended it, when one did.
    pub signal: Option<i32>,
    /// User CPU time, in milliseconds (its waited-for descendants included).
    pub user_ms: u64,
    /// System CPU time, in milliseconds.
    pub system_ms: u64,
    /// Peak resident memory, in kilobytes.
    pub max_rss_kb: u64,
}

/// A directory an execution runs in, removed with everything in it when dropped.
#[derive(Debug)]
pub struct Workdir(PathBuf);

impl Workdir {
    /// Makes `root/otpmcp-exec-NAME`, private to the program's user.
    pub fn create(root: &Path, name: &str, owner: Option<(u32, u32)>) -> Result<Self, SpawnError> {
        use std::os::unix::fs::{DirBuilderExt as _, chown};
        let path = root.join(format!("otpmcp-exec-{name}"));
        let fail = |source| SpawnError::Workdir {
            path: path.clone(),
            source,
        };
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(fail)?;
        let dir = Self(path.clone());
        if let Some((uid, gid)) = owner {
            chown(&path, Some(uid), Some(gid)).map_err(fail)?;
        }
        Ok(dir)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Workdir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.0)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), error = %e, "could not remove an execution's directory");
        }
    }
}

/// A running program: the leader of its own process group.
///
/// The group is signalled only while the leader is not reaped: its zombie keeps the
/// group id taken, so a signal can never reach a group that reused the id.
#[derive(Debug)]
pub struct Process {
    pid: i32,
    /// Readable once the leader has exited (a pidfd).
    exited: Arc<AsyncFd<OwnedFd>>,
    reaped: bool,
}

/// The program's ends of its pipes, as the server holds them.
#[derive(Debug)]
pub struct Pipes {
    /// Its stdout.
    pub stdout: pipe::Receiver,
    /// Its stderr.
    pub stderr: pipe::Receiver,
    /// Its stdin, when the call gave one.
    pub stdin: Option<pipe::Sender>,
}

/// How one execution is contained: the cgroup its child joins, or a PID namespace of its
/// own (neither: its process group only).
#[derive(Debug, Default)]
pub struct Containment<'a> {
    /// The execution's cgroup (`exec.isolation = "cgroup"`).
    pub cgroup: Option<&'a mut Cgroup>,
    /// A PID namespace under an init (`exec.isolation = "pid-namespace"`, or `cgroup`
    /// where the host allows one).
    pub pid_namespace: bool,
    /// A mount namespace of its own, with these mounts.
    pub mounts: Option<Arc<PrivateMounts>>,
}

/// Starts `program` with `args` appended, in `workdir`, with no environment but what the
/// entry allows and sets, contained as `containment` says. Must run on a thread that
/// lives as long as the server (a runtime worker, not a blocking-pool thread): the
/// parent-death signal fires when the thread that forked exits.
pub fn spawn(
    program: &ProgramConfig,
    args: &[String],
    workdir: &Workdir,
    with_stdin: bool,
    containment: Containment<'_>,
) -> Result<(Process, Pipes), SpawnError> {
    let Some((path, fixed)) = program.command.split_first() else {
        return Err(SpawnError::Spawn {
            program: String::new(),
            source: std::io::Error::other("the entry names no program"),
        });
    };
    let fail = |source| SpawnError::Spawn {
        program: path.clone(),
        source,
    };
    let mut command = Command::new(path);
    command
        .args(fixed)
        .args(args)
        .env_clear()
        .current_dir(workdir.path())
        .stdin(if with_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for name in &program.env_allow {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    command
        .env("TMPDIR", workdir.path())
        .env("HOME", workdir.path());
    command.envs(
        program
            .env
            .iter()
            .map(|(name, value)| (name, value.expose())),
    );
    let mut plan = ChildPlan::of(program);
    plan.cgroup_procs = containment.cgroup.as_ref().and_then(|c| c.procs_fd());
    plan.pid_namespace = containment.pid_namespace;
    plan.mounts = containment.mounts;
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions on values computed before the fork; it allocates
    // nothing (see super::child).
    unsafe {
        command.pre_exec(move || plan.apply());
    }
    // Until the leader is registered, the reaper must not take it for an orphan.
    let spawning = reaper::spawning();
    let spawned = command.spawn();
    if let Some(cgroup) = containment.cgroup {
        cgroup.joined();
    }
    let mut child = spawned.map_err(fail)?;
    let pid = child.id() as i32;
    reaper::register(pid);
    drop(spawning);
    let take = |fd: Option<OwnedFd>| fd.ok_or_else(|| std::io::Error::other("no pipe"));
    let stdout = take(child.stdout.take().map(OwnedFd::from)).map_err(fail)?;
    let stderr = take(child.stderr.take().map(OwnedFd::from)).map_err(fail)?;
    let stdin = child.stdin.take().map(OwnedFd::from);
    // From here on the pid is ours to reap (std's `Child` does not wait when dropped).
    let process = match Process::watch(pid) {
        Ok(process) => process,
        Err(e) => {
            signal_group(pid, libc::SIGKILL);
            // SAFETY: kill of our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = child.wait();
            reaper::unregister(pid);
            return Err(fail(e));
        }
    };
    let pipes = Pipes {
        stdout: pipe::Receiver::from_owned_fd(stdout).map_err(fail)?,
        stderr: pipe::Receiver::from_owned_fd(stderr).map_err(fail)?,
        stdin: match stdin {
            Some(fd) => Some(pipe::Sender::from_owned_fd(fd).map_err(fail)?),
            None => None,
        },
    };
    Ok((process, pipes))
}

impl Process {
    fn watch(pid: i32) -> std::io::Result<Self> {
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just opened and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(Self {
            pid,
            // SAFETY: the pidfd is open and owned by the AsyncFd until it drops.
            exited: Arc::new(unsafe {
                AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)?
            }),
            reaped: false,
        })
    }

    /// The leader's pid, which is also the group's id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Sends `signal` to every process of the group, and to the leader if it left the
    /// group. False when none is left, or when the leader is reaped (then nothing is
    /// sent: the id may be another group's).
    pub fn signal_group(&self, signal: i32) -> bool {
        if self.reaped {
            return false;
        }
        let group = signal_group(self.pid, signal);
        // SAFETY: kill of our own child, which cannot be reaped meanwhile (only the
        // owner of this Process reaps it).
        let leader = unsafe { libc::kill(self.pid, signal) == 0 };
        group || leader
    }

    /// Resolves once the leader has exited (it is not reaped: see [`Process::reap`]).
    pub fn exited(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let (fd, pid) = (self.exited.clone(), self.pid);
        async move {
            loop {
                let Ok(mut ready) = fd.readable().await else {
                    return;
                };
                if leader_exited(pid) {
                    return;
                }
                ready.clear_ready();
            }
        }
    }

    /// Once the leader has exited: kills what it left in its group, then reaps it, with
    /// its resource usage. `None` while it runs.
    pub fn reap(&mut self) -> std::io::Result<Option<ExitInfo>> {
        if self.reaped || !leader_exited(self.pid) {
            return Ok(None);
        }
        signal_group(self.pid, libc::SIGKILL);
        self.try_reap()
    }

    fn try_reap(&mut self) -> std::io::Result<Option<ExitInfo>> {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 fills it.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child, without blocking.
        let rc = unsafe { libc::wait4(self.pid, &mut status, libc::WNOHANG, &mut usage) };
        match rc {
            0 => Ok(None),
            rc if rc < 0 => Err(std::io::Error::last_os_error()),
            _ => {
                self.reaped = true;
                reaper::unregister(self.pid);
                let millis = |t: libc::timeval| t.tv_sec as u64 * 1000 + t.tv_usec as u64 / 1000;
                Ok(Some(ExitInfo {
                    code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
                    signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
                    user_ms: millis(usage.ru_utime),
                    system_ms: millis(usage.ru_stime),
                    max_rss_kb: usage.ru_maxrss.max(0) as u64,
                }))
            }
        }
    }
}

impl Drop for Process {
    /// On every path out (a panic included): nothing of the group outlives its
    /// execution, and the leader does not stay a zombie.
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        self.signal_group(libc::SIGKILL);
        let pid = self.pid;
        // Not on this thread (a runtime worker): the wait, short after SIGKILL, blocks.
        let reap = move || {
            // SAFETY: as in try_reap, for our own child that nothing else reaps.
            unsafe {
                let mut status = 0;
                libc::waitpid(pid, &mut status, 0);
            }
            reaper::unregister(pid);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(reap)),
            Err(_) => reap(),
        }
    }
}

/// Whether the leader `pid` has exited, without reaping it.
fn leader_exited(pid: i32) -> bool {
    // SAFETY: siginfo_t is plain data that waitid fills; WNOWAIT leaves the child
    // waitable, WNOHANG returns at once.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
        libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) == 0 && info.si_pid() == pid
    }
}

/// Sends `signal` to process group `pgid`. False when the group is empty.
pub fn signal_group(pgid: i32, signal: i32) -> bool {
    // SAFETY: kill with a negative pid signals a group; no memory is involved.
    unsafe { libc::kill(-pgid, signal) == 0 }
}

/// Writes `input` to the program's stdin and closes it; a program that exits without
/// reading it all is not an error.
pub async fn feed_stdin(stdin: pipe::Sender, input: Vec<u8>, timeout: Duration) {
    let write = async {
        let mut rest = &input[..];
        while !rest.is_empty() {
            if stdin.writable().await.is_err() {
                return;
            }
            match stdin.try_write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return,
            }
        }
    };
    let _ = tokio::time::timeout(timeout, write).await;
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0): its `/proc/<pid>` files
/// (`environ`, `mem`, `maps`, ...) become root's, and no process of the same user may
/// ptrace it. A configured program running as the server's user could otherwise read the
/// server's secrets there. It also turns core dumps off. Children become dumpable again
/// when they `exec`.
pub fn set_non_dumpable() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_DUMPABLE takes integer arguments only and changes a flag
    // of this process; no memory is passed.
    let done = unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
    match done {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// The server's effective user id: the user of a program that sets no `uid`.
pub fn effective_uid() -> u32 {
    // SAFETY: geteuid takes nothing, cannot fail and touches no memory.
    unsafe { libc::geteuid() }
}
