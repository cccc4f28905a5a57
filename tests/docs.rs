//! docs/architecture.md and docs/flows.md stay true and short: every file they name
//! exists, the files the code map names live in the module they are listed under, every
//! link into them lands on a heading, and each stays within its size. (Their layer list
//! is checked against `LAYERS` by tests/layering.rs.) docs/capacity.md's model is what
//! `scripts/capacity` computes from performance.md's figures now.

use std::path::{Path, PathBuf};

/// The docs this test keeps, with the most bytes each may have: past it, cut what the
/// code and its doc comments already say.
const DOCS: &[(&str, usize)] = &[("docs/architecture.md", 30_000), ("docs/flows.md", 25_000)];

/// Where a path named in the docs may start: the repository's own folders.
const ROOTS: &[&str] = &[
    "src/",
    "tests/",
    "examples/",
    "scripts/",
    "benches/",
    "docs/",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of every inline code span (`` `…` ``) of a markdown text, fenced blocks
/// included (a span cannot cross a line).
fn code_spans(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            continue;
        }
        let mut parts = line.split('`');
        parts.next();
        while let (Some(inside), Some(_)) = (parts.next(), parts.next()) {
            out.push(inside);
        }
    }
    out
}

/// A path in the repository, as a doc writes one: `src/session/`, `tests/tasks.rs`.
fn repository_path(span: &str) -> Option<&str> {
    let path = span.trim_end_matches(['.', ',', ')']);
    let plain = path
        .chars()
        .all(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'));
    (plain && ROOTS.iter().any(|r| path.starts_with(r))).then_some(path)
}

/// A fenced block of a markdown text: its language (`rust`, `toml`), the file it is
/// (the rest of the info string: ```` ```rust src/main.rs ````, which GitHub shows as a
/// plain Rust block), and its lines joined.
#[derive(Debug, PartialEq)]
struct Block {
    lang: String,
    file: Option<String>,
    code: String,
}

/// The fenced blocks (```` ``` ````) of a markdown text.
fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut open: Option<(String, Option<String>, Vec<&str>)> = None;
    for line in text.lines() {
        let fence = line.trim_end().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => {
                let mut words = info.split_whitespace();
                let lang = words.next().unwrap_or_default().to_owned();
                open = Some((lang, words.next().map(str::to_owned), Vec::new()));
            }
            (Some(_), Some("")) => {
                if let Some((lang, file, lines)) = open.take() {
                    let code = lines.join("\n");
                    blocks.push(Block { lang, file, code });
                }
            }
            (Some((_, _, lines)), _) => lines.push(line),
            (None, None) => {}
        }
    }
    blocks
}

/// The Rust blocks of a markdown text.
fn rust_blocks(text: &str) -> Vec<String> {
    blocks(text)
        .into_iter()
        .filter(|b| b.lang == "rust")
        .map(|b| b.code)
        .collect()
}

/// docs/guide.md shows only code that runs: each of its Rust blocks is a piece of an
/// example or a test (`examples/guide/`, `tests/guide.rs`), which the tests run. That
/// the blocks build as a reader's own crate, with nothing but what the guide says to
/// write, is `the_guide_and_readme_build_as_fresh_crates`.
#[test]
fn every_rust_block_of_the_guide_is_run_by_a_test() {
    let mut files = Vec::new();
    for dir in ["examples", "tests"] {
        files_under(&root().join(dir), &root(), &mut files);
    }
    let sources: Vec<String> = files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
        .map(|f| read(&f.to_string_lossy()))
        .collect();
    let blocks = rust_blocks(&read("docs/guide.md"));
    assert!(blocks.len() >= 4, "found the guide's blocks");
    for block in blocks {
        assert!(
            sources.iter().any(|s| s.contains(&block)),
            "docs/guide.md shows code no example or test has:\n{block}"
        );
    }
}

/// A reader's crate made from a document: the files its blocks name, as `cargo new`
/// and the document's instructions leave them, with each Rust block that names no file
/// (a piece of the reader's code) in an example of its own under only
/// `use otpmcp::prelude::*;`, as the guide promises it needs.
fn fresh_crate(doc: &str, name: &str) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = Vec::new();
    let mut pieces = 0;
    for block in blocks(&read(doc)) {
        let (file, code) = match (block.file, block.lang.as_str()) {
            (Some(file), _) if file == "Cargo.toml" => {
                let (path, checkout) = (r#"path = "../otpmcp""#, root());
                assert!(
                    block.code.contains(path),
                    "{doc}: its Cargo.toml block points at otpmcp with `{path}`"
                );
                let here = format!("path = {:?}", checkout.display().to_string());
                // What `cargo new` writes, the block, and the reader's crate as a
                // workspace of its own (it lies inside this one's target/).
                let package = format!(
                    "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n"
                );
                let manifest = block.code.replace(path, &here);
                (file, format!("{package}{manifest}\n\n[workspace]\n"))
            }
            (Some(file), _) => (file, block.code),
            (None, "rust") => {
                pieces += 1;
                let file = format!("examples/piece_{pieces}.rs");
                let prelude = "use otpmcp::prelude::*;";
                let import = if block.code.contains(prelude) {
                    ""
                } else {
                    prelude
                };
                let code = format!(
                    "#![allow(dead_code)]\n{import}\n\n{}\n\nfn main() {{}}",
                    block.code
                );
                (file, code)
            }
            (None, _) => continue,
        };
        match files.iter_mut().find(|(f, _)| *f == file) {
            Some((_, text)) => text.push_str(&format!("\n{code}")),
            None => files.push((file, code)),
        }
    }
    for wanted in ["Cargo.toml", "src/main.rs"] {
        assert!(
            files.iter().any(|(f, _)| f == wanted),
            "{doc} has a block for `{wanted}` (```` ```lang {wanted} ````)"
        );
    }
    files
}

