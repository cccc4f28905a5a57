//! The server as a child subreaper: orphans of executions (a program that double-forks
//! and exits) are reparented to the server rather than to the host's init, and are
//! reaped here, so the server can run as PID 1 of a container and nothing it inherits
//! stays a zombie.
//!
//! Execution leaders are reaped by their own actors, with their resource usage: they are
//! registered here and never reaped by the reaper. A spawn holds [`spawning`] from before
//! its fork until its leader is registered, so a child is never mistaken for an orphan.
//!
//! Any other child of the server process is reaped too: an embedder that starts its own
//! children and waits for them must not turn `[exec]` on in the same process.
#![allow(unsafe_code)]

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock, RwLock, RwLockReadGuard};

use tokio_util::task::AbortOnDropHandle;

/// Execution leaders, which only their actors reap.
fn leaders() -> &'static Mutex<HashSet<i32>> {
    static LEADERS: OnceLock<Mutex<HashSet<i32>>> = OnceLock::new();
    LEADERS.get_or_init(Default::default)
}

fn spawn_lock() -> &'static RwLock<()> {
    static SPAWNING: RwLock<()> = RwLock::new(());
    &SPAWNING
}

/// Held while a leader is forked and until it is registered: the reaper waits for it.
pub fn spawning() -> RwLockReadGuard<'static, ()> {
    spawn_lock()
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `pid` is an execution leader: the reaper leaves it alone.
pub fn register(pid: i32) {
    leaders()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(pid);
}

/// `pid` is reaped by its owner: forget it.
pub fn unregister(pid: i32) {
    leaders()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&pid);
}

/// Makes this process a child subreaper and reaps what it inherits for as long as the
/// returned task lives. Needs a Tokio runtime. Several at once (servers in one process)
/// are harmless: each reaps only what has exited.
pub fn start() -> std::io::Result<AbortOnDropHandle<()>> {
    // SAFETY: prctl with integer arguments; no memory is involved.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    Ok(AbortOnDropHandle::new(tokio::spawn(async move {
        // Orphans adopted before the handler was installed are reaped at once.
        loop {
            let _ = tokio::task::spawn_blocking(reap_orphans).await;
            if sigchld.recv().await.is_none() {
                return;
            }
        }
    })))
}

/// Reaps every exited child that is not an execution leader.
pub fn reap_orphans() {
    let _exclusive = spawn_lock()
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let leaders = leaders()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    for pid in children() {
        if leaders.contains(&pid) {
            continue;
        }
        // SAFETY: siginfo_t is plain data that waitid fills; WNOHANG returns at once, and
        // the pid is our child that no one else waits for.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOHANG,
            );
        }
    }
}

/// This process's children: each thread's `children` file, or a scan of `/proc` where
/// the kernel has no such file.
fn children() -> Vec<i32> {
    let mut found = Vec::new();
    let mut listed = false;
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            if let Ok(text) = std::fs::read_to_string(task.path().join("children")) {
                listed = true;
                found.extend(
                    text.split_whitespace()
                        .filter_map(|p| p.parse::<i32>().ok()),
                );
            }
        }
    }
    if listed {
        return found;
    }
    let me = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so read after the ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(me) {
            found.push(pid);
        }
    }
    found
}
