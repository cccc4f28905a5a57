//! Group commit, for a backend that appends detached (Redis): each stream has at most one
//! run of appends in flight; the appends that arrive meanwhile gather, and go together as
//! the next run when it returns. Under load a stream then costs one round trip per run,
//! not per event; alone, an append goes at once, as before. Runs of different streams are
//! in flight together.

use ractor::{ActorRef, RpcReplyPort};
use tracing::Instrument;

use super::StoreMsg;
use crate::event_store::{Appended, EventStore, NewEvent, StoreError};
use crate::ids::{EventId, IdMap, StreamKey};

/// Most events in one run, and most payload bytes (a run over it still takes one event).
/// Bounded so that one busy stream's run stays a small script call.
const RUN_EVENTS: usize = 128;
const RUN_BYTES: usize = 1 << 20;

/// An append waiting for its run, with the caller waiting for its answer.
#[derive(Debug)]
pub struct QueuedAppend {
    pub(super) event: NewEvent,
    pub(super) reply: RpcReplyPort<Result<Option<EventId>, StoreError>>,
}

impl QueuedAppend {
    pub(super) fn new(
        payload: bytes::Bytes,
        last: bool,
        nonce: u64,
        after: u64,
        reply: RpcReplyPort<Result<Option<EventId>, StoreError>>,
    ) -> Self {
        Self {
            event: NewEvent {
                payload,
                last,
                nonce,
                after,
            },
            reply,
        }
    }
}

/// The streams with a run in flight, and what gathered for each meanwhile. Kept by one
/// incarnation of the store actor: after a crash the callers re-send, with their nonces.
#[derive(Debug, Default)]
pub(super) struct Runs {
    waiting: IdMap<StreamKey, Vec<QueuedAppend>>,
}

impl Runs {
    /// Queues `append` behind `key`'s run in flight; hands it back if there is none.
    pub(super) fn gather(&mut self, key: StreamKey, append: QueuedAppend) -> Option<QueuedAppend> {
        match self.waiting.get_mut(&key) {
            Some(queue) => {
                queue.push(append);
                None
            }
            None => Some(append),
        }
    }

    /// Starts `run` on `key` through `backend`; false (`run` handed back) if the backend
    /// appends inline.
    pub(super) fn start<B: EventStore>(
        &mut self,
        backend: &B,
        myself: &ActorRef<StoreMsg>,
        key: StreamKey,
        run: Vec<QueuedAppend>,
    ) -> Result<(), Vec<QueuedAppend>> {
        let events: Vec<NewEvent> = run.iter().map(|a| a.event.clone()).collect();
        let Some(detached) = backend.append_detached(key, &events) else {
            return Err(run);
        };
        self.waiting.entry(key).or_default();
        let me = myself.clone();
        tokio::spawn(
            async move {
                let results = detached.await;
                // If the actor is gone (restarting), the callers' calls fail and are
                // re-sent; their nonces make those duplicates, which the next actor
                // forwards.
                let _ = me.send_message(StoreMsg::Stored { key, run, results });
            }
            .instrument(tracing::Span::current()),
        );
        Ok(())
    }

    /// `key`'s run returned: the next run, gathered meanwhile (at most [`RUN_EVENTS`]
    /// events and [`RUN_BYTES`]), or `None` and the stream is idle.
    pub(super) fn next(&mut self, key: StreamKey) -> Option<Vec<QueuedAppend>> {
        let queue = self.waiting.get_mut(&key)?;
        if queue.is_empty() {
            self.waiting.remove(&key);
            return None;
        }
        let mut bytes = 0;
        let take = queue
            .iter()
            .take(RUN_EVENTS)
            .position(|a| {
                bytes += a.event.payload.len();
                bytes > RUN_BYTES
            })
            .unwrap_or(queue.len().min(RUN_EVENTS))
            .max(1);
        let rest = queue.split_off(take);
        Some(std::mem::replace(queue, rest))
    }
}

/// Pairs a run with its results; an event the backend gave no result for failed.
pub(super) fn settled(
    run: Vec<QueuedAppend>,
    results: Vec<Result<Appended, StoreError>>,
) -> impl Iterator<Item = (QueuedAppend, Result<Appended, StoreError>)> {
    let missing = StoreError::Backend("malformed reply from the store");
    run.into_iter()
        .zip(results.into_iter().chain(std::iter::repeat(Err(missing))))
}
