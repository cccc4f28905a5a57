//! The supervision tree as the root reports it (the dashboard draws it): each child's
//! state, uptime and restarts, the event store's shards as one child with its shards
//! inside.

use std::time::Duration;

use ractor::ActorCell;

use super::{Child, SupervisorState};
use crate::telemetry::metrics::Label as _;

/// The supervision tree as the root sees it.
#[derive(Debug, Clone)]
pub struct Tree {
    /// Since the root started.
    pub uptime: Duration,
    /// The running children, in start order.
    pub children: Vec<ChildView>,
}

/// One supervised child (for the event store: its shards together).
#[derive(Debug, Clone)]
pub struct ChildView {
    /// `event_store`, `session_manager` or `http_listener`.
    pub name: &'static str,
    /// Its actor's state.
    pub status: ractor::ActorStatus,
    /// Since its current incarnation started.
    pub uptime: Duration,
    /// Times it was restarted.
    pub restarts: u32,
    /// Its own children (the listener's stream actors).
    pub children: Vec<ActorCell>,
    /// The event store's shards, in shard order (empty for the other children).
    pub shards: Vec<ShardView>,
}

/// One shard of the event store.
#[derive(Debug, Clone)]
pub struct ShardView {
    /// Its actor's state.
    pub status: ractor::ActorStatus,
    /// Since its current incarnation started.
    pub uptime: Duration,
    /// Times it was restarted.
    pub restarts: u32,
}

impl SupervisorState {
    /// The tree as it stands: each child's state, uptime and restarts.
    pub(super) fn tree(&self) -> Tree {
        let mut running: Vec<&(Child, ActorCell)> = self.running.iter().collect();
        // In start order, whichever restarted last.
        running.sort_by_key(|(child, _)| match child {
            Child::EventStore(shard) => (child.metric().index(), *shard),
            _ => (child.metric().index(), 0),
        });
        let shards: Vec<ShardView> = running
            .iter()
            .filter_map(|(child, cell)| match child {
                Child::EventStore(shard) => Some(ShardView {
                    status: cell.get_status(),
                    uptime: self.uptime(*child),
                    restarts: self.shard_restarts.get(*shard).copied().unwrap_or(0),
                }),
                _ => None,
            })
            .collect();
        // The shards show as one child, `event_store`, with its shards inside.
        running.dedup_by_key(|(child, _)| child.metric().index());
        let children = running
            .into_iter()
            .map(|(child, cell)| {
                let shards = match child {
                    Child::EventStore(_) => shards.clone(),
                    _ => Vec::new(),
                };
                let status = shards
                    .iter()
                    .map(|shard| shard.status)
                    .find(|status| *status != ractor::ActorStatus::Running)
                    .unwrap_or_else(|| cell.get_status());
                ChildView {
                    name: child.name(),
                    status,
                    uptime: shards
                        .iter()
                        .map(|shard| shard.uptime)
                        .min()
                        .unwrap_or_else(|| self.uptime(*child)),
                    restarts: self
                        .restarts
                        .get(child.metric().index())
                        .copied()
                        .unwrap_or(0),
                    children: cell.get_children(),
                    shards,
                }
            })
            .collect();
        Tree {
            uptime: self.started.elapsed(),
            children,
        }
    }

    /// Since `child`'s current incarnation started.
    fn uptime(&self, child: Child) -> Duration {
        let since = self.since.iter().find(|(c, _)| *c == child);
        since.map(|(_, at)| at.elapsed()).unwrap_or_default()
    }
}
