//! How callers reach the *current* incarnation of a supervised actor.
//!
//! The supervisor publishes each child's [`ActorRef`] into a [`Slot`] when it starts or
//! restarts it; handles hold the slot, never a bare `ActorRef`, so nobody keeps talking to
//! a dead actor after a restart. A `watch` channel is the publication mechanism: reading
//! it is an uncontended read lock taken once per message, and it lets a caller *wait* for
//! the restart instead of failing while the supervisor is mid-restart.

use std::time::Duration;

use ractor::{ActorRef, Message, MessagingErr, RpcReplyPort};
use tokio::sync::{oneshot, watch};

/// How long a caller waits for a dead actor to be restarted before giving up.
pub const RESTART_WAIT: Duration = Duration::from_secs(5);

/// Why a message to a supervised actor did not get through or get an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SlotError {
    /// No live actor within [`RESTART_WAIT`] (shutting down, or restarting too slowly).
    #[error("{0} is not running")]
    Unavailable(&'static str),
    /// The actor took the message but did not answer in time.
    #[error("{0} did not answer in time")]
    Timeout(&'static str),
    /// The actor took the message and stopped before answering (it crashed).
    #[error("{0} stopped before answering")]
    Dropped(&'static str),
}

/// The publishing side, held by the supervisor.
#[derive(Debug)]
pub struct SlotWriter<M: Message> {
    tx: watch::Sender<Option<ActorRef<M>>>,
}

/// The reading side, held by handles. Cheap to clone.
#[derive(Debug)]
pub struct Slot<M: Message> {
    name: &'static str,
    rx: watch::Receiver<Option<ActorRef<M>>>,
    /// Told of each message sent (the actor's mailbox depth counts them in; the actor
    /// counts them out). A function, so that this layer knows nothing of metrics.
    on_send: Option<fn()>,
}

impl<M: Message> Clone for Slot<M> {
    fn clone(&self) -> Self {
        Self {
            name: self.name,
            rx: self.rx.clone(),
            on_send: self.on_send,
        }
    }
}

/// A new empty slot for the actor called `name` (used in error messages).
pub fn slot<M: Message>(name: &'static str) -> (SlotWriter<M>, Slot<M>) {
    let (tx, rx) = watch::channel(None);
    let slot = Slot {
        name,
        rx,
        on_send: None,
    };
    (SlotWriter { tx }, slot)
}

impl<M: Message> SlotWriter<M> {
    /// Publishes the current incarnation (or `None` while stopped).
    pub fn publish(&self, actor: Option<ActorRef<M>>) {
        self.tx.send_replace(actor);
    }
}

impl<M: Message> Slot<M> {
    /// Calls `on_send` for every message sent through this slot (and its clones): the
    /// actor's mailbox depth counts them in.
    pub fn counting(mut self, on_send: fn()) -> Self {
        self.on_send = Some(on_send);
        self
    }

    fn sent(&self) {
        if let Some(on_send) = self.on_send {
            on_send();
        }
    }

    /// The actor as published now, if any.
    pub fn current(&self) -> Option<ActorRef<M>> {
        self.rx.borrow().clone()
    }

    /// Sends without waiting: fails at once if the actor is down. For messages whose loss
    /// is harmless (unsubscribe, timers) or that the caller has no way to wait for.
    pub fn cast(&self, msg: M) -> Result<(), SlotError> {
        match self.current() {
            Some(actor) => actor
                .send_message(msg)
                .map(|()| self.sent())
                .map_err(|_| SlotError::Unavailable(self.name)),
            None => Err(SlotError::Unavailable(self.name)),
        }
    }

    /// Sends `msg`, waiting up to [`RESTART_WAIT`] for a restarted actor if the current
    /// one is dead. The message is handed back by ractor on a failed send, so it is
    /// re-sent to the new incarnation rather than rebuilt.
    pub async fn send(&self, mut msg: M) -> Result<(), SlotError> {
        let deadline = tokio::time::Instant::now() + RESTART_WAIT;
        let mut rx = self.rx.clone();
        loop {
            let current = rx.borrow_and_update().clone();
            if let Some(actor) = current {
                match actor.send_message(msg) {
                    Ok(()) => {
                        self.sent();
                        return Ok(());
                    }
                    Err(MessagingErr::SendErr(back)) => msg = back,
                    Err(_) => return Err(SlotError::Unavailable(self.name)),
                }
            }
            // Wait for the supervisor to publish the next incarnation.
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => continue,
                _ => return Err(SlotError::Unavailable(self.name)),
            }
        }
    }

    /// Sends the message `build` makes around a reply port, with [`Slot::send`]
    /// semantics, and returns where its answer will come without waiting for it: for a
    /// caller that keeps several requests in flight. A dropped answer means the actor
    /// stopped before handling it; re-sending is the caller's choice.
    pub async fn request<R: Send + 'static>(
        &self,
        build: impl FnOnce(RpcReplyPort<R>) -> M,
    ) -> Result<oneshot::Receiver<R>, SlotError> {
        let (tx, rx) = oneshot::channel();
        self.send(build(RpcReplyPort::from(tx))).await?;
        Ok(rx)
    }

    /// Request/reply: builds the message around a reply port, sends it with
    /// [`Slot::send`] semantics, and waits up to `timeout` for the answer.
    ///
    /// Messages still queued when an actor crashes die with its mailbox. When that happens
    /// (the reply port is dropped unanswered), the request is built again and sent once to
    /// the next incarnation. The one case this can repeat work is a crash in the middle of
    /// handling this very message; losing every queued request on each crash is worse.
    pub async fn call<R: Send + 'static>(
        &self,
        build: impl Fn(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, SlotError> {
        match self.call_once(&build, timeout).await {
            Err(SlotError::Dropped(_)) => self.call_once(&build, timeout).await,
            other => other,
        }
    }

    async fn call_once<R: Send + 'static>(
        &self,
        build: &impl Fn(RpcReplyPort<R>) -> M,
        timeout: Duration,
    ) -> Result<R, SlotError> {
        let (tx, rx) = oneshot::channel();
        self.send(build(RpcReplyPort::from(tx))).await?;
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(_)) => Err(SlotError::Dropped(self.name)),
            Err(_) => Err(SlotError::Timeout(self.name)),
        }
    }
}
