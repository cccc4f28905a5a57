//! `[tasks]`: long-running tool calls a client polls (`tasks/get`) instead of waiting.

use std::num::NonZeroUsize;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, nz};

/// `[tasks]`: lifetime, polling and limits of tasks (the `io.modelcontextprotocol/tasks`
/// extension).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TasksConfig {
    /// How long a task (and its result) is kept from its creation (`ttlMs`); after it a
    /// task that still works is stopped, and its record, like a finished one's, dropped.
    pub ttl: NonZeroDuration,
    /// The poll interval suggested to clients (`pollIntervalMs`).
    pub poll_interval: NonZeroDuration,
    /// Most task records the in-memory store keeps at once; past it a new task is refused
    /// (-32603). Redis keeps as many as it has memory for.
    pub max_tasks: NonZeroUsize,
    /// Most tasks running on this replica at once; past it a new task is refused.
    pub max_running: NonZeroUsize,
    /// Most live tasks (running or finished, until their `ttl`) one principal holds
    /// across all replicas: the `[auth]` owner, or without `[auth]` the client's address.
    /// Past it that principal's new task is refused (-32603); others are untouched.
    pub max_per_principal: NonZeroUsize,
    /// The share, in percent (1 to 100), of the in-memory store's event budget
    /// (`sse.max_total_events`, `sse.max_total_bytes`) one principal's task logs may hold:
    /// past it that principal's own oldest task events go, not other sessions'.
    pub principal_event_percent: NonZeroUsize,
    /// When a replica dies, run its tasks whose tools are declared re-runnable again (once)
    /// on another replica, instead of ending them `failed`.
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
