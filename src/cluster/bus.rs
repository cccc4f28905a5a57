//! The pub/sub bus between replicas.
//!
//! Redis delivers pub/sub messages as RESP3 pushes; [`Router::route`] decodes each one and
//! hands it to the actor it concerns, through that actor's handle:
//! - `P:{S}:c:<n>` (events of a stream, published by the append script in the same atomic
//!   step as the store; control messages of other replicas) → the event store, which
//!   forwards them to the local connection following that stream, if any;
//! - `P:bus:all` (a session ended, a cancellation, a log level or subscription changed)
//!   and `P:bus:<r>` (a client's answer to a request this replica sent) → the session
//!   manager. A replica ignores its own broadcasts (it applied them already). Another
//!   replica's planned stop, on `P:bus:all` too, wakes the lease keeper
//!   ([`super::keeper::Stops`]).
//! - `P:bus:news` (a list, resource or task changed on another replica) → the news hub,
//!   for listen streams; `P:bus:task:<r>` (`tasks/update` or `tasks/cancel` for a task
//!   running here) → the tasks (see [`super::relay`]).
//!
//! Why pub/sub rather than `XREAD BLOCK`: one connection carries every stream this replica
//! follows, a push needs no further read (it carries the event), and following or leaving
//! a stream is one command, where a blocking read would need a connection per reader or
//! to be interrupted whenever the set of streams changes. What pub/sub loses while a
//! connection is down the store reads back from the streams once it is up again.

use std::sync::Arc;

use redis::{PushInfo, PushKind, Value};

use super::keeper::Stops;
use super::relay::{NewsMessage, TaskMessage};
use crate::event_store::EventStoreHandle;
use crate::event_store::format;
use crate::event_store::redis::keys::{Channel, Keys};
use crate::event_store::redis::{StreamNews, channel};
use crate::server_news::NewsHub;
use crate::session::{SessionHandle, SessionNews};
use crate::tasks::TaskHandle;

/// Turns pushes into calls on the actors' handles. Runs on redis-rs's connection task: it
/// must not block, so it only decodes and casts.
#[derive(Debug, Clone)]
pub struct Router {
    /// This replica's number: its own broadcasts are ignored.
    pub replica: u64,
    /// The cluster's key and channel names.
    pub keys: Arc<Keys>,
    /// Takes stream events and control messages.
    pub store: EventStoreHandle,
    /// Takes what `P:bus:all` and `P:bus:<r>` carry.
    pub sessions: SessionHandle,
    /// Takes `P:bus:news`.
    pub news: NewsHub,
    /// Takes `P:bus:task:<r>`.
    pub tasks: TaskHandle,
    /// Woken by another replica's planned stop.
    pub stops: Stops,
}

impl Router {
    /// Handles one push.
    pub fn route(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message => {}
            PushKind::Disconnection => {
                tracing::warn!("redis pub/sub connection lost; will catch up from the streams");
                self.store.feed_lost();
                return;
            }
            _ => return,
        }
        let [Value::BulkString(name), Value::BulkString(message)] = info.data.as_slice() else {
            return;
        };
        match self.keys.parse_channel(name) {
            Some(Channel::Stream(key)) => {
                let Some((origin, news)) = channel::decode(key, message) else {
                    tracing::warn!(stream = ?key, "undecodable message on a stream channel");
                    return;
                };
                // Our own appends were forwarded locally when they were stored, and our
                // own controls acted locally; only our announcement matters on return.
                let news = match (origin == self.replica, news) {
                    (false, news) => news,
                    (true, StreamNews::Superseded) => StreamNews::Announced,
                    (true, _) => return,
                };
                self.store.remote(key, news);
            }
            Some(Channel::Broadcast) if self.stops.heard(message, self.replica) => {}
            Some(Channel::Replica(_) | Channel::Broadcast) => {
                match format::from_slice::<SessionNews>("session news", message) {
                    Ok(news) if news.origin() == Some(self.replica) => {}
                    Ok(news) => self.sessions.remote(news),
                    Err(e) => tracing::warn!(error = %e, "undecodable message on the bus"),
                }
            }
            Some(Channel::News) => match format::from_slice::<NewsMessage>("news", message) {
                Ok(m) if m.origin == self.replica => {}
                Ok(m) => self.news.publish_remote(m.news),
                Err(e) => tracing::warn!(error = %e, "undecodable message on the news channel"),
            },
            Some(Channel::Task(_)) => {
                match format::from_slice::<TaskMessage>("task signal", message) {
                    Ok(m) => {
                        // Never waits here (the connection's task): the registry hop runs apart.
                        let tasks = self.tasks.clone();
                        tokio::spawn(async move {
                            if let Err(e) = tasks.local(m.task_id, m.signal).await {
                                tracing::warn!(error = %e, "a task signal from another replica was dropped");
                            }
                        });
                    }
                    Err(e) => tracing::warn!(error = %e, "undecodable message on a task channel"),
                }
            }
            None => {}
        }
    }
}