/// Writes the crate's files under `dir`, only those that changed (so a second run
/// rebuilds nothing), and removes those it no longer has.
fn write_crate(dir: &Path, files: &[(String, String)]) {
    for sub in ["src", "examples", "tests", "benches"] {
        let mut old = Vec::new();
        files_under(&dir.join(sub), dir, &mut old);
        for path in old {
            let name = path.to_string_lossy().into_owned();
            if dir.join(&path).is_file() && !files.iter().any(|(f, _)| *f == name) {
                std::fs::remove_file(dir.join(&path)).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
    }
    // Resolved offline, the versions this checkout locks (and has downloaded).
    let lock = ("Cargo.lock".to_owned(), read("Cargo.lock"));
    for (file, text) in files.iter().chain([&lock]) {
        let path = dir.join(file);
        if std::fs::read_to_string(&path).is_ok_and(|old| old == *text) {
            continue;
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
        std::fs::write(&path, text).unwrap_or_else(|e| panic!("{file}: {e}"));
    }
}

/// docs/guide.md and README.md build as written: a reader's crate made from each
/// (`fresh_crate`) builds offline, all its targets, without a warning. The crates and
/// their target folder are kept in `target/fresh-crates/`, so a second run builds only
/// the two small crates. Cold, it builds otpmcp and its dependencies once more, as a
/// reader's build does (without the test features, under the guide's `[profile.dev]`).
#[test]
#[ignore = "builds two crates (minutes, cold); ./scripts/test runs it"]
fn the_guide_and_readme_build_as_fresh_crates() {
    let base = root().join("target/fresh-crates");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    for (doc, name) in [("docs/guide.md", "hello-mcp"), ("README.md", "readme-mcp")] {
        let dir = base.join(name);
        write_crate(&dir, &fresh_crate(doc, name));
        let started = std::time::Instant::now();
        let out = std::process::Command::new(&cargo)
            .args(["build", "--offline", "--all-targets", "--target-dir"])
            .arg(base.join("target"))
            .current_dir(&dir)
            // This test's own build settings are not the reader's.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .output()
            .unwrap_or_else(|e| panic!("cargo runs: {e}"));
        let log = String::from_utf8_lossy(&out.stderr);
        eprintln!("{doc}: cargo build in {:?}", started.elapsed());
        assert!(
            out.status.success(),
            "{doc} does not build as written (the crate is {}):\n{log}",
            dir.display()
        );
        let warnings: Vec<&str> = log.lines().filter(|l| l.starts_with("warning")).collect();
        assert!(warnings.is_empty(), "{doc} builds with warnings:\n{log}");
    }
}

#[test]
fn every_path_the_docs_name_exists() {
    let mut missing = Vec::new();
    for (doc, _) in DOCS {
        for span in code_spans(&read(doc)) {
            if let Some(path) = repository_path(span)
                && !root().join(path).exists()
            {
                missing.push(format!("{doc}: `{path}`"));
            }
        }
    }
    assert!(missing.is_empty(), "no such file:\n{}", missing.join("\n"));
}

/// Every file and folder under `dir`, as paths relative to `base`.
fn files_under(dir: &Path, base: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        out.push(path.strip_prefix(base).unwrap_or(&path).to_path_buf());
        if path.is_dir() {
            files_under(&path, base, out);
        }
    }
}

/// The code map's entries: the module each paragraph opens with (`**`session/`**`), and
/// the code spans in it.
fn code_map(architecture: &str) -> Vec<(String, Vec<&str>)> {
    let Some((_, map)) = architecture.split_once("\n## Code map\n") else {
        panic!("docs/architecture.md has no `## Code map` section");
    };
    let map = map.split("\n## ").next().unwrap_or_default();
    let mut entries: Vec<(String, Vec<&str>)> = Vec::new();
    for line in map.lines() {
        if let Some(rest) = line.strip_prefix("**`")
            && let Some((module, _)) = rest.split_once("`**")
        {
            entries.push((module.to_owned(), Vec::new()));
        }
        if let Some((_, spans)) = entries.last_mut() {
            spans.extend(code_spans(line));
        }
    }
    entries
}

#[test]
fn the_code_map_names_files_of_each_module() {
    let architecture = read("docs/architecture.md");
    let entries = code_map(&architecture);
    assert!(entries.len() > 20, "found the code map's entries");
    let mut wrong = Vec::new();
    for (module, spans) in &entries {
        let place = root().join("src").join(module);
        if !place.exists() {
            wrong.push(format!("`{module}`: no src/{module}"));
            continue;
        }
        if !place.is_dir() {
            continue;
        }
        let mut files = Vec::new();
        files_under(&place, &place, &mut files);
        for span in spans {
            let name = span.trim_end_matches('/');
            let is_file = span.ends_with(".rs") || span.ends_with(".lua");
            let is_folder = span.ends_with('/') && !name.contains('/');
            if !(is_file || is_folder) || span.contains(' ') || span == module {
                continue;
            }
            let found = files
                .iter()
                .any(|f| f.ends_with(name) && (is_file || place.join(f).is_dir()));
            if !found {
                wrong.push(format!(
                    "`{module}` names `{span}`, which is not in src/{module}"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// The anchor GitHub gives a heading: lower case, spaces as dashes, punctuation but `-`
/// and `_` dropped.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(doc: &str) -> Vec<String> {
    let mut fenced = false;
    let mut out = Vec::new();
    for line in doc.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.push(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

#[test]
fn every_link_into_the_docs_lands_on_a_heading() {
    let mut sources: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    sources.push(root().join("README.md"));
    let mut broken = Vec::new();
    for source in &sources {
        let text = std::fs::read_to_string(source).unwrap_or_default();
        let name = source.file_name().map(|n| n.to_string_lossy().into_owned());
        for (doc, _) in DOCS {
            let file = doc.trim_start_matches("docs/");
            let targets = anchors(&read(doc));
            // `(file#anchor)` from anywhere, and `(#anchor)` within the doc itself.
            let mut patterns = vec![format!("{file}#")];
            if name.as_deref() == Some(file) {
                patterns.push("](#".to_owned());
            }
            for pattern in &patterns {
                for (at, _) in text.match_indices(pattern.as_str()) {
                    let rest = &text[at + pattern.len()..];
                    let target: String = rest
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
                        .collect();
                    if !targets.contains(&target) {
                        let from = source.strip_prefix(root()).unwrap_or(source);
                        broken.push(format!("{}: {file}#{target}", from.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "no such heading:\n{}", broken.join("\n"));
}

#[test]
fn the_docs_stay_within_their_sizes() {
    for (doc, most) in DOCS {
        let bytes = read(doc).len();
        assert!(
            bytes <= *most,
            "{doc} has {bytes} bytes, more than {most}: cut what the code says already"
        );
    }
}

/// Runs `scripts/capacity --check` (Python 3, standard library only).
#[test]
#[cfg_attr(
    not(otpmcp_python3),
    ignore = "needs python3 (/usr/bin/python3); ./scripts/test runs it"
)]
fn the_capacity_model_is_what_the_performance_figures_give() {
    let script = root().join("scripts/capacity");
    let out = std::process::Command::new(script).arg("--check").output();
    let out = out.unwrap_or_else(|e| panic!("scripts/capacity runs: {e}"));
    let text = [out.stdout, out.stderr].concat();
    let text = String::from_utf8_lossy(&text);
    assert!(out.status.success(), "scripts/capacity --check:\n{text}");
}

#[test]
fn the_readers_find_spans_paths_and_anchors() {
    assert_eq!(
        code_spans("a `src/x.rs` and `y`\n```text\nin `z` here\n```"),
        ["src/x.rs", "y", "z"]
    );
    assert_eq!(
        blocks("a\n```rust src/main.rs\nfn main() {}\n```\n```toml\nx = 1\n```\n"),
        [
            Block {
                lang: "rust".into(),
                file: Some("src/main.rs".into()),
                code: "fn main() {}".into()
            },
            Block {
                lang: "toml".into(),
                file: None,
                code: "x = 1".into()
            }
        ]
    );
    assert_eq!(repository_path("src/session/"), Some("src/session/"));
    assert_eq!(repository_path("src/a.rs b"), None);
    assert_eq!(repository_path("sse.path"), None);
    assert_eq!(
        anchor(" 7. Across replicas (Redis)"),
        "7-across-replicas-redis"
    );
    assert_eq!(anchor(" 12. `tasks/stream`"), "12-tasksstream");
    let map =
        "x\n## Code map\n\n**`ids/`**: `a.rs`\nand `b/`.\n\n**`app.rs`**: `c`\n## Next\n**`no/`**";
    assert_eq!(
        code_map(map),
        [
            ("ids/".to_owned(), vec!["ids/", "a.rs", "b/"]),
            ("app.rs".to_owned(), vec!["app.rs", "c"])
        ]
    );
}
