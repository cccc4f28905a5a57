//! Programs that run code or other programs their arguments name: shells, interpreters
//! and wrappers such as `env` or `xargs`. An `[exec.programs.NAME]` entry whose command
//! is one of them hands the client a shell, so it must say `shell = true`.
//!
//! The check looks at the file the command really is (symlinks followed), as well as the
//! name it was configured by: `/bin/sh` may be `dash` or `busybox`, `/usr/bin/python3`
//! is `python3.11`, and a symlink named `tool` may be `bash`.

use std::path::{Path, PathBuf};

/// Why a program counts as a runner, shown in the start-up error.
const SHELL: &str = "a shell";
const WRAPPER: &str = "runs the program its arguments name";
const INTERPRETER: &str = "an interpreter: runs the code its arguments or input give it";

/// Names (without a version suffix) and why each runs other code.
const RUNNERS: &[(&str, &str)] = &[
    // Shells, and the multi-call binaries that are one.
    ("sh", SHELL),
    ("bash", SHELL),
    ("rbash", SHELL),
    ("dash", SHELL),
    ("ash", SHELL),
    ("zsh", SHELL),
    ("ksh", SHELL),
    ("mksh", SHELL),
    ("pdksh", SHELL),
    ("yash", SHELL),
    ("fish", SHELL),
    ("csh", SHELL),
    ("tcsh", SHELL),
    ("nu", SHELL),
    ("elvish", SHELL),
    ("xonsh", SHELL),
    ("pwsh", SHELL),
    ("powershell", SHELL),
    ("busybox", SHELL),
    ("toybox", SHELL),
    // Wrappers: their operands are a program and its arguments.
    ("env", WRAPPER),
    ("xargs", WRAPPER),
    ("parallel", WRAPPER),
    ("nohup", WRAPPER),
    ("timeout", WRAPPER),
    ("sudo", WRAPPER),
    ("doas", WRAPPER),
    ("su", WRAPPER),
    ("runuser", WRAPPER),
    ("setpriv", WRAPPER),
    ("nice", WRAPPER),
    ("ionice", WRAPPER),
    ("chrt", WRAPPER),
    ("taskset", WRAPPER),
    ("prlimit", WRAPPER),
    ("setsid", WRAPPER),
    ("stdbuf", WRAPPER),
    ("chroot", WRAPPER),
    ("unshare", WRAPPER),
    ("nsenter", WRAPPER),
    ("flock", WRAPPER),
    ("strace", WRAPPER),
    ("ltrace", WRAPPER),
    ("valgrind", WRAPPER),
    ("gdb", WRAPPER),
    ("time", WRAPPER),
    ("watch", WRAPPER),
    ("script", WRAPPER),
    ("capsh", WRAPPER),
    ("systemd-run", WRAPPER),
    ("firejail", WRAPPER),
    ("bwrap", WRAPPER),
    ("fakeroot", WRAPPER),
    ("catchsegv", WRAPPER),
    ("expect", WRAPPER),
    ("tmux", WRAPPER),
    ("screen", WRAPPER),
    // GNU tar's first argument may be bundled options without a dash (`cIf PROG`).
    ("tar", WRAPPER),
    // Package runners and container tools: their operands name a package or an image
    // to fetch and run, or a command to run in a container.
    ("npx", WRAPPER),
    ("npm", WRAPPER),
    ("pnpm", WRAPPER),
    ("pnpx", WRAPPER),
    ("yarn", WRAPPER),
    ("bunx", WRAPPER),
    ("uv", WRAPPER),
    ("uvx", WRAPPER),
    ("pipx", WRAPPER),
    ("pip", WRAPPER),
    ("go", WRAPPER),
    ("cargo", WRAPPER),
    ("docker", WRAPPER),
    ("podman", WRAPPER),
    ("nerdctl", WRAPPER),
    ("kubectl", WRAPPER),
    // Issue 36, finding 8. `socat EXEC:`/`SYSTEM:` addresses; `at`/`batch` hand a command
    // to atd, outside every isolation; the dynamic loader (`ld-linux*.so*`, matched by
    // prefix below) runs the program it is given; `sg GROUP CMD`, `pkexec`, `runcon`,
    // `xvfb-run`, `unbuffer` and `perf record/stat/trace` run a command; `poetry`, `pipenv`,
    // `conda` and `bundle` have `run`/`exec`; `git bisect run`, `-c core.pager=...` and
    // aliases run commands.
    ("socat", WRAPPER),
    ("at", WRAPPER),
    ("batch", WRAPPER),
    ("sg", WRAPPER),
    ("pkexec", WRAPPER),
    ("runcon", WRAPPER),
    ("xvfb-run", WRAPPER),
    ("unbuffer", WRAPPER),
    ("perf", WRAPPER),
    ("poetry", WRAPPER),
    ("pipenv", WRAPPER),
    ("conda", WRAPPER),
    ("bundle", WRAPPER),
    ("bundler", WRAPPER),
    ("git", WRAPPER),
    // Interpreters, and tools with a command language that can run programs.
    ("python", INTERPRETER),
    ("pythonw", INTERPRETER),
    ("ipython", INTERPRETER),
    ("pypy", INTERPRETER),
    ("perl", INTERPRETER),
    ("ruby", INTERPRETER),
    ("irb", INTERPRETER),
    ("node", INTERPRETER),
    ("nodejs", INTERPRETER),
    ("deno", INTERPRETER),
    ("bun", INTERPRETER),
    ("php", INTERPRETER),
    ("php-cgi", INTERPRETER),
    ("lua", INTERPRETER),
    ("luajit", INTERPRETER),
    ("tclsh", INTERPRETER),
    ("wish", INTERPRETER),
    ("rscript", INTERPRETER),
    ("r", INTERPRETER),
    ("julia", INTERPRETER),
    ("java", INTERPRETER),
    ("jshell", INTERPRETER),
    ("groovy", INTERPRETER),
    ("scala", INTERPRETER),
    ("kotlin", INTERPRETER),
    ("dotnet", INTERPRETER),
    ("mono", INTERPRETER),
    ("guile", INTERPRETER),
    ("racket", INTERPRETER),
    ("sbcl", INTERPRETER),
    ("ocaml", INTERPRETER),
    ("erl", INTERPRETER),
    ("escript", INTERPRETER),
    ("elixir", INTERPRETER),
    ("awk", INTERPRETER),
    ("gawk", INTERPRETER),
    ("mawk", INTERPRETER),
    ("nawk", INTERPRETER),
    ("busybox-awk", INTERPRETER),
    // GNU sed's `e` command runs a shell command.
    ("sed", INTERPRETER),
    ("ed", INTERPRETER),
    ("ex", INTERPRETER),
    ("vi", INTERPRETER),
    ("vim", INTERPRETER),
    ("nvim", INTERPRETER),
    ("emacs", INTERPRETER),
    ("make", INTERPRETER),
    ("gmake", INTERPRETER),
    ("osascript", INTERPRETER),
    // Database shells and calculators whose commands (as arguments or on stdin) include a
    // shell escape: `sqlite3 :memory: .shell`, psql's and mysql's `\!`, dc's `!`.
    ("sqlite", INTERPRETER),
    ("psql", INTERPRETER),
    ("mysql", INTERPRETER),
    ("mariadb", INTERPRETER),
    ("dc", INTERPRETER),
    // Issue 36, finding 8: m4's `syscmd`/`esyscmd`, gnuplot's `system` and `!`, and the
    // `~!` escape of mail/mailx run shell commands.
    ("m4", INTERPRETER),
    ("gnuplot", INTERPRETER),
    ("mail", INTERPRETER),
    ("mailx", INTERPRETER),
    ("bsd-mailx", INTERPRETER),
    ("s-nail", INTERPRETER),
];

