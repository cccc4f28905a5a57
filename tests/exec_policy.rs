//! What a client may make a configured program do (`[exec]`): each program's argument
//! policy and pattern, the start-up refusal of programs that run other programs, the
//! run-as rule with `[auth]`, and a server whose `/proc/<pid>` its programs cannot read.
//! Real processes throughout: the in-process server, and the real binary for the last.

mod common;

use std::io::BufRead as _;
use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::time::Duration;

use common::{Client, TestServer, within};
use otpmcp::config::{ArgsPolicy, Config, NonZeroDuration, ProgramConfig};
use serde_json::{Value, json};

fn program(command: &[&str], tweak: impl FnOnce(&mut ProgramConfig)) -> ProgramConfig {
    let mut p = ProgramConfig {
        command: command.iter().map(|s| s.to_string()).collect(),
        wall_time: NonZeroDuration::from_secs(10),
        ..ProgramConfig::default()
    };
    tweak(&mut p);
    p
}

fn exec_with(programs: Vec<(&'static str, ProgramConfig)>) -> impl FnOnce(&mut Config) {
    move |c| {
        c.exec.enabled = true;
        c.exec.kill_grace = Duration::from_millis(300);
        for (name, p) in programs {
            c.exec.programs.insert(name.into(), p);
        }
    }
}

async fn call(client: &Client, program: &str, args: &[&str]) -> Value {
    let arguments = json!({"program": program, "args": args});
    let answer = client
        .ask(
            "tools/call",
            json!({"name": "execute", "arguments": arguments}),
        )
        .await;
    answer["result"].clone()
}

fn text(result: &Value) -> String {
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn validation_error(config: &Config) -> String {
    config
        .validate()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default()
}

/// A path of plain characters: what `find` and `cat` take here.
const PATHS: &str = "[A-Za-z0-9_./-]+";

fn config_with(name: &str, p: ProgramConfig) -> Config {
    let mut config = common::test_config();
    config.exec.enabled = true;
    config.exec.programs.insert(name.into(), p);
    config
}

// Issue 22, finding 3: `find .` + `-exec /bin/sh -c ...` ran what the client chose.
#[tokio::test]
#[cfg_attr(
    not(otpmcp_as_root),
    ignore = "needs root (PID namespaces, cgroups, other users); ./scripts/test as root runs it"
)]
async fn find_exec_is_refused_under_the_default_policy() {
    let server = TestServer::start(exec_with(vec![(
        "find",
        program(&["/usr/bin/find", "."], |p| {
            p.args_pattern = Some(PATHS.into())
        }),
    )]))
    .await;
    let mut client = server.client();
    client.initialize().await;
    let refused = call(&client, "find", &["-exec", "/bin/echo", "MARKER", ";"]).await;
    assert_eq!(refused["isError"], true, "{refused}");
    let message = text(&refused);
    assert!(
        message.contains("\"-exec\"") && message.contains("no-options"),
        "{message}"
    );
    assert!(
        refused["structuredContent"].is_null(),
        "nothing ran: {refused}"
    );
    // An argument that is no option still runs.
    let ran = call(&client, "find", &["."]).await;
    assert_eq!(ran["structuredContent"]["exitCode"], 0, "{ran}");
    server.shutdown().await;
}

// Issue 22, finding 3: `args = "after-separator"` puts `--` first, so find reads `-exec`
// after it as no predicate of its own: nothing runs (GNU find: "unknown predicate `--'").
#[tokio::test]
#[cfg_attr(
    not(otpmcp_as_root),
    ignore = "needs root (PID namespaces, cgroups, other users); ./scripts/test as root runs it"
)]
async fn after_separator_and_none_and_the_pattern_hold() {
    let server = TestServer::start(exec_with(vec![
        (
            "find",
            program(&["/usr/bin/find", "."], |p| {
                p.args = ArgsPolicy::AfterSeparator;
                // Anything: what is tested is the separator.
                p.args_pattern = Some(".*".into());
            }),
        ),
        (
            "date",
            program(&["/bin/date"], |p| p.args = ArgsPolicy::None),
        ),
        (
            "echo",
            program(&["/bin/echo"], |p| p.args_pattern = Some("[a-z]+".into())),
        ),
    ]))
    .await;
    let mut client = server.client();
    client.initialize().await;

    let find = call(&client, "find", &["-exec", "/bin/echo", "MARKER", ";"]).await;
    let outcome = &find["structuredContent"];
    assert_ne!(outcome["exitCode"], 0, "{find}");
    assert!(
        !outcome["stdout"]
            .as_str()
            .unwrap_or_default()
            .contains("MARKER"),
        "{find}"
    );

    let date = call(&client, "date", &["+%s"]).await;
    assert_eq!(date["isError"], true, "{date}");
    assert!(text(&date).contains("takes no args"), "{date}");
    let plain = call(&client, "date", &[]).await;
    assert_eq!(plain["structuredContent"]["exitCode"], 0, "{plain}");

    let echo = call(&client, "echo", &["abc", "x y"]).await;
    assert_eq!(echo["isError"], true, "{echo}");
    assert!(
        text(&echo).contains("\"x y\"") && text(&echo).contains("args_pattern"),
        "{echo}"
    );
    let fine = call(&client, "echo", &["abc", "def"]).await;
    assert_eq!(fine["structuredContent"]["stdout"], "abc def\n", "{fine}");
    server.shutdown().await;
}

