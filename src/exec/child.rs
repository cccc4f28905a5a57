//! What the forked child does before it executes the program: join the execution's
//! cgroup, forbid new privileges, set the limits, (PID-namespace mode) split into a relay,
//! an init and the program, (where the host allows) enter a mount namespace of its own
//! with private `/tmp`-like folders, its working folder alone under its root and a `/proc`
//! of its PID namespace, drop to the program's user, and tie itself to its parent.
//!
//! All of it runs between `fork` and `exec` in a copy of a multi-threaded process: only
//! async-signal-safe system calls, on values computed before the fork, and no allocation.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io::{Error, Result};
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt as _;
use std::path::{Path, PathBuf};

use crate::config::ProgramConfig;

/// The mounts of one execution's own mount namespace, as C strings made before the fork
/// (the child may not allocate).
#[derive(Debug)]
pub struct PrivateMounts {
    /// Folders covered by a tmpfs of the execution's own, outermost first, each with its
    /// mount options: the shared world-writable ones (`/tmp`, `/var/tmp`, `/dev/shm`) and
    /// the workdir root, so no other execution's folder is visible.
    covers: Vec<(CString, CString)>,
    /// Made inside a cover, outermost first: the way down to the working folder, and it.
    dirs: Vec<CString>,
    /// The working folder, where the real one (the child's current folder) is bound.
    workdir: CString,
    /// Mount a `/proc` of the program's PID namespace (only with one).
    proc: bool,
}

impl PrivateMounts {
    /// For the working folder `workdir` (made under `root`), with a tmpfs over each of
    /// `shared` and over `root`, of at most `tmp_bytes` each (0: the kernel's default).
    pub(super) fn plan(
        workdir: &Path,
        root: &Path,
        shared: &[PathBuf],
        tmp_bytes: u64,
        proc: bool,
    ) -> Result<Self> {
        let c = |path: &Path| {
            CString::new(path.as_os_str().as_bytes())
                .map_err(|_| Error::other("a path with a NUL byte"))
        };
        let size = match tmp_bytes {
            0 => String::new(),
            n => format!(",size={n}"),
        };
        let mut covers = Vec::new();
        let mut covered = Vec::new();
        // A shared folder under the root is hidden by the root's cover, unless it is it.
        for dir in shared.iter().filter(|d| *d == root || !d.starts_with(root)) {
            covers.push((c(dir)?, c(Path::new(&format!("mode=1777{size}")))?));
            covered.push(dir.as_path());
        }
        let base = match covered.iter().find(|d| root.starts_with(d)) {
            Some(dir) => *dir,
            None => {
                covers.push((c(root)?, c(Path::new(&format!("mode=0755{size}")))?));
                root
            }
        };
        // The folders between the cover and the working folder, outermost first.
        let mut dirs = workdir
            .ancestors()
            .take_while(|d| *d != base && d.starts_with(base))
            .map(c)
            .collect::<Result<Vec<_>>>()?;
        dirs.reverse();
        Ok(Self {
            covers,
            dirs,
            workdir: c(workdir)?,
            proc,
        })
    }

