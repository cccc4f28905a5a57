//! The module graph of `src/` stays layered: a module names only modules below it, so no
//! import cycle can come back; and a source file stays small enough to read in one sitting,
//! or says at its top why it is not.
//!
//! Reads the source text (every `crate::<module>` path, in `use` lines and in code) rather
//! than compiler output, so it runs in milliseconds and fails with the offending line.

use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may name modules of lower layers only (and itself).
/// docs/architecture.md draws the same picture.
const LAYERS: &[&[&str]] = &[
    &["ids"],
    &["rt", "config", "protocol"],
    &["telemetry", "news"],
    &["auth"],
    &["event_store"],
    &["session"],
    &["stream"],
    &["handler"],
    &["exec"],
    &["tasks"],
    &["server"],
    &["transport"],
    &["cluster"],
    &["supervisor"],
    &["admin"],
    &["app"],
    &["proxy"],
    &["fuzzing"],
];

/// Files that wire everything and may name any module.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

/// Past this many lines a file must say why at its top (a `//! Size:` line).
const MAX_LINES: usize = 520;

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        panic!("cannot read {}", dir.display());
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level module a file belongs to (`src/session/handle.rs` → `session`).
fn module_of(file: &Path) -> String {
    let relative = file.strip_prefix(src()).unwrap_or(file);
    let first = relative
        .components()
        .next()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .unwrap_or_default();
    first.trim_end_matches(".rs").to_owned()
}

/// Every module a line of code names through `crate::`: `crate::a::..` and each head of
/// `crate::{a::.., b}`.
fn named_modules(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        // `otpmcp_crate::` or `$crate::` are not ours.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut head = true;
            let mut word = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => head = true,
                    c if head && (c.is_alphanumeric() || c == '_') => word.push(c),
                    _ if head && !word.is_empty() => {
                        out.push(std::mem::take(&mut word));
                        head = false;
                    }
                    _ => {}
                }
            }
            if !word.is_empty() {
                out.push(word);
            }
        } else {
            let word: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push(word);
        }
    }
    out
}

#[test]
fn every_module_names_only_modules_below_it() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    assert!(files.len() > 20, "found the source files");
    let mut violations = Vec::new();
    for file in &files {
        let name = file.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.as_deref().is_some_and(|n| ROOTS.contains(&n)) && file.parent() == Some(&src()) {
            continue;
        }
        let module = module_of(file);
        let Some(own) = layer_of(&module) else {
            violations.push(format!(
                "{}: module `{module}` is in no layer",
                file.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(file).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            for named in named_modules(code) {
                if named == module {
                    continue;
                }
                match layer_of(&named) {
                    Some(layer) if layer < own => {}
                    Some(_) => violations.push(format!(
                        "{}:{}: `{module}` names `{named}`, which is not below it: {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    )),
                    None => violations.push(format!(
                        "{}:{}: `{named}` is in no layer",
                        file.display(),
                        n + 1
                    )),
                }
            }
        }
    }
    assert!(violations.is_empty(), "\n{}", violations.join("\n"));
}

#[test]
fn long_files_say_why_at_their_top() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let lines = text.lines().count();
        let explained = text
            .lines()
            .take(40)
            .any(|l| l.trim_start().starts_with("//! Size:"));
        if lines > MAX_LINES && !explained {
            long.push(format!("{}: {lines} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these files, or give the reason in a `//! Size:` line at the top:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_scanner_reads_paths_and_groups() {
    assert_eq!(named_modules("use crate::session::SessionId;"), ["session"]);
    assert_eq!(
        named_modules("use crate::{config::Config, ids::{SessionId, StreamKey}, rt};"),
        ["config", "ids", "rt"]
    );
    assert_eq!(
        named_modules("let x = crate::protocol::methods::X; f(crate::ids::Y)"),
        ["protocol", "ids"]
    );
    assert!(named_modules("$crate::foo; my_crate::bar").is_empty());
    assert_eq!(layer_of("ids"), Some(0));
    assert!(layer_of("event_store") < layer_of("session"));
    assert!(layer_of("session") < layer_of("cluster"));
}
