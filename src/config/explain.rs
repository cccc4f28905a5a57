//! `otpmcp config check`: the effective configuration, key by key, each value with the
//! source it came from, so an operator sees what a replica would run with before
//! starting it. Secrets are shown as set or not, never printed: their types
//! ([`super::Secret`], [`super::SecretUrl`]) serialize that way.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{Config, ConfigError, ENV_PREFIX, ENV_SEPARATOR};

/// Where an effective value came from; a later source wins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValueSource {
    /// The built-in default.
    Default,
    /// A file: `sys.toml` in the working directory, or a `--config` overlay.
    File(PathBuf),
    /// An environment variable (its name).
    Environment(String),
}

impl std::fmt::Display for ValueSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Environment(name) => write!(f, "environment {name}"),
        }
    }
}

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Effective {
    /// The dotted key, e.g. `sse.keepalive_interval`.
    pub key: String,
    /// Its value as TOML would spell it (a secret: `"(set)"` or `"(empty)"`).
    pub value: String,
    /// Where it came from.
    pub source: ValueSource,
}

impl Config {
    /// Loads and validates the configuration as [`Config::load_with_env`] does (or, with
    /// no `dir`, as [`Config::load_overlays_with_env`] does), and lists every key of the
    /// result with its value and source, in key order.
    pub fn explain(
        dir: Option<&Path>,
        overlays: &[PathBuf],
        env: impl IntoIterator<Item = (String, String)> + Clone,
    ) -> Result<(Config, Vec<Effective>), ConfigError> {
        let config = Self::read(dir, overlays, env.clone())?;
        let mut layers: Vec<(ValueSource, Vec<String>)> = Vec::new();
        for path in Self::files(dir, overlays) {
            layers.push((ValueSource::File(path.clone()), file_keys(&path)?));
        }
        let prefix = format!("{ENV_PREFIX}{ENV_SEPARATOR}");
        for (name, _) in env {
            if let Some(rest) = name.strip_prefix(&prefix) {
                let key = rest.replace(ENV_SEPARATOR, ".").to_ascii_lowercase();
                layers.push((ValueSource::Environment(name), vec![key]));
            }
        }
        let mut effective = Vec::new();
        let tree = serde_json::to_value(&config).unwrap_or(Value::Null);
        flatten(String::new(), &tree, &mut |key, value| {
            let source = layers
                .iter()
                .rev()
                .find(|(_, keys)| keys.iter().any(|k| covers(k, &key)))
                .map_or(ValueSource::Default, |(source, _)| source.clone());
            let value = spell(value);
            effective.push(Effective { key, value, source });
        });
        effective.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((config, effective))
    }
}

/// The dotted keys `path` sets.
fn file_keys(path: &Path) -> Result<Vec<String>, ConfigError> {
    let tree: Value = config::Config::builder()
        .add_source(config::File::from(path).format(config::FileFormat::Toml))
        .build()?
        .try_deserialize()?;
    let mut keys = Vec::new();
    flatten(String::new(), &tree, &mut |key, _| keys.push(key));
    Ok(keys)
}

/// Whether a source that set `set` set `key`: the same key, or a table above it.
fn covers(set: &str, key: &str) -> bool {
    key == set
        || key
            .strip_prefix(set)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// Calls `leaf` for each value under `tree` that is not a table, with its dotted key.
fn flatten(prefix: String, tree: &Value, leaf: &mut dyn FnMut(String, &Value)) {
    match tree {
        Value::Object(map) if !map.is_empty() || prefix.is_empty() => {
            for (name, value) in map {
                let key = if prefix.is_empty() {
                    name.clone()
                } else {
                    format!("{prefix}.{name}")
                };
                flatten(key, value, leaf);
            }
        }
        other => leaf(prefix, other),
    }
}

/// A value as TOML would spell it; an unset optional value as `(unset)`.
fn spell(value: &Value) -> String {
    match value {
        Value::Null => "(unset)".to_owned(),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(spell).collect();
            format!("[{}]", items.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_names_the_source_that_set_it_last() {
        let dir = std::env::temp_dir().join(format!("otpmcp-explain-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let file = dir.join("overlay.toml");
        let text = "[server]\nmax_sessions = 5\n[sse]\nkeepalive_interval = \"20s\"\n[stateless]\nrequest_state_key = \"0123456789abcdef0123456789abcdef\"\n";
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
        let env = vec![(
            "OTPMCP__SSE__KEEPALIVE_INTERVAL".to_owned(),
            "10s".to_owned(),
        )];
        let explained = Config::explain(Some(&dir), std::slice::from_ref(&file), env);
        let (config, effective) = explained.unwrap_or_else(|e| panic!("{e}"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(config.server.max_sessions.get(), 5);
        let of = |key: &str| {
            effective
                .iter()
                .find(|e| e.key == key)
                .cloned()
                .unwrap_or_else(|| panic!("no {key}"))
        };
        assert_eq!(of("server.max_sessions").value, "5");
        assert_eq!(
            of("server.max_sessions").source,
            ValueSource::File(file.clone())
        );
        let keepalive = of("sse.keepalive_interval");
        assert_eq!(keepalive.value, "\"10s\"");
        assert_eq!(
            keepalive.source,
            ValueSource::Environment("OTPMCP__SSE__KEEPALIVE_INTERVAL".into())
        );
        assert_eq!(of("server.session_timeout").source, ValueSource::Default);
        let secret = of("stateless.request_state_key");
        assert_eq!(secret.value, "\"(set)\"", "a secret is never printed");
        assert_eq!(of("auth.introspection_client_secret").value, "\"\"");
    }
}
