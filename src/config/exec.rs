//! `[exec]`: supervised execution of configured programs (off by default).

use std::collections::BTreeMap;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, NonZeroDuration, human_duration, nz};
use super::error::{ConfigError, invalid};
use super::secret::Secret;

/// Supervised execution of configured programs: the tools `execute`,
/// `get_execution_output`, `list_executions` and `cancel_execution`. Off by default. Only
/// programs listed under `[exec.programs.NAME]` run, never through a shell;
/// [execution.md](execution.md) has the security model and examples. A rule below that
/// fails exits 2 naming the key.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ExecConfig {
    /// Offer the four tools. Off: no tool, no supervisor, no process is started.
    pub enabled: bool,
    /// Executions running at once on this replica; past it `execute` fails.
    pub max_running: NonZeroUsize,
    /// Executions one session (without a session, one principal) runs at once; callers with
    /// neither share one count.
    pub max_per_session: NonZeroUsize,
    /// An output chunk is cut at this many bytes (at least 4, never inside a UTF-8
    /// character), or once `chunk_interval` has passed.
    pub chunk_bytes: usize,
    /// An output chunk is also cut when its first byte has waited this long.
    pub chunk_interval: NonZeroDuration,
    /// Between SIGTERM to the process group and SIGKILL (timeout, cancel, session end,
    /// shutdown, output limit).
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub kill_grace: Duration,
    /// How long records and output are kept after an execution ends (on Redis, also at most
    /// `server.session_timeout` after the last chunk).
    pub output_ttl: NonZeroDuration,
    /// The longest `wait_ms` of `get_execution_output`; a longer one is cut to it.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub max_wait: Duration,
    /// How often a long poll on a replica that does not run the execution reads its log
    /// again.
    pub poll_interval: NonZeroDuration,
    /// A running execution renews its record this often; one not renewed for three
    /// intervals is reported `lost`. A cancel from another replica is acted on within one
    /// interval.
    pub heartbeat: NonZeroDuration,
    /// The head of each stream that `execute`'s result carries.
    pub result_bytes: usize,
    /// What keeps an execution's descendants from outliving it
    /// ([execution.md](execution.md#isolation)); the start-up log says which runs. A mode
    /// the host cannot give, or `auto` with neither, and the server does not start.
    pub isolation: IsolationMode,
    /// An absolute directory of the cgroup v2 file system (e.g. `/sys/fs/cgroup/otpmcp`)
    /// under which each execution gets a cgroup; made if missing, it must hold no process
    /// itself, and `pids` and `memory` are enabled for its children where offered. One
    /// server per directory. Empty: unset. Set with `pid-namespace` or `process-group`:
    /// exits 2; unusable: `cgroup` does not start, `auto` warns and uses a PID namespace.
    pub cgroup_parent: PathBuf,
    /// Keep executions from seeing each other where the host allows it (root or
    /// CAP_SYS_ADMIN): a mount namespace each, with a private tmpfs over `/tmp`,
    /// `/var/tmp`, `/dev/shm` and `workdir_root` (its own folder bound back), and, except
    /// in `process-group` mode, a PID namespace with a `/proc` of its own. Where the host
    /// cannot, a start-up warning.
    pub separate: bool,
    /// The programs `execute` may run, by name.
    pub programs: BTreeMap<String, ProgramConfig>,
}

impl Default for ExecConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            max_running: nz!(16),
            max_per_session: nz!(4),
            chunk_bytes: 16 * 1024,
            chunk_interval: NonZeroDuration::from_millis(20),
            kill_grace: Duration::from_secs(2),
            output_ttl: NonZeroDuration::from_secs(3600),
            max_wait: Duration::from_secs(30),
            poll_interval: NonZeroDuration::from_millis(100),
            heartbeat: NonZeroDuration::from_secs(2),
            result_bytes: 64 * 1024,
            isolation: IsolationMode::Auto,
            cgroup_parent: PathBuf::new(),
            separate: true,
            programs: BTreeMap::new(),
        }
    }
}

