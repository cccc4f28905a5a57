//! What changed on the server, for the streams that listen for it
//! (`subscriptions/listen`, 2026-07-28): a list, a resource, a task. Local changes and
//! changes other replicas report (through the cluster) meet here.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::ids::TaskId;
use crate::protocol::methods::ListKind;

/// One change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ServerNews {
    /// `tools/list`, `prompts/list` or `resources/list` changed.
    ListChanged {
        /// Which list.
        list: ListKind,
    },
    /// A resource changed.
    ResourceUpdated {
        /// Its URI.
        uri: String,
    },
    /// A task changed: the task as `tasks/get` would return it (without `resultType`).
    Task {
        /// The task's id.
        task_id: TaskId,
        /// The detailed task.
        task: Value,
        /// Who may see it (`[auth]`): its record's principal.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        owner: Option<String>,
    },
}

/// Where news is published and heard: a broadcast channel of bounded capacity. A listener
/// that falls more than the capacity behind loses the oldest news, and is told so (its
/// stream ends, and the client listens again and re-reads the lists).
#[derive(Debug, Clone)]
pub struct NewsHub {
    tx: broadcast::Sender<Heard>,
}

/// News and where it came from.
#[derive(Debug, Clone)]
pub struct Heard {
    /// The news.
    pub news: ServerNews,
    /// True when another replica reported it (so it is not reported back).
    pub remote: bool,
}

impl NewsHub {
    /// A hub that keeps up to `capacity` items for slow listeners.
    pub fn new(capacity: usize) -> Self {
        Self {
            tx: broadcast::channel(capacity.max(1)).0,
        }
    }

    /// Publishes a local change.
    pub fn publish(&self, news: ServerNews) {
        // No listener is not an error: nobody needed telling.
        let _ = self.tx.send(Heard {
            news,
            remote: false,
        });
    }

    /// Publishes a change another replica reported.
    pub fn publish_remote(&self, news: ServerNews) {
        let _ = self.tx.send(Heard { news, remote: true });
    }

    /// Hears everything published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Heard> {
        self.tx.subscribe()
    }
}

impl Default for NewsHub {
    fn default() -> Self {
        Self::new(1024)
    }
}