// Issue 36, finding 8: the list of programs that run other code is a denylist, so a
// program it misses took any argument a client sent. Now a program that is no runner
// takes client arguments only with an `args_pattern` or when it is inert; the server
// refuses to start otherwise, naming the key and why.
#[tokio::test]
async fn a_program_that_takes_arguments_without_a_pattern_refuses_to_start() {
    let mut config = config_with("finder", program(&["/usr/bin/find", "."], |_| {}));
    let error = match otpmcp::start(config.clone()).await {
        Ok(app) => {
            app.shutdown().await;
            panic!("started with find taking any non-option argument");
        }
        Err(e) => e.to_string(),
    };
    assert!(
        error.contains("exec.programs.finder.args_pattern")
            && error.contains("/usr/bin/find")
            && error.contains("inert"),
        "{error}"
    );
    // Each way out: a pattern, no arguments, or an inert program.
    let fixes: [fn(&mut ProgramConfig); 3] = [
        |p| p.args_pattern = Some(PATHS.into()),
        |p| p.args = ArgsPolicy::None,
        |p| p.command = vec!["/bin/echo".into()],
    ];
    for fix in fixes {
        if let Some(p) = config.exec.programs.get_mut("finder") {
            let mut fixed = p.clone();
            fix(&mut fixed);
            let mut config = config.clone();
            config.exec.programs.insert("finder".into(), fixed);
            assert!(config.validate().is_ok(), "{:?}", config.validate().err());
        }
    }
    // A program the old denylist missed is a runner now (judged by the name it is
    // configured by, too).
    let dir = std::env::temp_dir().join(format!("otpmcp-socat-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let socat = dir.join("socat");
    std::os::unix::fs::symlink("/bin/true", &socat).unwrap_or_else(|e| panic!("{e}"));
    let config = config_with(
        "relay",
        program(&[&*socat.to_string_lossy()], |p| p.args = ArgsPolicy::None),
    );
    let error = validation_error(&config);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(error.contains("shell = true"), "{error}");
}

#[test]
fn an_invalid_args_pattern_is_a_start_up_error() {
    let config = config_with(
        "echo",
        program(&["/bin/echo"], |p| p.args_pattern = Some("(".into())),
    );
    assert!(
        validation_error(&config).contains("args_pattern"),
        "{}",
        validation_error(&config)
    );
}

// Issue 22, finding 3: only a basename was compared with a list of shells, so `env`, an
// interpreter without `-c`, or a symlink to a shell under another name passed.
#[test]
#[cfg_attr(
    not(otpmcp_python3),
    ignore = "needs python3 (/usr/bin/python3); ./scripts/test runs it"
)]
fn programs_that_run_other_programs_need_shell_true() {
    let dir = std::env::temp_dir().join(format!("otpmcp-policy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let link = dir.join("report");
    std::os::unix::fs::symlink("/bin/sh", &link).unwrap_or_else(|e| panic!("{e}"));
    let link = link.to_string_lossy().into_owned();
    for command in [
        vec!["/usr/bin/env"],
        vec!["/usr/bin/python3"],
        vec!["/usr/bin/xargs"],
        vec![link.as_str()],
    ] {
        let mut config = config_with("p", program(&command, |_| {}));
        let error = validation_error(&config);
        assert!(
            error.contains("shell = true") && error.contains(command[0]),
            "{command:?}: {error:?}"
        );
        if let Some(p) = config.exec.programs.get_mut("p") {
            p.shell = true;
        }
        assert!(config.validate().is_ok(), "{command:?} with shell = true");
    }
    // The symlink's error names the file it resolves to.
    let config = config_with("p", program(&[link.as_str()], |_| {}));
    let resolved = std::fs::canonicalize("/bin/sh").unwrap_or_default();
    assert!(
        validation_error(&config).contains(&*resolved.to_string_lossy()),
        "{}",
        validation_error(&config)
    );
    // Ordinary programs pass; one that does not exist does not.
    assert!(
        config_with("p", program(&["/bin/cat"], |p| p.args = ArgsPolicy::None))
            .validate()
            .is_ok()
    );
    let missing = config_with("p", program(&["/no/such/program"], |_| {}));
    assert!(validation_error(&missing).contains("does not resolve"));
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 22, finding 4: with [auth] on, a program without `uid` ran as the server's user.
#[test]
fn with_auth_a_program_needs_a_uid_or_says_it_runs_as_the_server() {
    let mut config = config_with(
        "cat",
        program(&["/bin/cat"], |p| p.args_pattern = Some(PATHS.into())),
    );
    config.auth.enabled = true;
    config.auth.issuer = "http://127.0.0.1:1".into();
    config.auth.audience = "http://mcp.test/mcp".into();
    let error = validation_error(&config);
    assert!(
        error.contains("`cat`") && error.contains("uid") && error.contains("run_as_server_user"),
        "{error:?}"
    );
    let mut said = config.clone();
    if let Some(p) = said.exec.programs.get_mut("cat") {
        p.run_as_server_user = true;
    }
    assert!(said.validate().is_ok());
    if let Some(p) = config.exec.programs.get_mut("cat") {
        p.uid = Some(65534);
    }
    assert!(config.validate().is_ok());
}

/// The real binary with `overlay` (a TOML text) over config/test.toml, run as `nobody`
/// when the tests run as root (so that the server is not root, as in production), with
/// `SECRET` in its environment. As nobody it runs from a fresh folder of its own under
/// the temp folder: the checkout may lie where only root can enter (root's home).
struct Server {
    child: std::process::Child,
    url: String,
    _dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self._dir);
    }
}

const SECRET: &str = "OTPMCP_POLICY_TEST_SECRET=do-not-read-me";

async fn binary(overlay: &str) -> Server {
    let dir = std::env::temp_dir().join(format!("otpmcp-dumpable-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("exec.toml");
    std::fs::write(&file, overlay).unwrap_or_else(|e| panic!("{e}"));
    let root = std::fs::metadata("/proc/self").map(|m| m.uid()).ok() == Some(0);
    let mut exe = PathBuf::from(env!("CARGO_BIN_EXE_otpmcp"));
    let mut base = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/config/test.toml"));
    if root {
        // Nobody may not reach target/ or config/ (a checkout under /root, a 0700
        // folder): a link (or copy) of the binary and a copy of the overlay in `dir`.
        use std::os::unix::fs::PermissionsExt as _;
        let world = std::fs::Permissions::from_mode(0o755);
        std::fs::set_permissions(&dir, world).unwrap_or_else(|e| panic!("{e}"));
        let own = dir.join("otpmcp");
        if std::fs::hard_link(&exe, &own).is_err() {
            std::fs::copy(&exe, &own).unwrap_or_else(|e| panic!("copy the binary: {e}"));
        }
        let copy = dir.join("test.toml");
        std::fs::copy(&base, &copy).unwrap_or_else(|e| panic!("{e}"));
        (exe, base) = (own, copy);
    }
    let mut command = std::process::Command::new(&exe);
    command
        .arg("--config")
        .arg(&base)
        .arg("--config")
        .arg(&file)
        .env(
            SECRET.split('=').next().unwrap_or_default(),
            SECRET.split('=').nth(1).unwrap_or_default(),
        )
        .current_dir(&dir)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    if root {
        command.uid(65534).gid(65534);
    }
    let mut child = command.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let line = within(
        "the URL line",
        tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            line
        }),
    )
    .await
    .unwrap_or_default();
    let url = line
        .trim()
        .strip_prefix("otpmcp serving MCP at ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    Server {
        child,
        url,
        _dir: dir,
    }
}

// Issue 22, finding 4: a program running as the server's user read
// /proc/<server pid>/environ (the introspection secret, the Redis URL). The server is
// now non-dumpable: those files are root's.
#[tokio::test]
async fn a_program_as_the_servers_user_cannot_read_the_servers_environment() {
    // The server runs as nobody, who can make neither a cgroup nor a PID namespace:
    // process-group isolation is what such a server has.
    let server = binary(
        "[exec]\nenabled = true\nisolation = \"process-group\"\n[exec.programs.cat]\ncommand = [\"/bin/cat\"]\nargs_pattern = \"/proc/[0-9]+/environ\"\nwall_time = \"10s\"\n",
    )
    .await;
    let mut client = Client::new(&server.url);
    client.initialize().await;
    let environ = format!("/proc/{}/environ", server.child.id());
    let result = call(&client, "cat", &[environ.as_str()]).await;
    let outcome = &result["structuredContent"];
    assert!(outcome.is_object(), "{result}");
    assert!(!result.to_string().contains("do-not-read-me"), "{result}");
    assert_eq!(outcome["exitCode"], 1, "{result}");
    assert!(
        outcome["stderr"]
            .as_str()
            .unwrap_or_default()
            .contains("Permission denied"),
        "{result}"
    );
}