/// `exec.isolation`: how an execution's descendants are kept from outliving it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// a cgroup when `cgroup_parent` is set and usable, else a PID namespace when the host
    /// allows one; else the server refuses to start.
    #[default]
    Auto,
    /// a cgroup v2 per execution under `cgroup_parent`, killed whole (`cgroup.kill`).
    Cgroup,
    /// a PID namespace per execution, whose init's exit kills the rest.
    PidNamespace,
    /// the process group only: a descendant that calls `setsid` escapes it. Must be
    /// asked for by name.
    ProcessGroup,
}

impl IsolationMode {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Cgroup => "cgroup",
            Self::PidNamespace => "pid-namespace",
            Self::ProcessGroup => "process-group",
        }
    }
}

/// One program `execute` may run, and its limits: a table per program name. With `[auth]`
/// on, each entry needs `uid` or `run_as_server_user = true`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ProgramConfig {
    /// The argv prefix: an absolute path to an existing file, then fixed arguments; the
    /// call's `args` are appended as `args` allows. Run directly, never through a shell.
    pub command: Vec<String>,
    /// Say that `command` runs code or programs its arguments or stdin name: a shell, a
    /// wrapper (`env`, `xargs`, `sudo`, `git`, …) or an interpreter (`python*`, `node`,
    /// `awk`, `make`, …), judged by the file the path resolves to and by its name
    /// ([execution.md](execution.md#what-a-client-may-pass) has the list). Such an entry
    /// without it exits 2.
    pub shell: bool,
    /// What the program is for, shown in `execute`'s description.
    pub description: String,
    /// Each execution runs in a new directory `otpmcp-exec-ID` under it (mode 0700, owned
    /// by `uid`; also its `HOME` and `TMPDIR`), removed on every path out. Unset: the
    /// system's temporary directory. Not absolute, or `/`: exits 2.
    pub workdir_root: Option<PathBuf>,
    /// Variables passed through from the server's environment; nothing else is inherited.
    pub env_allow: Vec<String>,
    /// Variables set for the program.
    pub env: BTreeMap<String, Secret>,
    /// Run as this user, supplementary groups dropped (switching needs a root server).
    /// Unset: the server's user.
    pub uid: Option<u32>,
    /// Run as this group (with `uid` only). Unset: the server's group.
    pub gid: Option<u32>,
    /// Wall time, and the largest `timeout_ms` a call may ask; past it SIGTERM,
    /// `kill_grace`, SIGKILL and status `timeout`.
    pub wall_time: NonZeroDuration,
    /// RLIMIT_CPU: SIGXCPU at the limit, SIGKILL a second later. 0: none.
    pub cpu_seconds: u64,
    /// RLIMIT_AS (address space, per process), and `memory.max` of the execution's cgroup
    /// where delegated. 0: none.
    pub memory_bytes: u64,
    /// Output bytes kept, both streams together; past it the execution is stopped with
    /// status `output_limit`.
    pub output_bytes: u64,
    /// RLIMIT_NPROC, processes of the program's user (not enforced for root: set `uid`),
    /// and `pids.max` of the execution's cgroup where delegated. 0: none.
    pub processes: u64,
    /// RLIMIT_NOFILE. 0: inherited.
    pub open_files: u64,
    /// RLIMIT_FSIZE, the largest file the program may write (SIGXFSZ past it). 0: none.
    pub file_bytes: u64,
    /// Largest `stdin` a call may give.
    pub max_stdin_bytes: usize,
    /// Most `args` a call may append.
    pub max_args: usize,
    /// What a call's `args` may be; a call that breaks it gets the tool's error and nothing
    /// runs.
    pub args: ArgsPolicy,
    /// A regular expression ([regex-lite](https://docs.rs/regex-lite)) every argument must
    /// match in full, besides `args`. Required where `shell = false` and clients may pass
    /// arguments, unless the command is an inert program (`echo`, `printf`, `true`, `seq`,
    /// `basename`, `sleep`, `tr`, …).
    pub args_pattern: Option<String>,
    /// With `[auth]` on, lets an entry without `uid` run as the server's user, which can
    /// read what that user can: files, and the store through them.
    pub run_as_server_user: bool,
}

