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
            rerun_lost: true,
        }
    }
}