    /// In the child, as root, with the working folder as its current folder: a mount
    /// namespace of its own whose changes reach no other (private propagation first),
    /// a tmpfs over each cover, the working folder bound back in place, and a fresh
    /// `/proc`.
    unsafe fn apply(&self) -> Result<()> {
        // SAFETY: system calls on C strings made before the fork and on static ones.
        unsafe {
            let none = std::ptr::null();
            check(libc::unshare(libc::CLONE_NEWNS))?;
            check(libc::mount(
                none,
                c"/".as_ptr(),
                none,
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            let flags = libc::MS_NOSUID | libc::MS_NODEV;
            for (target, options) in &self.covers {
                check(libc::mount(
                    c"tmpfs".as_ptr(),
                    target.as_ptr(),
                    c"tmpfs".as_ptr(),
                    flags,
                    options.as_ptr().cast(),
                ))?;
            }
            for dir in &self.dirs {
                if libc::mkdir(dir.as_ptr(), 0o755) != 0
                    && *libc::__errno_location() != libc::EEXIST
                {
                    return Err(Error::last_os_error());
                }
            }
            // "." is still the real working folder, now under a cover.
            check(libc::mount(
                c".".as_ptr(),
                self.workdir.as_ptr(),
                none,
                libc::MS_BIND,
                std::ptr::null(),
            ))?;
            check(libc::chdir(self.workdir.as_ptr()))?;
            if self.proc {
                check(libc::mount(
                    c"proc".as_ptr(),
                    c"/proc".as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                ))?;
            }
        }
        Ok(())
    }
}

/// What the child applies, computed in the server before the fork.
#[derive(Debug, Clone)]
pub(super) struct ChildPlan {
    /// The server's pid, to check that it did not die before the parent-death signal.
    parent: libc::pid_t,
    cpu: u64,
    memory: u64,
    processes: u64,
    open_files: u64,
    file_bytes: u64,
    user: Option<(u32, u32)>,
    /// The execution's `cgroup.procs`, open for writing: the child joins it first.
    pub cgroup_procs: Option<RawFd>,
    /// Run the program in a PID namespace of its own, under an init.
    pub pid_namespace: bool,
    /// Run it in a mount namespace of its own, with these mounts.
    pub mounts: Option<std::sync::Arc<PrivateMounts>>,
}

fn check(rc: libc::c_int) -> Result<()> {
    match rc {
        -1 => Err(Error::last_os_error()),
        _ => Ok(()),
    }
}

impl ChildPlan {
    pub(super) fn of(program: &ProgramConfig) -> Self {
        Self {
            // SAFETY: getpid has no preconditions.
            parent: unsafe { libc::getpid() },
            cpu: program.cpu_seconds,
            memory: program.memory_bytes,
            processes: program.processes,
            open_files: program.open_files,
            file_bytes: program.file_bytes,
            user: program.uid.map(|uid| (uid, program.gid.unwrap_or(uid))),
            cgroup_procs: None,
            pid_namespace: false,
            mounts: None,
        }
    }

    /// In the child. Returns only in the process that is to execute the program.
    pub(super) fn apply(&self) -> Result<()> {
        // SAFETY: system calls on integers and on buffers of this stack frame, all
        // async-signal-safe, as allowed between fork and exec.
        unsafe {
            if let Some(fd) = self.cgroup_procs {
                // "0" moves the writer; before anything else, so all it forks is inside.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(Error::last_os_error());
                }
            }
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))?;
            self.limit()?;
            let parent = match self.pid_namespace {
                // Needs privilege, so before the change of user; returns in the program.
                true => self.split()?,
                false => self.parent,
            };
            // In the program's process (so its `/proc` is its PID namespace's), as root.
            if let Some(mounts) = &self.mounts {
                mounts.apply()?;
            }
            if let Some((uid, gid)) = self.user {
                check(libc::setgroups(0, std::ptr::null()))?;
                check(libc::setgid(gid))?;
                check(libc::setuid(uid))?;
            }
            // Last: a change of user or group clears the parent-death signal.
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            // The parent may have died before the signal was armed.
            if libc::getppid() != parent {
                libc::_exit(127);
            }
        }
        Ok(())
    }

    fn limit(&self) -> Result<()> {
        let limit = |resource, soft: u64, hard: u64| {
            let value = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            // SAFETY: setrlimit reads the struct on this frame.
            check(unsafe { libc::setrlimit(resource, &value) })
        };
        if self.cpu > 0 {
            // At the soft limit SIGXCPU, one second later SIGKILL.
            limit(libc::RLIMIT_CPU, self.cpu, self.cpu + 1)?;
        }
        if self.memory > 0 {
            limit(libc::RLIMIT_AS, self.memory, self.memory)?;
        }
        if self.processes > 0 {
            limit(libc::RLIMIT_NPROC, self.processes, self.processes)?;
        }
        if self.open_files > 0 {
            limit(libc::RLIMIT_NOFILE, self.open_files, self.open_files)?;
        }
        if self.file_bytes > 0 {
            limit(libc::RLIMIT_FSIZE, self.file_bytes, self.file_bytes)?;
        }
        // No core files: they would land in the directory, past every limit but this.
        limit(libc::RLIMIT_CORE, 0, 0)
    }

    /// PID-namespace mode. This process (the leader the server watches) stays outside as
    /// a relay; its first child is PID 1 of a new namespace (the init), whose child runs
    /// the program. The init reaps every orphan in the namespace and exits with the
    /// program; its exit makes the kernel kill all that is left there. Each one dies with
    /// its parent, so a killed server takes the whole chain. Returns, in the program's
    /// process, the pid its parent has there (1).
    unsafe fn split(&self) -> Result<libc::pid_t> {
        // SAFETY (whole fn): async-signal-safe system calls on this frame's values.
        unsafe {
            check(libc::unshare(libc::CLONE_NEWPID))?;
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            if libc::getppid() != self.parent {
                libc::_exit(127);
            }
            // The init tells the relay how the program ended through this pipe.
            let mut status = [0 as RawFd; 2];
            check(libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC))?;
            fork_under(relay, status[0])?;
            libc::close(status[0]);
            default_signals();
            check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            // The relay may have died before the signal was armed: its end is closed.
            let mut end = libc::pollfd {
                fd: status[1],
                events: 0,
                revents: 0,
            };
            if libc::poll(&mut end, 1, 0) != 0 {
                libc::_exit(127);
            }
            fork_under(init_loop, status[1])?;
            libc::close(status[1]);
            Ok(1)
        }
    }
}