/// `args` of `[exec.programs.NAME]`: what a call's arguments may be. Options are where
/// most programs hide "run this" (`find -exec`, `git -c`, `tar --to-command`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum ArgsPolicy {
    /// no arguments at all.
    None,
    /// any argument but one that begins with `-`.
    #[default]
    NoOptions,
    /// any argument, after a `--` put between the configured command and them (unless
    /// the command already ends with `--`); only as good as the program's own `--`.
    AfterSeparator,
    /// anything: the program must be safe with whatever a client appends.
    Any,
}

impl ArgsPolicy {
    /// Its name in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::NoOptions => "no-options",
            Self::AfterSeparator => "after-separator",
            Self::Any => "any",
        }
    }
}

impl Default for ProgramConfig {
    fn default() -> Self {
        Self {
            command: Vec::new(),
            shell: false,
            description: String::new(),
            workdir_root: None,
            env_allow: vec!["PATH".into(), "LANG".into()],
            env: BTreeMap::new(),
            uid: None,
            gid: None,
            wall_time: NonZeroDuration::from_secs(30),
            cpu_seconds: 30,
            memory_bytes: 1 << 30,
            output_bytes: 16 << 20,
            processes: 0,
            open_files: 256,
            file_bytes: 1 << 30,
            max_stdin_bytes: 1 << 20,
            max_args: 64,
            args: ArgsPolicy::NoOptions,
            args_pattern: None,
            run_as_server_user: false,
        }
    }
}

impl ExecConfig {
    /// Checks what serde cannot; only when `enabled`.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if !self.enabled {
            return Ok(());
        }
        if self.chunk_bytes < 4 {
            return invalid("exec.chunk_bytes", "must be at least 4");
        }
        let parent = &self.cgroup_parent;
        let parent_set = !parent.as_os_str().is_empty();
        if parent_set && !parent.is_absolute() {
            return invalid(
                "exec.cgroup_parent",
                "must be an absolute path (a directory of the cgroup v2 file system)",
            );
        }
        match self.isolation {
            IsolationMode::Cgroup if !parent_set => {
                return invalid(
                    "exec.isolation",
                    "\"cgroup\" needs exec.cgroup_parent (a cgroup v2 directory)",
                );
            }
            IsolationMode::PidNamespace | IsolationMode::ProcessGroup if parent_set => {
                return invalid(
                    "exec.cgroup_parent",
                    format!(
                        "is used only with exec.isolation = \"cgroup\" or \"auto\", not \"{}\"",
                        self.isolation.as_str()
                    ),
                );
            }
            _ => {}
        }
        for (name, program) in &self.programs {
            let problem = |why: &str| invalid("exec.programs", format!("`{name}`: {why}"));
            let Some(path) = program.command.first() else {
                return problem("command must name a program");
            };
            if !path.starts_with('/') {
                return problem("command must start with an absolute path");
            }
            match super::runners::runner(Path::new(path)) {
                Err(e) => return problem(&format!("command {path} does not resolve: {e}")),
                Ok(Some(runner)) if !program.shell => {
                    return problem(&format!(
                        "command {path} (resolved: {}) is {}, so a client could run anything with it: set `shell = true` to allow it",
                        runner.resolved.display(),
                        runner.why
                    ));
                }
                Ok(_) => {}
            }
            let inert = match program.shell {
                true => false,
                false => match super::runners::inert(Path::new(path)) {
                    Ok(inert) => inert,
                    Err(e) => return problem(&format!("command {path} does not resolve: {e}")),
                },
            };
            if let Some(why) = program.client_args_refused(inert) {
                return problem(&format!(
                    "exec.programs.{name}.args_pattern is not set: {why}"
                ));
            }
            if let Err(e) = program.args_regex() {
                return problem(&format!("args_pattern is not a valid expression: {e}"));
            }
            // Each execution's mount namespace covers the root with a tmpfs of its own.
            if let Some(root) = &program.workdir_root
                && (!root.is_absolute() || root.parent().is_none())
            {
                return problem("workdir_root must be an absolute path other than /");
            }
            if program.gid.is_some() && program.uid.is_none() {
                return problem("gid needs uid");
            }
        }
        Ok(())
    }
}

