//! [`StreamWriter`]: a stream's events written without waiting for each to be stored.
//!
//! A request that streams notifications used to wait for each append's answer before
//! making the next event, so on Redis a stream moved one event per round trip. A writer
//! keeps up to [`WINDOW`] appends in flight instead, all to the stream's one shard, whose
//! mailbox keeps them in order; on Redis the store actor commits what gathers meanwhile
//! as one run ([`super::group_commit`]). Nothing is sent to a client before it is stored:
//! the store actor forwards an event only once the store holds it.
//!
//! If the store actor stops with appends in flight (a crash), their answers are dropped;
//! the writer sends them all again, in order, with their nonces, so those the store had
//! already taken are duplicates (the store remembers the last 16 nonces of a stream,
//! hence the window).

use std::collections::VecDeque;

use bytes::Bytes;
use tokio::sync::oneshot::error::TryRecvError;

use super::handle::{AppendAnswer, CALL_TIMEOUT, EventStoreHandle, StoreCallError, next_nonce};
use crate::event_store::NewEvent;
use crate::ids::StreamKey;
use crate::rt::slot::SlotError;

/// Most appends one writer has in flight. At most the nonces a stream remembers (16, in
/// both backends), so that every re-send after a crash is recognised.
pub const WINDOW: usize = 16;

/// An append sent, its answer not yet taken.
struct InFlight {
    event: NewEvent,
    answer: AppendAnswer,
    resent: bool,
}

/// Writes one stream's events in order, with up to [`WINDOW`] in flight. An error (the
/// stream ended, the store unreachable) is returned by the call that finds it: a later
/// [`StreamWriter::write`] or [`StreamWriter::flush`].
pub struct StreamWriter {
    store: EventStoreHandle,
    key: StreamKey,
    in_flight: VecDeque<InFlight>,
    /// The last position the store answered with: sent with each append, so a store that
    /// lost it (a Redis failover) never issues it again.
    stored: u64,
}

impl std::fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWriter")
            .field("key", &self.key)
            .field("in_flight", &self.in_flight.len())
            .finish()
    }
}

impl StreamWriter {
    /// A writer of `key` through `store`.
    pub fn new(store: EventStoreHandle, key: StreamKey) -> Self {
        Self {
            store,
            key,
            // Empty until the first write: a call answered at once writes nothing.
            in_flight: VecDeque::new(),
            stored: 0,
        }
    }

    /// Sends `payload` as the stream's next event (not its last); waits only while
    /// [`WINDOW`] appends are in flight.
    pub async fn write(&mut self, payload: Bytes) -> Result<(), StoreCallError> {
        self.take_answered().await?;
        while self.in_flight.len() >= WINDOW {
            self.settle_oldest().await?;
        }
        let event = NewEvent {
            payload,
            last: false,
            nonce: next_nonce(),
            after: self.stored,
        };
        let answer = self.store.send_append(self.key, &event).await?;
        self.in_flight.push_back(InFlight {
            event,
            answer,
            resent: false,
        });
        Ok(())
    }

    /// Waits until everything written is stored (or delivered live, if the store is
    /// down); the first error found, if any.
    pub async fn flush(&mut self) -> Result<(), StoreCallError> {
        let mut first = Ok(());
        while !self.in_flight.is_empty() {
            if let Err(e) = self.settle_oldest().await
                && first.is_ok()
            {
                first = Err(e);
            }
        }
        first
    }

