//! Signals to a running task (`tasks/update`'s answers, `tasks/cancel`): delivered to
//! the runner on this replica, or through the cluster's bus to the replica running it.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::registry::RegistryMsg;
use super::runner::TaskMsg;
use super::{SIGNAL_WAIT, TaskError, TaskHandle};
use crate::ids::TaskId;

/// A signal for a task running on another replica.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "signal", rename_all = "snake_case")]
pub enum TaskSignal {
    /// The client's answers.
    Respond {
        /// By question key.
        answers: Map<String, Value>,
    },
    /// The client cancelled.
    Cancel,
}

impl TaskHandle {
    /// Delivers `signal` to task `id`, on whichever replica runs it. Answers to a task
    /// running here are acknowledged once their effect is stored (a `tasks/get` after
    /// the acknowledgement shows it); a cancel, and a signal sent to another replica,
    /// once delivered.
    pub async fn signal(
        &self,
        id: TaskId,
        principal: Option<&crate::auth::Principal>,
        signal: TaskSignal,
    ) -> Result<(), TaskError> {
        let record = self.get(id, principal).await?;
        if record.is_terminal() {
            return Ok(());
        }
        if record.owner == self.replica() {
            return self.local(id, signal).await;
        }
        match self.inner.signals.get() {
            Some(signals) => signals
                .send(record.owner, id, signal)
                .await
                .map_err(TaskError::Unavailable),
            None => Ok(()),
        }
    }

    /// A signal for a task of this replica (from a request here, or from the bus). A task
    /// that is not running here any more (it just ended) needs none: `Ok`. A runner whose
    /// mailbox stays full for [`SIGNAL_WAIT`] is busy: [`TaskError::Busy`], and the client
    /// sends again.
    pub async fn local(&self, id: TaskId, signal: TaskSignal) -> Result<(), TaskError> {
        let (applied, stored) = oneshot::channel();
        let (msg, stored) = match signal {
            TaskSignal::Respond { answers } => {
                (TaskMsg::Respond { answers, applied }, Some(stored))
            }
            TaskSignal::Cancel => (TaskMsg::Cancel, None),
        };
        let (reply, mailbox) = oneshot::channel();
        let asked = RegistryMsg::Mailbox { id, reply };
        if self.inner.registry.send(asked).await.is_err() {
            return Err(TaskError::Unavailable(
                "the task registry has stopped".into(),
            ));
        }
        let Ok(Some(mailbox)) = mailbox.await else {
            tracing::debug!(task_id = %id, "a signal found no running task here (it ended)");
            return Ok(());
        };
        if tokio::time::timeout(SIGNAL_WAIT, mailbox.send(msg))
            .await
            .is_err()
        {
            return Err(TaskError::Busy(id.to_string()));
        }
        // Answers are acknowledged once stored, so a `tasks/get` right after the
        // acknowledgement sees them applied (a client checks which questions remain).
        // A runner that ended meanwhile drops the sender: nothing left to wait for.
        if let Some(stored) = stored {
            let _ = tokio::time::timeout(SIGNAL_WAIT, stored).await;
        }
        Ok(())
    }
}
