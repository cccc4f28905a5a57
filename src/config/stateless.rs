//! `[stateless]`: what stateless (2026-07-28) requests need beyond the handlers.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, NonZeroDuration, human_duration, nz};
use super::secret::Secret;

/// What stateless (2026-07-28) requests need beyond the handlers: multi round-trip state,
/// caching hints and listen streams. Sessions do not use these keys.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StatelessConfig {
    /// Signs `requestState` (HMAC-SHA256), the state a multi round-trip request hands the
    /// client with `input_required`, so a client cannot forge it. Every replica must share
    /// it; pass it in the environment. Empty: a random key per process, which is right for
    /// one process; with Redis a retry that reaches another replica, or comes after a
    /// restart, is then refused.
    pub request_state_key: Secret,
    /// How long a `requestState` is accepted after it was issued (whole seconds).
    pub request_state_ttl: NonZeroDuration,
    /// `ttlMs` on `server/discover`, the lists and `resources/read`: how long a client may
    /// reuse them. `0s`: ask every time (listen streams announce changes anyway).
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub cache_ttl: Duration,
    /// `cacheScope` on `server/discover`, the lists and `resources/read`: `public` (the
    /// same for every user) or `private`.
    pub cache_scope: String,
    /// Changes kept for a `subscriptions/listen` stream that has fallen behind; past it the
    /// stream ends and the client listens again.
    pub listen_backlog: NonZeroUsize,
    /// Listen streams open at once on this replica; one more gets 503.
    pub max_listen_streams: NonZeroUsize,
}

impl Default for StatelessConfig {
    fn default() -> Self {
        Self {
            request_state_key: Secret::default(),
            request_state_ttl: NonZeroDuration::from_secs(600),
            cache_ttl: Duration::ZERO,
            cache_scope: "public".into(),
            listen_backlog: nz!(1024),
            max_listen_streams: nz!(10_000),
        }
    }
}
