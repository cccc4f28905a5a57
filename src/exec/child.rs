//! What the forked child does before it executes the program: join the execution's
//! cgroup, forbid new privileges, set the limits, (PID-namespace mode) split into a relay,
//! an init and the program, drop to the program's user, and tie itself to its parent.
//!
//! All of it runs between `fork` and `exec` in a copy of a multi-threaded process: only
//! async-signal-safe system calls, on values computed before the fork, and no allocation.
#![allow(unsafe_code)]

use std::io::{Error, Result};
use std::os::fd::RawFd;

use crate::config::ProgramConfig;

/// What the child applies, computed in the server before the fork.
#[derive(Debug, Clone, Copy)]
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
        }
    }

    /// In the child. Returns only in the process that is to execute the program.
    pub(super) fn apply(self) -> Result<()> {
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
            let init = libc::fork();
            if init < 0 {
                return Err(Error::last_os_error());
            }
            if init > 0 {
                relay(init, status[0]);
            }
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
            let program = libc::fork();
            if program < 0 {
                return Err(Error::last_os_error());
            }
            if program > 0 {
                init_loop(program, status[1]);
            }
            libc::close(status[1]);
            Ok(1)
        }
    }
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
    // SAFETY: the child calls only unshare, fork, waitpid and _exit (async-signal-safe);
    // the parent waits for it.
    unsafe {
        // The reaper must not take the probe for an orphan.
        let _spawning = super::reaper::spawning();
        let probe = libc::fork();
        if probe < 0 {
            return false;
        }
        if probe == 0 {
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
            let mut status = 0;
            if libc::waitpid(init, &mut status, 0) != init {
                libc::_exit(4);
            }
            libc::_exit(if libc::WIFEXITED(status) {
                libc::WEXITSTATUS(status)
            } else {
                5
            });
        }
        let mut status = 0;
        libc::waitpid(probe, &mut status, 0) == probe
            && libc::WIFEXITED(status)
            && libc::WEXITSTATUS(status) == 0
    }
}