    /// The last position the store answered with (0: none yet).
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// Takes the answers that are already in, oldest first. A dropped one (the store
    /// actor stopped) is dealt with here and now: a receiver that reported it closed
    /// must never be polled again (tokio panics), so its append is sent again with a
    /// fresh one, or, already re-sent once, fails.
    async fn take_answered(&mut self) -> Result<(), StoreCallError> {
        while let Some(front) = self.in_flight.front_mut() {
            match front.answer.try_recv() {
                Ok(result) => {
                    self.in_flight.pop_front();
                    self.note(result?);
                }
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Closed) if !front.resent => return self.resend().await,
                Err(TryRecvError::Closed) => {
                    self.in_flight.pop_front();
                    return Err(SlotError::Dropped("event store").into());
                }
            }
        }
        Ok(())
    }

    /// Waits for the oldest append's answer. If the store actor stopped before answering,
    /// sends it and every later one again, once.
    async fn settle_oldest(&mut self) -> Result<(), StoreCallError> {
        let Some(front) = self.in_flight.front_mut() else {
            return Ok(());
        };
        let outcome = tokio::time::timeout(CALL_TIMEOUT, &mut front.answer).await;
        let resent = front.resent;
        match outcome {
            Ok(Ok(result)) => {
                self.in_flight.pop_front();
                self.note(result?);
                Ok(())
            }
            Ok(Err(_)) if !resent => self.resend().await,
            Ok(Err(_)) => {
                self.in_flight.pop_front();
                Err(SlotError::Dropped("event store").into())
            }
            Err(_) => {
                self.in_flight.pop_front();
                Err(SlotError::Timeout("event store").into())
            }
        }
    }

    /// Remembers the position of an event the store answered for (`None`: delivered live
    /// only, the store being down).
    fn note(&mut self, stored: Option<crate::ids::EventId>) {
        if let Some(id) = stored {
            self.stored = self.stored.max(id.seq);
        }
    }

    /// Sends every append in flight again, in order, to the store's next incarnation.
    /// If there is none (the store stopped for good, as at shutdown), the appends not
    /// sent again are given up: their answers are finished, and tokio panics when a
    /// finished receiver is polled again.
    async fn resend(&mut self) -> Result<(), StoreCallError> {
        for sent in 0..self.in_flight.len() {
            let Some(in_flight) = self.in_flight.get_mut(sent) else {
                break;
            };
            match self.store.send_append(self.key, &in_flight.event).await {
                Ok(answer) => {
                    in_flight.answer = answer;
                    in_flight.resent = true;
                }
                Err(e) => {
                    self.in_flight.truncate(sent);
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use ractor::{Actor, ActorProcessingErr, ActorRef};

    use super::*;
    use crate::event_store::StoreMsg;
    use crate::ids::{SessionId, StreamNo};
    use crate::rt::slot::slot;

    /// A store that drops the answer to each nonce's first append (as a crashed shard's
    /// mailbox does) and stores the re-send, with positions in order of first storage.
    struct Forgetful;

    #[derive(Default)]
    struct Stored {
        dropped: Vec<u64>,
        positions: HashMap<u64, u64>,
    }

    impl Actor for Forgetful {
        type Msg = StoreMsg;
        type State = Stored;
        type Arguments = ();
        async fn pre_start(
            &self,
            _: ActorRef<StoreMsg>,
            _: (),
        ) -> Result<Stored, ActorProcessingErr> {
            Ok(Stored::default())
        }
        async fn handle(
            &self,
            _: ActorRef<StoreMsg>,
            msg: StoreMsg,
            state: &mut Stored,
        ) -> Result<(), ActorProcessingErr> {
            if let StoreMsg::Append {
                key, nonce, reply, ..
            } = msg
            {
                if !state.dropped.contains(&nonce) {
                    state.dropped.push(nonce);
                    return Ok(());
                }
                let next = state.positions.len() as u64 + 1;
                let seq = *state.positions.entry(nonce).or_insert(next);
                let _ = reply.send(Ok(Some(key.event_id(seq))));
            }
            Ok(())
        }
    }

    /// A writer of a new stream to a [`Forgetful`] store, that store, its task, and the
    /// slot's publishing side (dropped: no next incarnation).
    async fn forgetful_writer() -> (
        StreamWriter,
        ActorRef<StoreMsg>,
        tokio::task::JoinHandle<()>,
        crate::rt::slot::SlotWriter<StoreMsg>,
    ) {
        let (writer, reader) = slot::<StoreMsg>("event store");
        let (actor, running) = Actor::spawn(None, Forgetful, ())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        writer.publish(Some(actor.clone()));
        let store = EventStoreHandle::new([reader]);
        let key = StreamKey::new(SessionId::random(), StreamNo(1));
        (StreamWriter::new(store, key), actor, running, writer)
    }

    /// The answers are dropped before the writer looks (`try_recv` finds them closed):
    /// it sends them again and never polls a closed answer, which would panic.
    #[tokio::test]
    async fn answers_dropped_before_the_writer_looks_are_sent_again() {
        let (mut w, actor, _running, _slot) = forgetful_writer().await;
        for i in 0..40u8 {
            w.write(Bytes::from(vec![i]))
                .await
                .unwrap_or_else(|e| panic!("{e}"));
            // Let the store drop the answer before the next write looks at it.
            tokio::task::yield_now().await;
        }
        assert!(w.flush().await.is_ok());
        assert_eq!(w.stored(), 40, "every event stored once");
        actor.stop(None);
    }

    /// The store stops for good (shutdown) with an append in flight: its answer is
    /// dropped and there is no next incarnation to send it to. The flush fails, once, and
    /// never polls the finished answer again (tokio panicked there: seen in the upgrade
    /// test, in 0.1.0's replicas at shutdown).
    #[tokio::test]
    async fn a_store_gone_for_good_fails_the_flush_without_a_panic() {
        let (mut w, actor, running, writer) = forgetful_writer().await;
        w.write(Bytes::from_static(b"x"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        // Handled and forgotten, or dropped with the mailbox: either way no answer.
        actor.stop(None);
        running.await.unwrap_or_else(|e| panic!("{e}"));
        drop(writer);
        assert!(w.flush().await.is_err(), "the store is gone");
        assert!(w.flush().await.is_ok(), "nothing is left in flight");
        assert!(
            w.write(Bytes::from_static(b"y")).await.is_err(),
            "a later write fails too, without a panic"
        );
    }
}
