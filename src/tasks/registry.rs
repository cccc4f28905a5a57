//! The registry: a process that knows which tasks run on this replica and where their
//! runners' mailboxes are. It only looks things up and never waits on a runner; the
//! caller sends.

use std::collections::HashMap;

use tokio::sync::{mpsc, oneshot};

use super::runner::TaskMsg;
use crate::ids::TaskId;

/// What the registry is asked.
pub(super) enum RegistryMsg {
    /// Task `id` runs here, its runner reading `mailbox`; replies false when
    /// `tasks.max_running` run already.
    Register {
        id: TaskId,
        mailbox: mpsc::Sender<TaskMsg>,
        reply: oneshot::Sender<bool>,
    },
    /// Task `id` stopped running here.
    Unregister(TaskId),
    /// The mailbox of task `id`'s runner, if it runs here.
    Mailbox {
        id: TaskId,
        reply: oneshot::Sender<Option<mpsc::Sender<TaskMsg>>>,
    },
}

/// The registry: which tasks run here, and their runners' mailboxes. Its own process;
/// ends when every handle is gone.
pub(super) async fn run(mut inbox: mpsc::Receiver<RegistryMsg>, max_running: usize) {
    let mut running: HashMap<TaskId, mpsc::Sender<TaskMsg>> = HashMap::new();
    while let Some(msg) = inbox.recv().await {
        match msg {
            RegistryMsg::Register { id, mailbox, reply } => {
                let room = running.len() < max_running;
                if room {
                    running.insert(id, mailbox);
                }
                let _ = reply.send(room);
            }
            RegistryMsg::Unregister(id) => {
                running.remove(&id);
            }
            // The caller sends: the registry never waits on a runner.
            RegistryMsg::Mailbox { id, reply } => {
                let _ = reply.send(running.get(&id).cloned());
            }
        }
    }
}
