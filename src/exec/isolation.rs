//! The start-up choice of `exec.isolation`: what keeps an execution's descendants from
//! outliving it on this host. `auto` takes a cgroup when `exec.cgroup_parent` is set and
//! usable, else a PID namespace when the host allows one, else refuses to start; the
//! process group alone (which `setsid` escapes) runs only when asked for by name.
//!
//! On top, [`Separation`]: where the host allows it, each execution gets a mount
//! namespace of its own (private `/tmp`, `/var/tmp`, `/dev/shm`, no other execution's
//! folder) and, but with the process group alone, a `/proc` of its own PID namespace, so
//! executions that run as one user cannot see each other.

use std::path::PathBuf;
use std::sync::Arc;

use super::cgroup::{CgroupError, CgroupParent};
use crate::config::{ExecConfig, IsolationMode};

/// The containment every execution of this server gets.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// A cgroup per execution under this parent.
    Cgroup(Arc<CgroupParent>),
    /// A PID namespace per execution.
    PidNamespace,
    /// The process group only.
    ProcessGroup,
}

impl Isolation {
    /// Its name in the configuration.
    #[cfg(any(test, feature = "testing"))]
    pub fn mode(&self) -> IsolationMode {
        match self {
            Self::Cgroup(_) => IsolationMode::Cgroup,
            Self::PidNamespace => IsolationMode::PidNamespace,
            Self::ProcessGroup => IsolationMode::ProcessGroup,
        }
    }
}

/// The world-writable folders every execution gets a private tmpfs over, where they exist.
const SHARED: [&str; 3] = ["/tmp", "/var/tmp", "/dev/shm"];

/// How executions are kept from seeing each other, chosen at start-up.
#[derive(Debug, Clone, Default)]
pub struct Separation {
    /// A mount namespace per execution, with a tmpfs of its own over each of `shared`
    /// and over its program's workdir root (its own folder bound back in place).
    pub mounts: bool,
    /// The shared folders this host has.
    pub shared: Arc<[PathBuf]>,
    /// A PID namespace per execution (in cgroup mode too) with a `/proc` of its own.
    pub proc: bool,
}

impl Separation {
    /// What this host allows with `isolation`: everything but the process group alone
    /// also gets a PID namespace and its `/proc`.
    pub fn of(isolation: &Isolation) -> Self {
        let proc = !matches!(isolation, Isolation::ProcessGroup)
            && super::child::private_mounts_work(true);
        let mounts = proc || super::child::private_mounts_work(false);
        let shared = SHARED
            .iter()
            .map(PathBuf::from)
            .filter(|dir| dir.is_dir())
            .collect();
        Self {
            mounts,
            shared,
            proc,
        }
    }
}

/// Why `[exec]` cannot start with the configured isolation.
#[derive(Debug, thiserror::Error)]
pub enum IsolationError {
    /// `exec.cgroup_parent` is not usable.
    #[error("exec.isolation = \"cgroup\": {0}")]
    Cgroup(#[from] CgroupError),
    /// This host makes no PID namespace for the server.
    #[error(
        "exec.isolation = \"pid-namespace\": this host does not let the server make a PID namespace (it needs root or CAP_SYS_ADMIN)"
    )]
    PidNamespace,
    /// A program would run as the user that owns `exec.cgroup_parent`: it could move
    /// itself out of its cgroup, raise its limits or kill another execution's cgroup.
    #[error(
        "exec.programs.{program}: it runs as uid {uid}, which owns exec.cgroup_parent {path:?}, so it could leave its cgroup (write its pid to a cgroup of its own), raise its limits or kill another execution's cgroup; set its uid to a user that does not own the cgroup tree (docs/execution.md#isolation)"
    )]
    CgroupOwner {
        /// The program's name.
        program: String,
        /// The user it would run as.
        uid: u32,
        /// The cgroup parent.
        path: std::path::PathBuf,
    },
    /// Neither works and the weaker mode was not asked for.
    #[error(
        "exec: no isolation that contains an execution's descendants is available ({why}); set exec.cgroup_parent to a cgroup v2 directory the server may write, run the server where it may make PID namespaces, or write exec.isolation = \"process-group\" to accept that a program's descendants can escape (docs/execution.md#security-model)"
    )]
    NoneAvailable {
        /// What was tried.
        why: String,
    },
}