/// Forks: the parent runs `parent` with the child's pid and `fd`, and never returns; the
/// child returns.
unsafe fn fork_under(parent: unsafe fn(libc::pid_t, RawFd) -> !, fd: RawFd) -> Result<()> {
    // SAFETY: fork in the single-threaded child that `split` runs in.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(Error::last_os_error());
    }
    if pid > 0 {
        // SAFETY: `relay` or `init_loop`, in the parent of the fork.
        unsafe { parent(pid, fd) };
    }
    Ok(())
}

/// Closes every descriptor but `keep`: the relay and the init hold no pipe of the
/// program's, so its output ends when it does.
unsafe fn close_all_but(keep: RawFd) {
    // SAFETY: closing descriptors of this (single-threaded) child.
    unsafe {
        let close_range =
            |first: u32, last: u32| libc::syscall(libc::SYS_close_range, first, last, 0) == 0;
        let keep = keep as u32;
        let low = keep == 0 || close_range(0, keep - 1);
        let high = close_range(keep + 1, u32::MAX);
        if !(low && high) {
            for fd in (0..4096).filter(|fd| *fd != keep as RawFd) {
                libc::close(fd);
            }
        }
    }
}

/// Every catchable signal to its default action, none blocked: the handlers the server
/// installed are not this process's to run.
unsafe fn default_signals() {
    // SAFETY: signal and sigprocmask are async-signal-safe; the set lives on this frame.
    unsafe {
        for signal in 1..32 {
            if signal != libc::SIGKILL && signal != libc::SIGSTOP {
                libc::signal(signal, libc::SIG_DFL);
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// The relay: waits for the init, then ends as the program ended (its exit code, or the
/// same signal), so the server sees the program's status. Ignores the stop signal sent
/// to the group: the program decides, and the relay follows.
unsafe fn relay(init: libc::pid_t, status: RawFd) -> ! {
    // SAFETY: async-signal-safe calls on this frame's values.
    unsafe {
        close_all_but(status);
        default_signals();
        for signal in 1..32 {
            if ![libc::SIGKILL, libc::SIGSTOP, libc::SIGCHLD].contains(&signal) {
                libc::signal(signal, libc::SIG_IGN);
            }
        }
        let mut init_status = 0;
        while libc::waitpid(init, &mut init_status, 0) < 0 {
            if *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
        let mut program: libc::c_int = 0;
        let size = std::mem::size_of::<libc::c_int>();
        let read = libc::read(status, (&raw mut program).cast(), size);
        let ended = if read == size as isize {
            program
        } else {
            init_status
        };
        if libc::WIFEXITED(ended) {
            libc::_exit(libc::WEXITSTATUS(ended));
        }
        if libc::WIFSIGNALED(ended) {
            let signal = libc::WTERMSIG(ended);
            libc::signal(signal, libc::SIG_DFL);
            libc::kill(libc::getpid(), signal);
            libc::_exit(128 + signal);
        }
        libc::_exit(127)
    }
}

/// PID 1 of the namespace: reaps every process until the program ends, reports its
/// status, and exits (which kills the rest).
unsafe fn init_loop(program: libc::pid_t, status: RawFd) -> ! {
    // SAFETY: async-signal-safe calls on this frame's values.
    unsafe {
        close_all_but(status);
        loop {
            let mut ended = 0;
            let pid = libc::waitpid(-1, &mut ended, 0);
            if pid == program {
                let size = std::mem::size_of::<libc::c_int>();
                libc::write(status, (&raw const ended).cast(), size);
                libc::_exit(0);
            }
            if pid < 0 && *libc::__errno_location() != libc::EINTR {
                libc::_exit(127);
            }
        }
    }
}

/// Whether this host lets the server make PID namespaces: a child unshares one and forks
/// into it. For the start-up choice of `exec.isolation`.
pub fn pid_namespace_works() -> bool {
    // SAFETY: the child calls only unshare, fork, waitpid and _exit (async-signal-safe).
    probe(|| unsafe {
        if libc::unshare(libc::CLONE_NEWPID) != 0 {
            libc::_exit(1);
        }
        let init = libc::fork();
        if init < 0 {
            libc::_exit(2);
        }
        if init == 0 {
            // PID 1 of the new namespace.
            libc::_exit(if libc::getpid() == 1 { 0 } else { 3 });
        }
        exit_as(init, 4);
    })
}

/// Whether this host lets the server give an execution a mount namespace of its own: a
/// child unshares one, makes it private and mounts a tmpfs over `/tmp` (in its own
/// namespace only); with `proc`, it also unshares a PID namespace and its first child
/// mounts a `/proc` there. For the start-up choice of the separation between executions.
pub fn private_mounts_work(proc: bool) -> bool {
    // SAFETY: the child calls only unshare, mount, fork, waitpid and _exit
    // (async-signal-safe) on static C strings.
    probe(|| unsafe {
        let pid = if proc { libc::CLONE_NEWPID } else { 0 };
        if libc::unshare(libc::CLONE_NEWNS | pid) != 0 {
            libc::_exit(1);
        }
        let none = std::ptr::null();
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(none, c"/".as_ptr(), none, private, none.cast()) != 0 {
            libc::_exit(2);
        }
        let tmpfs = c"tmpfs".as_ptr();
        let flags = libc::MS_NOSUID | libc::MS_NODEV;
        if libc::mount(tmpfs, c"/tmp".as_ptr(), tmpfs, flags, none.cast()) != 0 {
            libc::_exit(3);
        }
        if !proc {
            libc::_exit(0);
        }
        let init = libc::fork();
        if init < 0 {
            libc::_exit(4);
        }
        if init == 0 {
            let proc = c"proc".as_ptr();
            let flags = flags | libc::MS_NOEXEC;
            let done = libc::mount(proc, c"/proc".as_ptr(), proc, flags, none.cast());
            libc::_exit(if done == 0 { 0 } else { 5 });
        }
        exit_as(init, 6);
    })
}

/// Runs `child` in a forked child, which it must end (`_exit`, async-signal-safe calls
/// only), and tells whether that child exited 0: a start-up probe of what this host allows.
fn probe(child: impl FnOnce() -> std::convert::Infallible) -> bool {
    // The reaper must not take the probe for an orphan.
    let _spawning = super::reaper::spawning();
    // SAFETY: the child runs only `child`, which ends it; the parent waits for it.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return false;
    }
    if pid == 0 {
        // Returns never: `Infallible` has no value.
        child();
    }
    exited_0(pid)
}

/// In a probe's child: waits for `pid` and exits with its exit status, or with `failed`
/// when it cannot be waited for or was killed.
///
/// # Safety
/// Only in a forked child (it calls `_exit`); async-signal-safe.
unsafe fn exit_as(pid: libc::pid_t, failed: libc::c_int) -> ! {
    // SAFETY: waitpid and _exit are async-signal-safe; `status` is a local.
    unsafe {
        let mut status = 0;
        if libc::waitpid(pid, &mut status, 0) != pid || !libc::WIFEXITED(status) {
            libc::_exit(failed);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}

/// In the server: waits for the probe `pid` and tells whether it exited 0.
fn exited_0(pid: libc::pid_t) -> bool {
    let mut status = 0;
    // SAFETY: waitpid on our own child, with a local status.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    waited == pid && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
}
