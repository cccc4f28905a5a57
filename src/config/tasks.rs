//! `[tasks]`: long-running tool calls a client polls (`tasks/get`) instead of waiting.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, nz};

/// Durable tasks (the `io.modelcontextprotocol/tasks` extension, [tasks.md](tasks.md)):
/// long tool calls a client polls or streams instead of waiting. A task refused by a limit
/// below fails its `tools/call` with -32603 naming the key; it is not run synchronously
/// instead.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// `ttlMs` of new tasks: a task and its result are kept this long from creation; one
    /// still running then is stopped and dropped.
    pub ttl: NonZeroDuration,
    /// `pollIntervalMs`, the polling interval suggested to clients.
    pub poll_interval: NonZeroDuration,
    /// Task records the in-memory store keeps at once; past it a new task is refused for
    /// everyone. Redis keeps as many as its memory allows.
    pub max_tasks: NonZeroUsize,
    /// Tasks running on this replica at once.
    pub max_running: NonZeroUsize,
    /// Live tasks (running, or finished and kept until their `ttl`) one principal holds
    /// across every shard and replica; past it that principal's new task is refused, others
    /// still get theirs. The principal is the `[auth]` owner, or without `[auth]` the
    /// client's address (clients behind one NAT share a quota).
    pub max_per_principal: NonZeroUsize,
    /// The share, in percent (at most 100), of the in-memory store's budget
    /// (`sse.max_total_events`, `sse.max_total_bytes`) one principal's task logs may hold.
    /// Past it that principal's own oldest task events go (the newest of each log stays),
    /// never anyone else's (`otpmcp_events_evicted_total{reason="principal"}`). Lower it
    /// where many principals run tasks at once; 100: no share. Redis: each log keeps the
    /// per-session caps.
    pub principal_event_percent: NonZeroUsize,
    /// When a replica dies, run its tasks whose tools are declared re-runnable again, once,
    /// on the replica that finds its lease lapsed; off, they end `failed`.
    pub rerun_lost: bool,
}

impl Default for TasksConfig {
    fn default() -> Self {
        Self {
            ttl: NonZeroDuration::from_secs(3600),
            poll_interval: NonZeroDuration::from_secs(1),
            max_tasks: nz!(10_000),
            max_running: nz!(1000),
            // A tenth of `max_tasks`: ten principals at their cap fill the store, and a
            // client that keeps a thousand tasks within an hour is a batch job, not an
            // agent (which polls a handful at a time).
            max_per_principal: nz!(1000),
            // Ten principals' task logs at their share fill the store; one alone leaves nine
            // tenths of it to everyone else.
            principal_event_percent: nz!(10),
            rerun_lost: true,
        }
    }
}