/// What the host offers, as probed at start-up.
#[derive(Debug)]
pub struct HostProbe {
    /// `exec.cgroup_parent` prepared, or why not (`None` when it is not set).
    pub cgroup: Option<Result<CgroupParent, CgroupError>>,
    /// A PID namespace can be made.
    pub pid_namespace: bool,
}

impl HostProbe {
    /// Probes this host for `settings`.
    pub fn of(settings: &ExecConfig) -> Self {
        let cgroup = (!settings.cgroup_parent.as_os_str().is_empty())
            .then(|| CgroupParent::prepare(&settings.cgroup_parent));
        let pid_namespace = matches!(
            settings.isolation,
            IsolationMode::Auto | IsolationMode::PidNamespace
        ) && super::child::pid_namespace_works();
        Self {
            cgroup,
            pid_namespace,
        }
    }
}

/// Decides the isolation from the configured mode and what the host offers.
pub fn choose(mode: IsolationMode, probe: HostProbe) -> Result<Isolation, IsolationError> {
    match mode {
        IsolationMode::ProcessGroup => Ok(Isolation::ProcessGroup),
        IsolationMode::PidNamespace if probe.pid_namespace => Ok(Isolation::PidNamespace),
        IsolationMode::PidNamespace => Err(IsolationError::PidNamespace),
        IsolationMode::Cgroup => match probe.cgroup {
            Some(parent) => Ok(Isolation::Cgroup(Arc::new(parent?))),
            None => Err(IsolationError::NoneAvailable {
                why: "exec.cgroup_parent is not set".into(),
            }),
        },
        IsolationMode::Auto => {
            let cgroup_why = match probe.cgroup {
                Some(Ok(parent)) => return Ok(Isolation::Cgroup(Arc::new(parent))),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "exec.cgroup_parent is not usable; trying a PID namespace");
                    e.to_string()
                }
                None => "exec.cgroup_parent is not set".to_owned(),
            };
            match probe.pid_namespace {
                true => Ok(Isolation::PidNamespace),
                false => Err(IsolationError::NoneAvailable {
                    why: format!("{cgroup_why}; no PID namespace can be made"),
                }),
            }
        }
    }
}

/// Refuses a program that would run as the (non-root) owner of the cgroup tree: cgroup
/// files obey file permissions, so such a program could undo its own containment. Root
/// is not refused here but can undo any of it: execution.md says so, and a warning names
/// each such program.
fn check_owner(
    settings: &ExecConfig,
    parent: &std::path::Path,
    server_uid: u32,
) -> Result<(), IsolationError> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(owner) = std::fs::metadata(parent).map(|m| m.uid()) else {
        return Ok(());
    };
    for (name, program) in &settings.programs {
        let uid = program.uid.unwrap_or(server_uid);
        if uid == 0 {
            tracing::warn!(program = %name, "runs as root: no isolation mode contains it; set its uid");
        } else if uid == owner {
            return Err(IsolationError::CgroupOwner {
                program: name.clone(),
                uid,
                path: parent.to_owned(),
            });
        }
    }
    Ok(())
}

