//! `[supervisor]`: OTP restart intensity of the root supervisor.

use serde::{Deserialize, Serialize};

use super::duration::NonZeroDuration;

/// `[supervisor]`: how many restarts the root supervisor allows, and within how long.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Restarts allowed within `max_window` before the supervisor gives up and the process
    /// exits non-zero.
    pub max_restarts: u32,
    /// The intensity window.
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
