//! The module graph of `src/` stays layered: a module names only modules below it, so no
//! import cycle can come back; the files of one folder import each other in no circle
//! either; and a source file stays small enough to read in one sitting.
//!
//! Reads the source text (every `crate::<module>` path, in `use` lines and in code) rather
//! than compiler output, so it runs in milliseconds and fails with the offending line.
//!
//! Within a folder, the graph is drawn file by file from the paths a file writes:
//! `super::…`, `self::…`, `crate::<module>::<file>::…`, and, in a folder's root file
//! (`mod.rs`, `lib.rs`), the bare `<child>::…`. A path leads into the deepest file it
//! names; a name that a root file binds with `use` (`pub use manager::SessionManager`)
//! is followed to where it comes from, so only items *defined* in a root file make an
//! import of it. A subfolder counts as one node, its files together. The root file is
//! the folder's top: it declares its children, re-exports them and may call into them,
//! so its own imports are not edges, and the circles found run among the children (a
//! circle through what the root file defines is not caught).

use std::path::{Path, PathBuf};

/// The layers, bottom first. A module may name modules of lower layers only (and itself).
/// docs/architecture.md draws the same picture top first, and `lib.rs`'s module map lists
/// the modules in this order (`the_docs_state_the_same_layers`).
const LAYERS: &[&[&str]] = &[
    &["ids"],
    &["rt", "config", "protocol"],
    &["telemetry", "server_news"],
    &["auth", "net"],
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
    &["client"],
    &["proxy"],
    &["fuzzing"],
];

/// Files that wire everything and may name any module.
const ROOTS: &[&str] = &["lib.rs", "main.rs"];