/// Probes the host, decides, and says at start-up what runs and what it enforces.
pub fn start(settings: &ExecConfig) -> Result<(Isolation, Separation), IsolationError> {
    let isolation = choose(settings.isolation, HostProbe::of(settings))?;
    if let Isolation::Cgroup(parent) = &isolation {
        check_owner(settings, parent.path(), super::process::effective_uid())?;
    }
    match &isolation {
        Isolation::Cgroup(parent) => tracing::info!(
            cgroup_parent = %parent.path().display(),
            pids_max = parent.pids,
            memory_max = parent.memory,
            "executions isolated in a cgroup each (killed whole); the controllers not enforced leave RLIMIT_NPROC and RLIMIT_AS per process"
        ),
        Isolation::PidNamespace => {
            tracing::info!(
                "executions isolated in a PID namespace each (its init's exit kills the rest)"
            )
        }
        Isolation::ProcessGroup => tracing::warn!(
            "exec.isolation = \"process-group\": a program's descendants that leave its process group (setsid) outlive it"
        ),
    }
    let separation = match settings.separate {
        true => Separation::of(&isolation),
        false => Separation::default(),
    };
    match (separation.mounts, separation.proc) {
        _ if !settings.separate => tracing::warn!(
            "exec.separate = false: programs that run as one user can read each other's files, environment and processes"
        ),
        (true, true) => tracing::info!(
            "executions separated: a mount namespace each (private /tmp, /var/tmp, /dev/shm; no other execution's folder) and a /proc of its own PID namespace"
        ),
        (true, false) => tracing::warn!(
            "executions get a mount namespace each (private /tmp, /var/tmp, /dev/shm; no other execution's folder), but /proc is the host's: programs that run as one user can read each other's environment and folders through /proc/PID (docs/execution.md#security-model)"
        ),
        _ => tracing::warn!(
            "this host makes no mount namespace for the server (it needs root or CAP_SYS_ADMIN): programs that run as one user can read each other's files, environment and processes (docs/execution.md#security-model)"
        ),
    }
    Ok((isolation, separation))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(cgroup: Option<Result<CgroupParent, CgroupError>>, pid_namespace: bool) -> HostProbe {
        HostProbe {
            cgroup,
            pid_namespace,
        }
    }

    // Issue 22, finding 2: with nothing that contains descendants, `auto` refuses to start
    // and names the weaker mode an operator may accept.
    #[test]
    fn auto_without_cgroup_or_namespace_refuses_and_names_process_group() {
        let error = match choose(IsolationMode::Auto, host(None, false)) {
            Err(e) => e.to_string(),
            Ok(chosen) => panic!("started with {chosen:?}"),
        };
        assert!(
            error.contains("exec.isolation = \"process-group\""),
            "{error}"
        );
        let unusable = CgroupError {
            path: "/nowhere".into(),
            problem: "is not under a cgroup v2 mount".into(),
        };
        let error = choose(IsolationMode::Auto, host(Some(Err(unusable)), false))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(error.contains("/nowhere"), "{error}");
    }

    // Review of issue 22, finding 2: a program running as the owner of the cgroup tree
    // (a server on a delegated subtree, its programs without `uid`) could move itself out
    // of its cgroup; such an entry is refused at start-up.
    #[test]
    fn a_program_running_as_the_cgroup_trees_owner_is_refused() {
        use std::os::unix::fs::MetadataExt as _;
        let dir = std::env::temp_dir().join(format!("otpmcp-owner-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        // A tree owned by a user other than root (as a delegated subtree is).
        if std::fs::metadata(&dir).map(|m| m.uid()).unwrap_or(0) == 0 {
            std::os::unix::fs::chown(&dir, Some(4242), None).unwrap_or_else(|e| panic!("{e}"));
        }
        let owner = std::fs::metadata(&dir).map(|m| m.uid()).unwrap_or(0);
        let with_uid = |uid: Option<u32>| {
            let mut settings = ExecConfig::default();
            let program = crate::config::ProgramConfig {
                command: vec!["/bin/cat".into()],
                uid,
                ..Default::default()
            };
            settings.programs.insert("cat".into(), program);
            settings
        };
        let refused = |r: Result<(), IsolationError>| matches!(r, Err(IsolationError::CgroupOwner { uid, .. }) if uid == owner);
        assert!(refused(check_owner(&with_uid(Some(owner)), &dir, 0)));
        assert!(refused(check_owner(&with_uid(None), &dir, owner)));
        assert!(check_owner(&with_uid(None), &dir, owner + 1).is_ok());
        assert!(check_owner(&with_uid(Some(owner + 1)), &dir, owner).is_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn auto_prefers_a_namespace_when_no_cgroup_and_explicit_modes_are_kept() {
        let chosen = choose(IsolationMode::Auto, host(None, true))
            .ok()
            .map(|i| i.mode());
        assert_eq!(chosen, Some(IsolationMode::PidNamespace));
        let chosen = choose(IsolationMode::ProcessGroup, host(None, true))
            .ok()
            .map(|i| i.mode());
        assert_eq!(chosen, Some(IsolationMode::ProcessGroup));
        assert!(matches!(
            choose(IsolationMode::PidNamespace, host(None, false)),
            Err(IsolationError::PidNamespace)
        ));
    }
}
