//! Each default is written once, in the sections' `Default` impls; `sys.toml` repeats them
//! for its readers, and docs/configuration.md is generated from the types (`config
//! docs`). These tests keep the three in agreement, key by key: every default the
//! reference shows reads back to the `Default` impl's value, and the keys whose type it
//! spells non-zero ("> 0", "≥ 1") are exactly those whose type refuses a zero while
//! loading.

use std::collections::BTreeMap;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Config, ProgramConfig};

/// The docs' table of `[exec.programs.NAME]`, whose keys are those of [`ProgramConfig`].
const PROGRAM: &str = "exec.programs.NAME";

/// Keys whose default is "unset" (`None`, or an empty path): the docs say so in words,
/// and `sys.toml` shows them commented out (no TOML value means "unset").
const UNSET: [&str; 9] = [
    "store.redis_ca_file",
    "store.redis_client_cert",
    "store.redis_client_key",
    "exec.cgroup_parent",
    "exec.programs.NAME.workdir_root",
    "exec.programs.NAME.uid",
    "exec.programs.NAME.gid",
    "exec.programs.NAME.args_pattern",
    "exec.programs",
];

fn repo_file(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn json(value: &impl Serialize) -> Value {
    serde_json::to_value(value).unwrap_or_else(|e| panic!("{e}"))
}

/// `text` read into `T` the way `Config::load` reads a file, without validation.
fn read<T: DeserializeOwned>(text: &str) -> Result<T, config::ConfigError> {
    config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Toml))
        .build()?
        .try_deserialize()
}

/// `section.key` → value, for the sections of a serialized [`Config`].
fn flatten(config: &Value) -> BTreeMap<String, Value> {
    let mut keys = BTreeMap::new();
    for (section, table) in config.as_object().into_iter().flatten() {
        for (key, value) in table.as_object().into_iter().flatten() {
            keys.insert(format!("{section}.{key}"), value.clone());
        }
    }
    keys
}

/// Every default: the sections' keys, then those of a program under [`PROGRAM`].
fn defaults() -> BTreeMap<String, Value> {
    let mut keys = flatten(&json(&Config::default()));
    for (key, value) in json(&ProgramConfig::default())
        .as_object()
        .into_iter()
        .flatten()
    {
        keys.insert(format!("{PROGRAM}.{key}"), value.clone());
    }
    keys
}

/// The TOML that sets `key` (dotted, with its section) to `literal`.
fn setting(key: &str, literal: &str) -> String {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let table = table.replace("NAME", "x");
    format!("[{table}]\n{name} = {literal}\n")
}

/// `key` set to `literal` and everything else left alone, read as a [`Config`] and
/// flattened like [`defaults`].
fn with_setting(key: &str, literal: &str) -> Result<BTreeMap<String, Value>, String> {
    let config: Config = read(&setting(key, literal)).map_err(|e| e.to_string())?;
    let mut keys = flatten(&json(&config));
    let programs = config.exec.programs.values();
    for program in programs {
        for (name, value) in json(program).as_object().into_iter().flatten() {
            keys.insert(format!("{PROGRAM}.{name}"), value.clone());
        }
    }
    keys.remove("exec.programs");
    Ok(keys)
}

/// A row of one of configuration.md's key tables.
struct DocRow {
    /// `section.key`.
    key: String,
    /// The type column, e.g. `duration > 0` or `integer ≥ 1`.
    spelling: String,
    /// The default column: a TOML value in backticks, or words.
    default: String,
}

/// The cells of a Markdown table row, split on the `|` outside backticks.
fn cells(line: &str) -> Vec<String> {
    let mut cells = vec![String::new()];
    let mut code = false;
    for c in line.trim().trim_matches('|').chars() {
        match c {
            '`' => code = !code,
            '|' if !code => {
                cells.push(String::new());
                continue;
            }
            _ => {}
        }
        if let Some(cell) = cells.last_mut() {
            cell.push(c);
        }
    }
    cells.into_iter().map(|c| c.trim().to_owned()).collect()
}

/// The spans in backticks of `text`.
fn code_spans(text: &str) -> Vec<&str> {
    text.split('`').skip(1).step_by(2).collect()
}