/// Most lines a source file may have: past it, split the file by concept.
const MAX_LINES: usize = 600;

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
fn no_file_is_longer_than_max_lines() {
    let mut files = Vec::new();
    rust_files(&src(), &mut files);
    let mut long = Vec::new();
    for file in &files {
        let lines = std::fs::read_to_string(file)
            .unwrap_or_default()
            .lines()
            .count();
        if lines > MAX_LINES {
            long.push(format!("{}: {lines} lines", file.display()));
        }
    }
    assert!(
        long.is_empty(),
        "split these files by concept (at most {MAX_LINES} lines each):\n{}",
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

/// A module's path inside the crate: `["session", "manager"]`; the crate root is empty.
type ModPath = Vec<String>;

/// An import of one file by another: the line that makes it.
#[derive(Debug, Clone)]
struct Witness {
    line: usize,
    text: String,
}

/// The files of `src/` as modules, with what each one's `use` items bring into scope.
struct Modules {
    files: std::collections::BTreeMap<ModPath, PathBuf>,
    /// Per module, each name a `use` item binds (public or not: a child sees both) and
    /// the absolute path it stands for.
    aliases: std::collections::BTreeMap<ModPath, std::collections::HashMap<String, Vec<String>>>,
}

/// The module a file defines: `src/session/mod.rs` → `session`, `src/lib.rs` → the root.
fn module_path(file: &Path) -> ModPath {
    let relative = file.strip_prefix(src()).unwrap_or(file).with_extension("");
    let mut path: ModPath = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if path.last().is_some_and(|l| l == "mod" || l == "lib") {
        path.pop();
    }
    path
}

/// A folder's root file declares its children: `mod.rs`, or `lib.rs` for the crate.
fn is_root_file(file: &Path) -> bool {
    file.file_name()
        .is_some_and(|n| n == "mod.rs" || n == "lib.rs")
}

/// The source as statements worth reading: comments dropped, and a `use` item that rustfmt
/// spread over several lines joined into one. Each with its first line's number and the
/// inline modules (`mod tests { .. }`) it sits in, told apart by rustfmt's indentation.
fn statements(text: &str) -> Vec<(usize, Vec<String>, String)> {
    let mut out = Vec::new();
    let mut inline: Vec<(usize, String)> = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (n, line) in text.lines().enumerate() {
        let code = line.trim();
        if let Some((_, joined)) = &mut pending {
            joined.push(' ');
            joined.push_str(code);
            if code.ends_with(';') {
                let (first, joined) = pending.take().unwrap_or_default();
                let scope = inline.iter().map(|(_, m)| m.clone()).collect();
                out.push((first, scope, joined));
            }
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if code == "}" && inline.last().is_some_and(|(i, _)| *i == indent) {
            inline.pop();
            continue;
        }
        if code.starts_with("//") {
            continue;
        }
        let declaration = code
            .strip_prefix("pub ")
            .or_else(|| code.strip_prefix("pub(crate) "))
            .or_else(|| code.strip_prefix("pub(super) "))
            .unwrap_or(code);
        if let Some(name) = declaration
            .strip_prefix("mod ")
            .and_then(|r| r.strip_suffix(" {"))
        {
            inline.push((indent, name.to_owned()));
            continue;
        }
        if declaration.starts_with("use ") && !code.ends_with(';') {
            pending = Some((n + 1, code.to_owned()));
            continue;
        }
        let scope = inline.iter().map(|(_, m)| m.clone()).collect();
        out.push((n + 1, scope, code.to_owned()));
    }
    out
}

/// Every path a piece of code names from `start`: `a::b::{c, d::e as f}` gives `a::b::c`
/// and `a::b::d::e`. A glob ends in `*`.
fn paths_at(code: &str) -> Vec<Vec<String>> {
    fn tree(chars: &[char], at: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut path = prefix.to_vec();
        loop {
            while chars.get(*at) == Some(&' ') {
                *at += 1;
            }
            if chars.get(*at) == Some(&'{') {
                *at += 1;
                loop {
                    tree(chars, at, &path, out);
                    while chars.get(*at) == Some(&' ') {
                        *at += 1;
                    }
                    match chars.get(*at) {
                        Some(',') => *at += 1,
                        Some('}') => {
                            *at += 1;
                            break;
                        }
                        _ => break,
                    }
                    while chars.get(*at) == Some(&' ') {
                        *at += 1;
                    }
                    if chars.get(*at) == Some(&'}') {
                        *at += 1;
                        break;
                    }
                }
                return;
            }
            let start = *at;
            while chars
                .get(*at)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_' || *c == '*')
            {
                *at += 1;
            }
            if start == *at {
                break;
            }
            path.push(chars[start..*at].iter().collect());
            if chars.get(*at) == Some(&':') && chars.get(*at + 1) == Some(&':') {
                *at += 2;
            } else {
                break;
            }
        }
        // `x as y`: the path is `x`.
        let rest: String = chars[*at..].iter().take(4).collect();
        if let Some(alias) = rest.strip_prefix(" as ") {
            *at += 4 - alias.len();
            while chars
                .get(*at)
                .is_some_and(|c| c.is_alphanumeric() || *c == '_')
            {
                *at += 1;
            }
        }
        // A single name (a local, a type in scope, the `super` of `pub(super)`) leads into
        // no other file by itself.
        if path.len() > 1 {
            out.push(path);
        }
    }
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut at = 0;
    let mut tree_start = true;
    while at < chars.len() {
        let c = chars[at];
        if tree_start && (c.is_alphabetic() || c == '_') {
            tree(&chars, &mut at, &[], &mut out);
            tree_start = false;
            continue;
        }
        tree_start = !(c.is_alphanumeric() || c == '_' || c == '$' || c == ':' || c == '\'');
        at += 1;
    }
    out
}

impl Modules {
    fn read() -> Self {
        let mut paths = Vec::new();
        rust_files(&src(), &mut paths);
        let files: std::collections::BTreeMap<ModPath, PathBuf> = paths
            .into_iter()
            .filter(|f| f != &src().join("main.rs"))
            .map(|f| (module_path(&f), f))
            .collect();
        let mut modules = Self {
            files,
            aliases: Default::default(),
        };
        let mut aliases = std::collections::BTreeMap::new();
        for (module, file) in &modules.files {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            let mut names = std::collections::HashMap::new();
            for (_, scope, code) in statements(&text) {
                let Some((head, tree)) = code.split_once("use ") else {
                    continue;
                };
                let head = head.trim();
                if !scope.is_empty() || !(head.is_empty() || head.starts_with("pub")) {
                    continue;
                }
                for path in paths_at(tree) {
                    if path.last().is_none_or(|l| l == "*") {
                        continue;
                    }
                    let name = alias_name(tree, &path);
                    if let Some(absolute) = modules.absolute(module, module, &path) {
                        names.insert(name, absolute);
                    }
                }
            }
            aliases.insert(module.clone(), names);
        }
        modules.aliases = aliases;
        modules
    }

    /// `path` as written in `here` (a module of the file `file`), from the crate root.
    fn absolute(&self, file: &ModPath, here: &ModPath, path: &[String]) -> Option<Vec<String>> {
        let (first, rest) = path.split_first()?;
        let mut base = here.clone();
        match first.as_str() {
            "crate" => base.clear(),
            "self" => {}
            "super" => {
                base.pop();
                let mut rest = rest;
                while rest.first().is_some_and(|s| s == "super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            // A bare path names a child only in the file that declares it.
            child
                if here == file
                    && !rest.is_empty()
                    && self
                        .files
                        .contains_key(&[&here[..], &[child.to_owned()][..]].concat()) =>
            {
                base.push(child.to_owned());
            }
            _ => return None,
        }
        base.extend(rest.iter().cloned());
        Some(base)
    }

    /// The file an absolute path leads into: the deepest module it names, through the
    /// names that `use` items bind.
    fn file_of(&self, path: &[String], depth: usize) -> ModPath {
        let mut module = ModPath::new();
        for (i, segment) in path.iter().enumerate() {
            let child = [&module[..], &[segment.clone()][..]].concat();
            if self.files.contains_key(&child) {
                module = child;
                continue;
            }
            if let Some(target) = self.aliases.get(&module).and_then(|a| a.get(segment))
                && depth < 8
            {
                let onward = [&target[..], &path[i + 1..]].concat();
                return self.file_of(&onward, depth + 1);
            }
            break;
        }
        module
    }

    /// Every import of one file by another: `(from, to)` with the line that makes it.
    /// A root file's `pub use` of its children is not one: declaring and re-exporting
    /// children is what a root file is for.
    fn imports(&self) -> Vec<(ModPath, ModPath, Witness)> {
        let mut out = Vec::new();
        for (module, file) in &self.files {
            let text = std::fs::read_to_string(file).unwrap_or_default();
            for (line, scope, code) in statements(&text) {
                let here = [&module[..], &scope[..]].concat();
                let re_export = is_root_file(file)
                    && scope.is_empty()
                    && code.starts_with("pub")
                    && code.contains("use ");
                if re_export {
                    continue;
                }
                for path in paths_at(&code) {
                    let Some(absolute) = self.absolute(module, &here, &path) else {
                        continue;
                    };
                    let target = self.file_of(&absolute, 0);
                    if &target != module {
                        let text = code.clone();
                        out.push((module.clone(), target, Witness { line, text }));
                    }
                }
            }
        }
        out
    }
}

/// The name a `use` tree binds for one of its paths (the alias after `as`, if any).
fn alias_name(tree: &str, path: &[String]) -> String {
    let last = path.last().cloned().unwrap_or_default();
    let pattern = format!("{last} as ");
    match tree.find(&pattern) {
        Some(at) => tree[at + pattern.len()..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect(),
        None => last,
    }
}

/// The files of one folder that import each other in a circle, each with the imports that
/// close it. Nodes are the folder's root file and its children, a subfolder counting as
/// one node with everything under it.
fn circles(modules: &Modules) -> Vec<String> {
    use std::collections::{BTreeMap, BTreeSet};
    let imports = modules.imports();
    let mut found = Vec::new();
    for (folder, file) in &modules.files {
        if !is_root_file(file) {
            continue;
        }
        let node = |m: &ModPath| -> Option<ModPath> {
            m.starts_with(folder)
                .then(|| m[..(folder.len() + 1).min(m.len())].to_vec())
        };
        let mut edges: BTreeMap<ModPath, BTreeMap<ModPath, Vec<String>>> = BTreeMap::new();
        for (from, to, witness) in &imports {
            let (Some(a), Some(b)) = (node(from), node(to)) else {
                continue;
            };
            // The root file is the folder's top: it may use what it declares.
            if a != b && &a != folder {
                let place = modules.files.get(from).map(|f| {
                    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
                    f.strip_prefix(root).unwrap_or(f).display().to_string()
                });
                let line = format!(
                    "{}:{}: {}",
                    place.unwrap_or_default(),
                    witness.line,
                    witness.text
                );
                let lines = edges.entry(a).or_default().entry(b).or_default();
                if !lines.contains(&line) {
                    lines.push(line);
                }
            }
        }
        let reach = |start: &ModPath| -> BTreeSet<ModPath> {
            let mut seen = BTreeSet::new();
            let mut todo = vec![start.clone()];
            while let Some(at) = todo.pop() {
                for next in edges.get(&at).into_iter().flat_map(|e| e.keys()) {
                    if seen.insert(next.clone()) {
                        todo.push(next.clone());
                    }
                }
            }
            seen
        };
        let mut done = BTreeSet::new();
        for start in edges.keys() {
            if done.contains(start) {
                continue;
            }
            let from_start = reach(start);
            let circle: BTreeSet<ModPath> = from_start
                .iter()
                .filter(|n| reach(n).contains(start))
                .cloned()
                .collect();
            if circle.is_empty() {
                continue;
            }
            done.extend(circle.iter().cloned());
            let name = |m: &ModPath| m.join("/");
            let names: Vec<String> = circle.iter().map(name).collect();
            let mut report = format!("circle between {}:", names.join(", "));
            for a in &circle {
                for (b, lines) in edges.get(a).into_iter().flatten() {
                    if circle.contains(b) {
                        report.push_str(&format!("\n  {} → {}", name(a), name(b)));
                        for line in lines {
                            report.push_str(&format!("\n    {line}"));
                        }
                    }
                }
            }
            found.push(report);
        }
    }
    found
}

#[test]
fn files_of_one_folder_import_each_other_in_no_circle() {
    let modules = Modules::read();
    assert!(modules.files.len() > 20, "found the source files");
    let found = circles(&modules);
    assert!(found.is_empty(), "\n{}", found.join("\n"));
}

#[test]
fn the_import_reader_follows_groups_aliases_and_inline_modules() {
    assert_eq!(
        paths_at("use super::{a::B, c::{D, e as f}};"),
        [
            vec!["super", "a", "B"],
            vec!["super", "c", "D"],
            vec!["super", "c", "e"]
        ]
    );
    assert_eq!(
        paths_at("let x = crate::ids::Y; f($crate::z, 'a)"),
        [vec!["crate", "ids", "Y"]]
    );
    assert_eq!(alias_name("a::{b as c, d}", &["a".into(), "b".into()]), "c");
    let text = "use super::x;\nmod tests {\n    use super::*;\n    fn f() {\n    }\n}\nuse y::{\n    Z,\n};\n";
    let read = statements(text);
    assert_eq!(read[0], (1, vec![], "use super::x;".to_owned()));
    assert_eq!(
        read[1],
        (3, vec!["tests".to_owned()], "use super::*;".to_owned())
    );
    assert_eq!(read.last().map(|s| s.2.as_str()), Some("use y::{ Z, };"));
}

fn manifest_file(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The layers drawn in docs/architecture.md, bottom first: the fenced block after the
/// `<!-- layers:` line, top first, each line not starting with a space naming one layer
/// (`telemetry, server_news  logs, …`: the names, then what they hold).
fn documented_layers(architecture: &str) -> Vec<Vec<String>> {
    let Some((_, after)) = architecture.split_once("<!-- layers:") else {
        panic!("docs/architecture.md has no `<!-- layers:` block");
    };
    let mut lines = after.lines().skip_while(|l| !l.starts_with("```")).skip(1);
    let mut layers = Vec::new();
    for line in lines.by_ref().take_while(|l| !l.starts_with("```")) {
        if line.is_empty() || line.starts_with(' ') {
            continue;
        }
        let mut names = Vec::new();
        let mut rest = line;
        loop {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            rest = &rest[name.len()..];
            names.push(name);
            match rest.strip_prefix(", ") {
                Some(more) => rest = more,
                None => break,
            }
        }
        names.sort();
        layers.push(names);
    }
    layers.reverse();
    layers
}

/// The modules `lib.rs` declares at its top level, with whether each is inline
/// (`mod prelude { .. }`) rather than a file of its own.
fn declared_modules(lib: &str) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for line in lib.lines() {
        // Indented too: the internal modules are declared inside `internal! { .. }`.
        let line = line.trim_start();
        let declaration = line
            .strip_prefix("pub ")
            .or_else(|| line.strip_prefix("pub(crate) "))
            .unwrap_or(line);
        let Some(rest) = declaration.strip_prefix("mod ") else {
            continue;
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The macro's own `mod $module;` names no module.
        if name.is_empty() {
            continue;
        }
        out.push((name, rest.trim_end().ends_with('{')));
    }
    out
}

/// The modules `lib.rs`'s doc comment lists under `## Module map`, in order: each item
/// `//! - [`name`]: …` or `//! - `name`: …`.
fn module_map(lib: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in lib.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim_start();
        if doc.starts_with("## ") {
            inside = doc == "## Module map";
            continue;
        }
        let Some(item) = doc.strip_prefix("- ") else {
            continue;
        };
        if !inside {
            continue;
        }
        let item = item.strip_prefix('[').unwrap_or(item);
        if let Some(name) = item.strip_prefix('`').and_then(|i| i.split('`').next()) {
            out.push(name.to_owned());
        }
    }
    out
}

#[test]
fn the_docs_state_the_same_layers() {
    let expected: Vec<Vec<String>> = LAYERS
        .iter()
        .map(|layer| {
            let mut names: Vec<String> = layer.iter().map(|m| (*m).to_owned()).collect();
            names.sort();
            names
        })
        .collect();
    let drawn = documented_layers(&manifest_file("docs/architecture.md"));
    assert_eq!(
        drawn, expected,
        "docs/architecture.md's layer block (top first) and LAYERS (bottom first) differ"
    );

    let lib = manifest_file("src/lib.rs");
    let listed = module_map(&lib);
    let declared = declared_modules(&lib);
    let unlisted: Vec<&str> = declared
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| !listed.iter().any(|l| l == name))
        .collect();
    assert!(
        unlisted.is_empty(),
        "lib.rs's module map does not list {unlisted:?}"
    );
    let undeclared: Vec<&String> = listed
        .iter()
        .filter(|l| !declared.iter().any(|(name, _)| name == *l))
        .collect();
    assert!(
        undeclared.is_empty(),
        "lib.rs's module map lists {undeclared:?}, which lib.rs does not declare"
    );
    // Bottom first, as the map says: a module names only modules listed before it. An
    // inline module of lib.rs (the prelude) is part of the root, in no layer.
    let mut last = 0;
    for name in &listed {
        let inline = declared.iter().any(|(n, inline)| n == name && *inline);
        match layer_of(name) {
            Some(layer) => {
                assert!(
                    layer >= last,
                    "lib.rs's module map lists `{name}` after a module of a higher layer"
                );
                last = layer;
            }
            None => assert!(inline, "`{name}` is in no layer"),
        }
    }
}

#[test]
fn the_docs_readers_read_blocks_and_maps() {
    let drawn = "x\n<!-- layers: -->\n```text\nb, a           top\n                more\nc              bottom\n```\nd\n";
    assert_eq!(
        documented_layers(drawn),
        [vec!["c".to_owned()], vec!["a".to_owned(), "b".to_owned()]]
    );
    let lib = "//! ## Module map\n//! - [`ids`]: ids.\n//! - `fuzzing`: hidden.\n//!   more\n//! ## Other\n//! - [`no`]\npub mod ids;\n#[doc(hidden)]\npub mod fuzzing;\nmod inner {\n}\npub(crate) mod x;\n";
    assert_eq!(module_map(lib), ["ids", "fuzzing"]);
    assert_eq!(
        declared_modules(lib),
        [
            ("ids".to_owned(), false),
            ("fuzzing".to_owned(), false),
            ("inner".to_owned(), true),
            ("x".to_owned(), false)
        ]
    );
}

/// A file's text outside its unit tests: each `#[cfg(test)]` item left out (rustfmt's
/// layout: the attribute, then an item ending on its line, or opening a block that closes
/// at the item's indentation), other lines kept blank so line numbers stay.
fn outside_tests(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "#[cfg(test)]" {
            out.push_str(line);
            out.push('\n');
            continue;
        }
        out.push('\n');
        let Some(item) = lines.next() else { break };
        out.push('\n');
        if item.trim_end().ends_with('{') {
            let indent = item.len() - item.trim_start().len();
            let close = format!("{}}}", " ".repeat(indent));
            for inner in lines.by_ref() {
                out.push('\n');
                if inner.trim_end() == close {
                    break;
                }
            }
        }
    }
    out
}

/// The string literals of some code (contents as written, escapes not read) with their
/// line numbers, and the code with comments dropped and literals emptied.
fn literals(code: &str) -> (Vec<(usize, String)>, String) {
    let chars: Vec<char> = code.chars().collect();
    let mut found = Vec::new();
    let mut rest = String::new();
    let mut line = 1;
    let mut at = 0;
    let ident = |c: Option<&char>| c.is_some_and(|c| c.is_alphanumeric() || *c == '_');
    while at < chars.len() {
        let c = chars[at];
        let next = chars.get(at + 1).copied();
        if c == '/' && next == Some('/') {
            while at < chars.len() && chars[at] != '\n' {
                at += 1;
            }
            continue;
        }
        if c == '/' && next == Some('*') {
            at += 2;
            while at < chars.len() && !(chars[at] == '*' && chars.get(at + 1) == Some(&'/')) {
                if chars[at] == '\n' {
                    line += 1;
                    rest.push('\n');
                }
                at += 1;
            }
            at += 2;
            continue;
        }
        // A char literal (`'"'`, `'\''`); a lifetime is a quote with no closing one.
        if c == '\'' {
            let close = if next == Some('\\') {
                chars[at + 2..]
                    .iter()
                    .position(|c| *c == '\'')
                    .map(|p| at + 2 + p)
            } else {
                (chars.get(at + 2) == Some(&'\'')).then_some(at + 2)
            };
            if let Some(close) = close {
                rest.push_str("' '");
                at = close + 1;
                continue;
            }
        }
        // `r"…"`, `r#"…"#`: no escapes; the closing quote has as many `#`.
        let raw = c == 'r' && !ident(at.checked_sub(1).and_then(|p| chars.get(p)));
        let hashes = if raw {
            chars[at + 1..].iter().take_while(|c| **c == '#').count()
        } else {
            0
        };
        if raw && chars.get(at + 1 + hashes) == Some(&'"') {
            let start = at + 2 + hashes;
            let closing: Vec<char> = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let mut end = start;
            while end < chars.len() && !chars[end..].starts_with(&closing) {
                end += 1;
            }
            let text: String = chars[start..end.min(chars.len())].iter().collect();
            found.push((line, text.clone()));
            line += text.matches('\n').count();
            rest.push_str(&"\n".repeat(text.matches('\n').count()));
            rest.push_str("\"\"");
            at = end + closing.len();
            continue;
        }
        if c == '"' {
            let start = at + 1;
            let mut end = start;
            while end < chars.len() && chars[end] != '"' {
                end += if chars[end] == '\\' { 2 } else { 1 };
            }
            let text: String = chars[start..end.min(chars.len())].iter().collect();
            found.push((line, text.clone()));
            line += text.matches('\n').count();
            rest.push_str(&"\n".repeat(text.matches('\n').count()));
            rest.push_str("\"\"");
            at = end + 1;
            continue;
        }
        if c == '\n' {
            line += 1;
        }
        rest.push(c);
        at += 1;
    }
    (found, rest)
}

/// Where some code names an MCP method: `Method::…` (ours: `http::Method::GET` is not), a
/// notification's variant or constant (`NotificationKind::Cancelled`,
/// `notifications::CANCELLED`), or a string literal equal to a method's or a known
/// notification's name.
fn names_of_methods(code: &str) -> Vec<(usize, String)> {
    use otpmcp::protocol::methods::{Method, NotificationKind};
    let known: Vec<&str> = Method::ALL
        .iter()
        .filter_map(|m| m.name())
        .chain(NotificationKind::ALL.iter().map(|n| n.name()))
        .collect();
    let (found, rest) = literals(code);
    let mut out: Vec<(usize, String)> = found
        .into_iter()
        .filter(|(_, text)| known.contains(&text.as_str()))
        .map(|(line, text)| (line, format!("{text:?}")))
        .collect();
    for (n, line) in rest.lines().enumerate() {
        for (head, any) in [
            ("Method::", true),
            ("NotificationKind::", false),
            ("notifications::", false),
        ] {
            let mut from = 0;
            while let Some(at) = line[from..].find(head) {
                let at = from + at;
                from = at + head.len();
                let before = line[..at].chars().last();
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                    || line[..at].ends_with("http::")
                {
                    continue;
                }
                // `Method::` is the method type whatever follows; of the others, only a
                // variant or a constant names one notification (`NotificationKind::parse` does not).
                if !any && !line[from..].starts_with(|c: char| c.is_ascii_uppercase()) {
                    continue;
                }
                let path: String = line[at..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                out.push((n + 1, path));
            }
        }
    }
    out.sort();
    out
}

fn relative(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    file.strip_prefix(root)
        .unwrap_or(file)
        .display()
        .to_string()
}

/// Architecture invariant: the transport knows bytes and connections, the server knows
/// methods. Outside its unit tests no file of `transport/` writes `Method::…` or a
/// method's name; what a transport must know of a method it reads from its spec.
#[test]
fn no_transport_file_names_a_method() {
    let mut files = Vec::new();
    rust_files(&src().join("transport"), &mut files);
    files.sort();
    let mut named = Vec::new();
    for file in &files {
        let place = relative(file);
        let text = std::fs::read_to_string(file).unwrap_or_default();
        named.extend(
            names_of_methods(&outside_tests(&text))
                .into_iter()
                .map(|(line, what)| format!("{place}:{line}: {what}")),
        );
    }
    assert!(
        named.is_empty(),
        "transport/ names methods (read the method's spec, or move the decision to server/):\n{}",
        named.join("\n")
    );
}

/// Architecture invariant: each transport drives the server by itself; stdio does not
/// borrow from the stateless HTTP folder, nor that one from stdio.
#[test]
fn no_transport_folder_imports_another() {
    let modules = Modules::read();
    let folder = |m: &ModPath| -> Option<&'static str> {
        match m.as_slice() {
            [t, f, ..] if t == "transport" && f == "stdio" => Some("stdio"),
            [t, f, ..] if t == "transport" && f == "stateless" => Some("stateless"),
            _ => None,
        }
    };
    let mut crossing = Vec::new();
    for (from, to, witness) in modules.imports() {
        let (Some(a), Some(b)) = (folder(&from), folder(&to)) else {
            continue;
        };
        if a == b {
            continue;
        }
        let place = modules
            .files
            .get(&from)
            .map(|f| relative(f))
            .unwrap_or_default();
        let line = format!("{place}:{}: {}", witness.line, witness.text);
        if !crossing.contains(&line) {
            crossing.push(line);
        }
    }
    assert!(
        crossing.is_empty(),
        "one transport imports another:\n{}",
        crossing.join("\n")
    );
}

#[test]
fn the_method_scanner_reads_literals_and_skips_tests() {
    let code = "use a::b; // \"tools/call\"\nlet c = '\"'; let s = \"ping\";\n/* \"tools/list\" */ let r = r#\"initialize\"#;\nhttp::Method::GET; methods::Method::ToolsCall; x(\"notifications/cancelled\", \"tools/\");\nNotificationKind::parse(m); NotificationKind::Cancelled; notifications::INITIALIZED;\n";
    assert_eq!(
        names_of_methods(code),
        [
            (2, "\"ping\"".to_owned()),
            (3, "\"initialize\"".to_owned()),
            (4, "\"notifications/cancelled\"".to_owned()),
            (4, "Method::ToolsCall".to_owned()),
            (5, "NotificationKind::Cancelled".to_owned()),
            (5, "notifications::INITIALIZED".to_owned()),
        ]
    );
    let text = "fn f() {}\n#[cfg(test)]\nfn g() {\n    \"ping\";\n}\n#[cfg(test)]\nmod tests {\n    fn h() {\n    }\n    const P: &str = \"ping\";\n}\nconst Q: &str = \"ping\";\n";
    assert_eq!(
        names_of_methods(&outside_tests(text)),
        [(12, "\"ping\"".to_owned())]
    );
}