impl ProgramConfig {
    /// Why this entry may not take a client's arguments as configured, if it may not: a
    /// program that is no runner (`shell = false`) takes them only with an
    /// `args_pattern`, or when it is one of the inert programs (`inert`: judged by the
    /// file its command resolves to) or takes none (`args = "none"`).
    pub fn client_args_refused(&self, inert: bool) -> Option<String> {
        if self.shell || self.args == ArgsPolicy::None || self.args_pattern.is_some() || inert {
            return None;
        }
        let command = self.command.first().map(String::as_str).unwrap_or("");
        Some(format!(
            "{command} takes a client's arguments (args = \"{}\") but is not one of the inert programs ({}), which are the only ones that take them without a pattern: set args_pattern to a regular expression every argument must match in full, or args = \"none\" (docs/execution.md#what-a-client-may-pass)",
            self.args.as_str(),
            super::runners::INERT.join(", ")
        ))
    }

    /// `args_pattern` compiled to match a whole argument, if there is one.
    pub fn args_regex(&self) -> Result<Option<regex_lite::Regex>, regex_lite::Error> {
        self.args_pattern
            .as_deref()
            .map(|pattern| regex_lite::Regex::new(&format!("^(?:{pattern})$")))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tweak: impl FnOnce(&mut ProgramConfig)) -> ProgramConfig {
        let mut program = ProgramConfig {
            command: vec!["/usr/bin/find".into(), ".".into()],
            ..ProgramConfig::default()
        };
        tweak(&mut program);
        program
    }

    // Issue 36, finding 8: a program that is no runner takes a client's arguments only
    // with a pattern, when it is inert, or not at all; the refusal says what to set.
    #[test]
    fn client_arguments_are_allowed_only_by_pattern_or_to_inert_programs() {
        for policy in [
            ArgsPolicy::NoOptions,
            ArgsPolicy::AfterSeparator,
            ArgsPolicy::Any,
        ] {
            let why = entry(|p| p.args = policy).client_args_refused(false);
            let why = why.unwrap_or_else(|| panic!("{policy:?} without a pattern passed"));
            assert!(
                why.contains("/usr/bin/find")
                    && why.contains(policy.as_str())
                    && why.contains("args_pattern")
                    && why.contains("echo"),
                "{why}"
            );
            assert_eq!(entry(|p| p.args = policy).client_args_refused(true), None);
        }
        let with_pattern = entry(|p| p.args_pattern = Some("[a-z]+".into()));
        assert_eq!(with_pattern.client_args_refused(false), None);
        let none = entry(|p| p.args = ArgsPolicy::None);
        assert_eq!(none.client_args_refused(false), None);
        let shell = entry(|p| p.shell = true);
        assert_eq!(shell.client_args_refused(false), None);
    }

    // The whole check, with real files: `find` is refused naming the key, `echo` passes.
    #[test]
    fn validation_refuses_a_program_with_open_arguments() {
        let config = |command: &str, tweak: fn(&mut ProgramConfig)| {
            let mut settings = ExecConfig {
                enabled: true,
                ..ExecConfig::default()
            };
            let mut program = entry(tweak);
            program.command = vec![command.into()];
            settings.programs.insert("p".into(), program);
            settings.validate().err().map(|e| e.to_string())
        };
        let refused = config("/usr/bin/find", |_| {}).unwrap_or_default();
        assert!(
            refused.contains("exec.programs.p.args_pattern") && refused.contains("inert"),
            "{refused}"
        );
        assert_eq!(config("/bin/echo", |_| {}), None);
        assert_eq!(config("/usr/bin/find", |p| p.args = ArgsPolicy::None), None);
    }
}