/// The dynamic loader: `ld-linux-x86-64.so.2 PROGRAM` runs PROGRAM, whatever its name.
const LOADER: &str = "the dynamic loader: runs the program its arguments name";

/// Programs that may take a client's arguments without an `args_pattern`: none runs
/// code, reads or writes a file, or changes the system, whatever its arguments. Left out
/// on purpose: `cat`, `head`, `wc`, `base64`, `*sum` (read the files they are given),
/// `date` (`-f FILE` prints its lines in errors; `-s` sets the clock), `sort` (`-o`,
/// `--compress-program`), `test` and `realpath` (probe paths), `hostname` (sets it).
pub(super) const INERT: &[&str] = &[
    "echo", "printf", "true", "false", "seq", "expr", "basename", "dirname", "sleep", "yes",
    "factor", "tr", "uname",
];

/// A command that runs other code: the file it really is, and why.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Runner {
    /// The command with every symlink resolved.
    pub resolved: PathBuf,
    /// Why it counts (a shell, a wrapper, an interpreter).
    pub why: &'static str,
}

/// Resolves `command` (symlinks included) and tells whether it, or the name it was
/// configured by, is a runner. A command that does not resolve is an error: it could
/// not run either.
pub(super) fn runner(command: &Path) -> std::io::Result<Option<Runner>> {
    let resolved = std::fs::canonicalize(command)?;
    let why = [command, resolved.as_path()]
        .into_iter()
        .filter_map(|path| path.file_name()?.to_str())
        .find_map(why_runner);
    Ok(why.map(|why| Runner { resolved, why }))
}

