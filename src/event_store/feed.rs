//! How the store hands events to the connection following a stream: messages of the
//! store's own type, sent through a [`ractor::DerivedActorRef`], so the store knows
//! nothing of the actor behind it (a stream actor, or a benchmark's sink).

use bytes::Bytes;

use super::Event;

/// What the store sends the connection following a stream.
#[derive(Debug)]
pub enum Feed {
    /// The next stored event of the stream: positions only increase, never repeat.
    Event(Event),
    /// An event the store could not keep (its backend is down): to be written without an
    /// id, so the client's `Last-Event-ID` stays at the last stored event. `last` ends the
    /// stream.
    Unstored {
        /// The serialized JSON-RPC message.
        payload: Bytes,
        /// The stream's last event.
        last: bool,
    },
    /// The store ends the connection.
    End(FeedEnd),
}

/// Why the store ends a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeedEnd {
    /// The stream ended without a final event (its request was cancelled).
    Completed,
    /// Close with a `retry:` hint and let the client resume: the handler asked for it (SSE
    /// polling), or events went missing from the live feed and are read back by the resume.
    Polling,
    /// The session ended (DELETE, expiry).
    SessionEnded,
}

/// The connection following a stream, as the store sees it.
pub type Subscriber = ractor::DerivedActorRef<Feed>;

/// The stop reason the store gives a connection that a newer one on the same stream
/// superseded. A stop, not a [`Feed`] message: ractor handles it before the events already
/// queued for the old connection, which the new one gets by replay.
pub const SUPERSEDED: &str = "superseded";
