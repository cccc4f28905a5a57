//! The `tasks/stream` connections open on this replica, per task: at most
//! `sse.max_connections_per_stream` follow one task, as for a GET or POST stream. Past it,
//! the oldest is cut with a `retry:` hint (superseded), so a client that reconnects
//! without closing its old connections, or many readers of one task, cannot pile up
//! followers; the newest connection always starts.
//!
//! Its own process, like the task registry: it only keeps the table, and tells a cut
//! connection through the one-shot channel that connection gave it. A reader leaves the
//! table when it is dropped, whatever carried it.

use std::collections::{HashMap, VecDeque};

use std::future::Future;

use tokio::sync::{mpsc, oneshot};

use crate::ids::TaskId;

/// Requests queued for the process: joins and leaves are one message each per
/// connection, and the sender waits when it is full.
const INBOX: usize = 1024;

enum Msg {
    Join {
        task: TaskId,
        cut: oneshot::Sender<()>,
        reply: oneshot::Sender<u64>,
    },
    Leave {
        task: TaskId,
        reader: u64,
    },
}

/// The handle of the table.
#[derive(Debug, Clone)]
pub(crate) struct TaskReaders {
    tx: Option<mpsc::Sender<Msg>>,
}

/// One connection's place in the table, given back when dropped:
/// [`Reader::poll_cut`] is ready when a newer one superseded it.
#[derive(Debug)]
pub(crate) struct Reader {
    task: TaskId,
    no: Option<u64>,
    cut: oneshot::Receiver<()>,
    table: Option<mpsc::Sender<Msg>>,
}

impl Reader {
    /// Ready when this connection was superseded; never for one outside the table.
    pub(crate) fn poll_cut(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.no.is_none() {
            return std::task::Poll::Pending;
        }
        match std::pin::Pin::new(&mut self.cut).poll(cx) {
            std::task::Poll::Ready(Ok(())) => std::task::Poll::Ready(()),
            // The table is gone (shutdown): nobody cuts this reader any more.
            std::task::Poll::Ready(Err(_)) => {
                self.no = None;
                std::task::Poll::Pending
            }
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let (Some(table), Some(reader)) = (self.table.take(), self.no) else {
            return;
        };
        let leave = Msg::Leave {
            task: self.task,
            reader,
        };
        // Most leaves fit at once; a full inbox gets the message from a task of its own.
        if let Err(mpsc::error::TrySendError::Full(leave)) = table.try_send(leave)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move { table.send(leave).await });
        }
    }
}

impl TaskReaders {
    /// Starts the table, allowing `max` connections per task (at least 1). Outside a
    /// runtime (a router built by a synchronous test) there is no table and no bound.
    pub(crate) fn start(max: usize) -> Self {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Self { tx: None };
        };
        let (tx, rx) = mpsc::channel(INBOX);
        runtime.spawn(run(rx, max.max(1)));
        Self { tx: Some(tx) }
    }

    /// No table: readers are not bounded (a server outside the runtime's tree).
    pub(crate) fn none() -> Self {
        Self { tx: None }
    }

    /// Enters a new connection following `task`, cutting the oldest past the bound.
    pub(crate) async fn join(&self, task: TaskId) -> Reader {
        let (cut_tx, cut) = oneshot::channel();
        let (reply, no) = oneshot::channel();
        let msg = Msg::Join {
            task,
            cut: cut_tx,
            reply,
        };
        let joined = match &self.tx {
            Some(tx) if tx.send(msg).await.is_ok() => no.await.ok(),
            _ => None,
        };
        Reader {
            task,
            no: joined,
            cut,
            table: self.tx.clone(),
        }
    }
}

async fn run(mut inbox: mpsc::Receiver<Msg>, max: usize) {
    let mut tasks: HashMap<TaskId, VecDeque<(u64, oneshot::Sender<()>)>> = HashMap::new();
    let mut next = 0u64;
    while let Some(msg) = inbox.recv().await {
        match msg {
            Msg::Join { task, cut, reply } => {
                next += 1;
                let readers = tasks.entry(task).or_default();
                readers.push_back((next, cut));
                while readers.len() > max {
                    if let Some((_, oldest)) = readers.pop_front() {
                        let _ = oldest.send(());
                    }
                }
                let _ = reply.send(next);
            }
            Msg::Leave { task, reader } => {
                if let Some(readers) = tasks.get_mut(&task) {
                    readers.retain(|(no, _)| *no != reader);
                    if readers.is_empty() {
                        tasks.remove(&task);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The table cuts before it replies to a join: once `join` returned, every cut it
    // caused was sent, so `try_recv` tells without waiting.
    #[tokio::test]
    async fn past_the_bound_the_oldest_reader_of_a_task_is_cut() {
        let readers = TaskReaders::start(2);
        let (Ok(a), Ok(b)) = (TaskId::random(), TaskId::random()) else {
            panic!("no randomness")
        };
        let mut first = readers.join(a).await;
        let mut second = readers.join(a).await;
        let other = readers.join(b).await;
        let third = readers.join(a).await;
        assert!(first.cut.try_recv().is_ok(), "the oldest of three is cut");
        // One that left makes room: a fourth does not cut the second.
        drop(third);
        let mut fourth = readers.join(a).await;
        assert!(
            second.cut.try_recv().is_err(),
            "two readers of a: within the bound"
        );
        assert!(fourth.cut.try_recv().is_err());
        drop(other);
    }
}
