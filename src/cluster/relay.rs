//! What replicas tell each other for the stateless revision: each change announced on this
//! replica (a list, a resource, a task) goes to every other replica's listen streams
//! (`P:bus:news`), and a signal for a task running elsewhere goes to its replica
//! (`P:bus:task:<r>`). [`super::bus::Router`] hands what arrives to the news hub and the
//! tasks.

use serde::{Deserialize, Serialize};
use tokio_util::task::AbortOnDropHandle;

use crate::event_store::format;
use crate::event_store::redis::RedisLink;
use crate::handler::BoxFuture;
use crate::ids::TaskId;
use crate::server_news::{NewsHub, ServerNews};
use crate::tasks::{TaskLeases, TaskSignal, TaskSignals};

/// A change, as published on `P:bus:news`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewsMessage {
    /// The replica it happened on (which ignores its own).
    pub origin: u64,
    /// The change.
    pub news: ServerNews,
}

/// A task signal, as published on `P:bus:task:<r>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskMessage {
    /// The task.
    pub task_id: TaskId,
    /// What to tell it.
    pub signal: TaskSignal,
}

/// Sends task signals over the bus.
#[derive(Debug, Clone)]
pub struct TaskBus {
    link: RedisLink,
}

impl TaskBus {
    /// Signals through `link`.
    pub fn new(link: RedisLink) -> Self {
        Self { link }
    }
}

impl TaskSignals for TaskBus {
    fn send(
        &self,
        owner: u64,
        id: TaskId,
        signal: TaskSignal,
    ) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            let message = TaskMessage {
                task_id: id,
                signal,
            };
            let body =
                format::to_vec(self.link.format.get(), &message).map_err(|e| e.to_string())?;
            self.link
                .publish("bus", self.link.keys.task_channel(owner), body)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

impl TaskLeases for super::Leases {
    fn begin(&self, id: TaskId) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.hold(&super::leases::task_field(id))
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn end(&self, id: TaskId) -> BoxFuture<'_, ()> {
        Box::pin(self.drop_field(super::leases::task_field(id)))
    }
}

/// Publishes this replica's news to the others while it lives (a task that ends when
/// dropped, or when the hub is gone).
#[derive(Debug)]
pub struct NewsRelay {
    _task: AbortOnDropHandle<()>,
}

impl NewsRelay {
    /// Relays what `hub` hears locally through `link`.
    pub fn start(hub: &NewsHub, link: RedisLink) -> Self {
        let mut heard = hub.subscribe();
        let task = AbortOnDropHandle::new(tokio::spawn(async move {
            loop {
                match heard.recv().await {
                    Ok(item) if !item.remote => {
                        let message = NewsMessage {
                            origin: link.replica,
                            news: item.news,
                        };
                        let Ok(body) = format::to_vec(link.format.get(), &message) else {
                            continue;
                        };
                        if let Err(e) = link.publish("bus", link.keys.news_channel(), body).await {
                            tracing::debug!(error = %e, "could not tell the other replicas of a change");
                        }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::warn!(missed, "changes were not relayed to the other replicas");
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        }));
        Self { _task: task }
    }
}
