//! `[stateless]`: what stateless (2026-07-28) requests need beyond the handlers.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, human_duration, nz};
use super::secret::Secret;

/// `[stateless]`: multi round-trip state, caching hints and listen streams.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatelessConfig {
    /// Secret that signs `requestState` (HMAC-SHA256), so a client cannot forge what a
    /// multi round-trip request has learned. Every replica must share it. Empty: a random
    /// key per process, which is right for one process; with Redis, set it, or a retry
    /// that reaches another replica is refused.
    pub request_state_key: Secret,
    /// How long a `requestState` is accepted after it was issued.
    pub request_state_ttl: NonZeroDuration,
    /// `ttlMs` on lists and reads: how long a client may reuse them; `0s` asks every time
    /// (listen streams announce changes anyway).
    #[serde(with = "human_duration")]
    pub cache_ttl: Duration,
    /// `cacheScope`: `public` (the same for every user) or `private`.
    pub cache_scope: String,
    /// Most listen notifications kept for a listener that has fallen behind; past it, its
    /// stream ends and the client listens again.
    pub listen_backlog: NonZeroUsize,
    /// Most `subscriptions/listen` streams open at once on this replica; past it a new one
    /// gets 503. Without it, clients could hold connections and their buffers without
    /// bound.
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
