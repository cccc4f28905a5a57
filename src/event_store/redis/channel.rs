//! What travels on a stream's pub/sub channel (`P:{S}:c:<n>`), and the bound on how much of
//! it may wait in the store actor's mailbox.
//!
//! The append script publishes each event it stores; replicas publish control messages
//! (a new connection follows the stream, the stream ended, close for polling). Every
//! message starts with the replica that sent it, so a replica can recognise its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;

use crate::event_store::Event;
use crate::ids::StreamKey;

/// Most pushes waiting in the store actor's mailbox; past this they are dropped and the
/// store catches up from Redis instead, so a burst cannot grow memory without bound.
pub const MAX_QUEUED_PUSHES: usize = 65_536;

/// A decoded message on a stream channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamNews {
    /// An event was stored (by another replica).
    Stored(Event),
    /// Another replica took over the connection following this stream.
    Superseded,
    /// Our own announcement that we follow the stream came back: "superseded" news
    /// heard from now on is newer than our connection.
    Announced,
    /// The stream ended without a final event (cancelled on another replica).
    Completed,
    /// The handler (on another replica) asked this connection to close (SSE polling).
    Disconnect,
}

/// A control message on a stream channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlFlag {
    /// The sending replica now follows the stream (newest connection wins).
    Follows,
    /// The stream ended without a final event.
    Completed,
    /// Close the connection with a retry hint (SSE polling).
    Disconnect,
}

impl ControlFlag {
    fn byte(self) -> u8 {
        match self {
            Self::Follows => b's',
            Self::Completed => b'c',
            Self::Disconnect => b'd',
        }
    }
}

/// Encodes the message the append script publishes (the script builds the same bytes).
#[cfg(any(test, feature = "testing"))]
pub fn encode_event(origin: u64, seq: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{origin}\n{seq}\n{}\n", if last { '1' } else { '0' }).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Encodes control message `flag` from replica `origin`.
pub fn encode_control(origin: u64, flag: ControlFlag) -> Vec<u8> {
    let mut out = format!("{origin}\n0\n").into_bytes();
    out.push(flag.byte());
    out.push(b'\n');
    out
}

/// Decodes a stream-channel message: its origin replica and what it says.
pub fn decode(key: StreamKey, message: &[u8]) -> Option<(u64, StreamNews)> {
    let mut parts = message.splitn(4, |b| *b == b'\n');
    let origin = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let seq: u64 = std::str::from_utf8(parts.next()?).ok()?.parse().ok()?;
    let flag = parts.next()?;
    let payload = parts.next()?;
    let news = match flag {
        b"s" => StreamNews::Superseded,
        b"c" => StreamNews::Completed,
        b"d" => StreamNews::Disconnect,
        b"0" | b"1" if seq > 0 => StreamNews::Stored(Event {
            id: key.event_id(seq),
            payload: Bytes::copy_from_slice(payload),
            last: flag == b"1",
        }),
        _ => return None,
    };
    Some((origin, news))
}

/// Counts pushes waiting in the store actor's mailbox. Each queued push holds a
/// [`QueuedPush`], which counts itself out when dropped: when the store has handled it, or
/// when a crashed actor's mailbox is dropped with it, so the count never drifts.
#[derive(Debug, Default)]
pub struct PushQueue {
    queued: AtomicUsize,
    /// A `FeedLost` is on its way: overflows meanwhile need no second one.
    lost_pending: AtomicBool,
}

/// One push in the store's mailbox (see [`PushQueue`]).
#[derive(Debug)]
pub struct QueuedPush(Arc<PushQueue>);

impl Drop for QueuedPush {
    fn drop(&mut self) {
        let _ = self
            .0
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }
}

/// A `FeedLost` in the store's mailbox: the next overflow may send another once it is
/// handled (or dropped).
#[derive(Debug)]
pub struct PendingLoss(Arc<PushQueue>);

impl Drop for PendingLoss {
    fn drop(&mut self) {
        self.0.lost_pending.store(false, Ordering::Relaxed);
    }
}

/// What to do with a push arriving for the store.
#[derive(Debug)]
pub enum Admission {
    /// Queue it, holding this.
    Queue(QueuedPush),
    /// Over the bound: drop it and send this `FeedLost` instead.
    Lost(PendingLoss),
    /// Over the bound, and a `FeedLost` is already on its way: drop it.
    Drop,
}

impl PushQueue {
    /// Admits one more push, unless [`MAX_QUEUED_PUSHES`] are waiting.
    pub fn admit(self: &Arc<Self>) -> Admission {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED_PUSHES {
            drop(QueuedPush(self.clone()));
            return match self.lost() {
                Some(loss) => Admission::Lost(loss),
                None => Admission::Drop,
            };
        }
        Admission::Queue(QueuedPush(self.clone()))
    }

    /// The feed lost messages: the `FeedLost` to send, unless one is on its way already.
    pub fn lost(self: &Arc<Self>) -> Option<PendingLoss> {
        (!self.lost_pending.swap(true, Ordering::Relaxed)).then(|| PendingLoss(self.clone()))
    }

    /// Pushes waiting now.
    #[cfg(any(test, feature = "testing"))]
    pub fn len(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// True when no push is waiting.
    #[cfg(any(test, feature = "testing"))]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{SessionId, StreamNo};

    #[test]
    fn stream_messages_round_trip() {
        let key = StreamKey::new(SessionId::random(), StreamNo(3));
        let bytes = encode_event(9, 17, true, b"{\"a\":\n1}");
        let Some((origin, news)) = decode(key, &bytes) else {
            panic!("an encoded event must decode");
        };
        assert_eq!(origin, 9);
        assert_eq!(
            news,
            StreamNews::Stored(Event {
                id: key.event_id(17),
                payload: Bytes::from_static(b"{\"a\":\n1}"),
                last: true,
            })
        );
        let cases = [
            (ControlFlag::Follows, StreamNews::Superseded),
            (ControlFlag::Completed, StreamNews::Completed),
            (ControlFlag::Disconnect, StreamNews::Disconnect),
        ];
        for (flag, news) in cases {
            assert_eq!(decode(key, &encode_control(4, flag)), Some((4, news)));
        }
        assert!(decode(key, b"x\n1\n0\n").is_none());
        assert!(decode(key, b"1\n0\n0\n{}").is_none());
    }

    #[test]
    fn the_queue_counts_pushes_out_when_they_are_dropped_and_reports_one_loss_at_a_time() {
        let queue = Arc::new(PushQueue::default());
        let held: Vec<QueuedPush> = (0..MAX_QUEUED_PUSHES)
            .filter_map(|_| match queue.admit() {
                Admission::Queue(push) => Some(push),
                _ => None,
            })
            .collect();
        assert_eq!(queue.len(), MAX_QUEUED_PUSHES);
        let Admission::Lost(loss) = queue.admit() else {
            panic!("the first push over the bound reports a loss");
        };
        assert!(
            matches!(queue.admit(), Admission::Drop),
            "one loss at a time"
        );
        assert_eq!(
            queue.len(),
            MAX_QUEUED_PUSHES,
            "dropped pushes are not counted"
        );
        drop(loss);
        assert!(
            matches!(queue.admit(), Admission::Lost(_)),
            "handled: report again"
        );
        drop(held);
        assert!(queue.is_empty());
        assert!(matches!(queue.admit(), Admission::Queue(_)));
    }
}
