//! docs/configuration.md is the output of `otpmcp config docs`, which writes it from the
//! config types' doc comments and defaults: the committed file must be what the binary
//! prints now, so a changed key, default or doc comment cannot leave the reference behind.

use std::process::Command;

/// What the reference may weigh: it is read whole by operators.
const MAX_BYTES: usize = 40_000;

#[test]
fn configuration_md_is_what_config_docs_prints() {
    let root = env!("CARGO_MANIFEST_DIR");
    let output = Command::new(env!("CARGO_BIN_EXE_otpmcp"))
        .args(["config", "docs"])
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("otpmcp config docs: {e}"));
    assert!(
        output.status.success(),
        "otpmcp config docs: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let printed = String::from_utf8(output.stdout).unwrap_or_else(|e| panic!("not UTF-8: {e}"));
    let path = std::path::Path::new(root).join("docs/configuration.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    if printed != committed {
        let line = printed
            .lines()
            .zip(committed.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| printed.lines().count().min(committed.lines().count()));
        panic!(
            "docs/configuration.md differs from `otpmcp config docs` (first at line {}); regenerate it with\n    cargo run -- config docs > docs/configuration.md",
            line + 1
        );
    }
    assert!(
        committed.len() <= MAX_BYTES,
        "docs/configuration.md is {} bytes, over {MAX_BYTES}: shorten the doc comments in src/config/",
        committed.len()
    );
}

#[test]
fn config_docs_takes_no_arguments() {
    let output = Command::new(env!("CARGO_BIN_EXE_otpmcp"))
        .args(["config", "docs", "extra"])
        .output()
        .unwrap_or_else(|e| panic!("otpmcp config docs extra: {e}"));
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`check` and `docs`"), "{stderr}");
}

#[test]
fn help_names_config_docs() {
    let output = Command::new(env!("CARGO_BIN_EXE_otpmcp"))
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("otpmcp --help: {e}"));
    assert_eq!(output.status.code(), Some(0));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("otpmcp config docs"), "{stdout}");
}
