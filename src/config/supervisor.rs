//! `[supervisor]`: OTP restart intensity of the root supervisor.

use serde::{Deserialize, Serialize};

use super::duration::NonZeroDuration;

/// The restart intensity of the root supervisor, as in OTP.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Restarts allowed within any `max_window`, all children together. One more and the
    /// supervisor stops the tree and the process exits 1; 0 makes the first crash fatal.
    pub max_restarts: u32,
    /// The restart-intensity window.
    pub max_window: NonZeroDuration,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        Self {
            max_restarts: 3,
            max_window: NonZeroDuration::from_secs(5),
        }
    }
}