/// Whether `command`, as the file it resolves to, is one of the [`INERT`] programs. An
/// error when it does not resolve.
pub(super) fn inert(command: &Path) -> std::io::Result<bool> {
    let resolved = std::fs::canonicalize(command)?;
    let name = resolved.file_name().and_then(|n| n.to_str()).unwrap_or("");
    Ok(INERT.contains(&name))
}

/// Why the file `name` runs other code, if it does. Versioned names count as their
/// program: `python3.11`, `perl5.36`, `php8.2`, `lua5.4`, `tclsh8.6`, `guile-3.0`.
fn why_runner(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    // `ld-linux.so.2`, `ld-linux-x86-64.so.2`, `ld-2.31.so`, `ld-musl-x86_64.so.1`.
    if lower.starts_with("ld-linux") || (lower.starts_with("ld-") && lower.contains(".so")) {
        return Some(LOADER);
    }
    let bare = lower.trim_end_matches(|c: char| c.is_ascii_digit() || matches!(c, '.' | '-' | '_'));
    RUNNERS
        .iter()
        .find(|(runner, _)| *runner == bare || *runner == lower)
        .map(|(_, why)| *why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versioned_and_plain_names_are_recognised() {
        for name in [
            "sh",
            "dash",
            "python3",
            "python3.11",
            "perl5.36.0",
            "php8.2",
            "lua5.4",
            "node18",
            "tclsh8.6",
            "guile-3.0",
            "env",
            "xargs",
            "Rscript",
            "gawk",
            "npx",
            "uvx",
            "docker",
            "sqlite3",
            "psql",
            // Issue 36, finding 8.
            "socat",
            "m4",
            "at",
            "batch",
            "ld-linux-x86-64.so.2",
            "ld-linux.so.2",
            "ld-linux-aarch64.so.1",
            "ld-2.31.so",
            "ld-musl-x86_64.so.1",
            "sg",
            "pkexec",
            "runcon",
            "xvfb-run",
            "unbuffer",
            "perf",
            "poetry",
            "pipenv",
            "conda",
            "bundle",
            "git",
            "gnuplot",
            "mail",
            "mailx",
        ] {
            assert!(why_runner(name).is_some(), "{name}");
        }
        for name in [
            "cat",
            "echo",
            "find",
            "ls",
            "grep",
            "python3-config",
            "shasum",
            "ldd",
            "ld",
            "attr",
            "gitk-less",
        ] {
            assert_eq!(why_runner(name), None, "{name}");
        }
    }

    // Issue 36, finding 8: the inert list is judged by the file a command resolves to,
    // so a link named `echo` to a shell, or busybox's `echo`, is not inert.
    #[test]
    fn only_the_inert_files_themselves_are_inert() {
        let yes = |path: &str| inert(Path::new(path)).unwrap_or(false);
        assert!(yes("/bin/echo") && yes("/usr/bin/seq") && yes("/usr/bin/tr"));
        for path in [
            "/bin/cat",
            "/usr/bin/find",
            "/bin/date",
            "/usr/bin/wc",
            "/bin/sh",
        ] {
            assert!(!yes(path), "{path}");
        }
        let dir = std::env::temp_dir().join(format!("otpmcp-inert-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let link = dir.join("echo");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap_or_else(|e| panic!("{e}"));
        assert!(!inert(&link).unwrap_or(true));
        assert!(inert(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
        for name in INERT {
            assert_eq!(why_runner(name), None, "{name} is inert and a runner");
        }
    }

    #[test]
    fn a_symlink_is_judged_by_what_it_points_to() {
        let dir = std::env::temp_dir().join(format!("otpmcp-runners-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let link = dir.join("harmless");
        std::os::unix::fs::symlink("/bin/sh", &link).unwrap_or_else(|e| panic!("{e}"));
        let found = runner(&link).unwrap_or_else(|e| panic!("{e}"));
        assert!(found.is_some_and(|r| r.why == SHELL));
        assert!(runner(&dir.join("missing")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
