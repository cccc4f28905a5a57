//! The one error type of configuration loading and validation.

use std::path::PathBuf;

/// A configuration problem, naming the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A source could not be read, or a value has the wrong type or is out of range (a
    /// zero where the type says non-zero); the config crate's message names the key.
    #[error("configuration: {0}")]
    Load(#[from] config::ConfigError),
    /// A `--config` file does not exist.
    #[error("configuration file {0} does not exist")]
    MissingFile(PathBuf),
    /// A value is present but not acceptable.
    #[error("configuration key `{key}`: {problem}")]
    Invalid {
        /// The dotted key, e.g. `sse.path`.
        key: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

/// `Err(ConfigError::Invalid)` for `key`, for the `validate` functions.
pub(super) fn invalid(key: &'static str, problem: impl Into<String>) -> Result<(), ConfigError> {
    Err(ConfigError::Invalid {
        key,
        problem: problem.into(),
    })
}