/// The rows of every key table in docs/configuration.md (`## [section]`, and the
/// programs' table `### [exec.programs.NAME]`), one per key.
fn doc_rows() -> Vec<DocRow> {
    let text = repo_file("docs/configuration.md");
    let mut section: Option<String> = None;
    let mut rows = Vec::new();
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            section = heading
                .strip_prefix("`[")
                .and_then(|h| h.strip_suffix("]`"))
                .map(str::to_owned);
        } else if line == format!("### `[{PROGRAM}]`") {
            section = Some(PROGRAM.to_owned());
        } else if let (Some(section), true) = (&section, line.starts_with("| `")) {
            let cells = cells(line);
            let [keys, spelling, default, ..] = cells.as_slice() else {
                panic!("a key row with fewer than three cells: {line}");
            };
            for key in code_spans(keys) {
                rows.push(DocRow {
                    key: format!("{section}.{key}"),
                    spelling: spelling.clone(),
                    default: default.clone(),
                });
            }
        }
    }
    rows
}

#[test]
fn sys_toml_states_every_default() {
    let text = repo_file("sys.toml");
    let want = defaults();
    let parsed: Config = read(&text).unwrap_or_else(|e| panic!("sys.toml: {e}"));
    let got = flatten(&json(&parsed));
    let written = flatten(&read::<Value>(&text).unwrap_or_else(|e| panic!("sys.toml: {e}")));
    let mut wrong = Vec::new();
    for (key, default) in want.iter().filter(|(k, _)| !k.starts_with(PROGRAM)) {
        if UNSET.contains(&key.as_str()) {
            continue;
        }
        if !written.contains_key(key) {
            wrong.push(format!("{key}: missing (the default is {default})"));
        } else if got.get(key) != Some(default) {
            wrong.push(format!(
                "{key}: sys.toml says {}, the Default impl {default}",
                got.get(key).unwrap_or(&Value::Null)
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "sys.toml and Default:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn configuration_md_states_every_default() {
    let want = defaults();
    let rows = doc_rows();
    let mut wrong = Vec::new();
    for row in &rows {
        let Some(default) = want.get(&row.key) else {
            wrong.push(format!("{}: documented, but there is no such key", row.key));
            continue;
        };
        if UNSET.contains(&row.key.as_str()) {
            if !(default.is_null() || default == "") {
                wrong.push(format!(
                    "{}: documented as unset, but is {default}",
                    row.key
                ));
            }
            continue;
        }
        let literal = code_spans(&row.default)
            .first()
            .filter(|_| row.default.starts_with('`'))
            .copied();
        let Some(literal) = literal else {
            wrong.push(format!(
                "{}: the default {:?} is not a value in backticks",
                row.key, row.default
            ));
            continue;
        };
        match with_setting(&row.key, literal) {
            Ok(got) if got.get(&row.key) == Some(default) => {}
            Ok(got) => wrong.push(format!(
                "{}: the docs say {literal}, the Default impl {default} (read as {})",
                row.key,
                got.get(&row.key).unwrap_or(&Value::Null)
            )),
            Err(e) => wrong.push(format!("{}: {literal} does not read: {e}", row.key)),
        }
    }
    for key in want.keys() {
        if key != "exec.programs" && !rows.iter().any(|r| &r.key == key) {
            wrong.push(format!("{key}: not in docs/configuration.md"));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/configuration.md and Default:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_documented_non_zero_keys_are_those_that_refuse_zero() {
    let mut wrong = Vec::new();
    for row in doc_rows() {
        let says = row.spelling.contains("> 0") || row.spelling.contains("≥ 1");
        let full_key = row.key.replace("NAME", "x");
        let refused = match Config::from_toml(&setting(&row.key, "0")) {
            Ok(_) => false,
            Err(e) => {
                let e = e.to_string();
                let zero = e.contains("nonzero") || e.contains("greater than zero");
                if zero && !e.contains(&format!("`{full_key}`")) {
                    wrong.push(format!("{}: the error does not name the key: {e}", row.key));
                }
                zero
            }
        };
        if says != refused {
            wrong.push(format!(
                "{}: the docs {} it non-zero, loading a 0 {}",
                row.key,
                if says { "call" } else { "do not call" },
                if refused {
                    "fails"
                } else {
                    "does not fail on it"
                },
            ));
        }
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

// The overlays in config/ are read with the same types: none may set a zero or a key
// that no longer exists (their validation needs the programs they name, which the
// tests that start the binary with them have).
#[test]
fn every_overlay_reads() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut read_any = false;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "toml") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Err(e) = read::<Config>(&text) {
                panic!("{}: {e}", path.display());
            }
            read_any = true;
        }
    }
    assert!(read_any, "found the overlays");
}
