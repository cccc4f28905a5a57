//! The pub/sub bus between replicas.
//!
//! Redis delivers pub/sub messages as RESP3 pushes; [`Router::route`] decodes each one
//! and hands it to the actor it concerns, as a message:
//! - `P:{S}:c:<n>` (events of a stream, published by the append script in the same atomic
//!   step as the store) → the event-store actor, which forwards them to the local
//!   connection following that stream, if any;
//! - `P:bus:all` (a session ended, a cancellation, a log level or subscription changed)
//!   and `P:bus:<r>` (a client's answer to a request this replica sent) → the session
//!   manager. A replica ignores its own broadcasts (it applied them already).
//!
//! Why pub/sub rather than `XREAD BLOCK`: one connection carries every stream this replica
//! follows, a push needs no further read (it carries the event), and following or leaving
//! a stream is one command, where a blocking read would need a connection per reader or
//! to be interrupted whenever the set of streams changes. What pub/sub loses while a
//! connection is down the store actor reads back from the streams once it is up again
//! (see `StoreMsg::FeedLost`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use redis::{PushInfo, PushKind, Value};

use super::{Channel, Keys};
use crate::event_store::{Event, StoreMsg, StreamKey};
use crate::protocol::{ErrorObject, RequestId};
use crate::session::{SessionId, SessionMsg};
use crate::supervisor::registry::Slot;

/// Most pushes waiting in the store actor's mailbox; past this the bus drops them and asks
/// the store to catch up from Redis instead, so a burst cannot grow memory without bound.
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

/// Encodes the message the append script publishes (the script builds the same bytes).
pub fn encode_event(origin: u64, seq: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("{origin}\n{seq}\n{}\n", if last { '1' } else { '0' }).into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Encodes a control message: `s` (replica `origin` now follows this stream), `c`
/// (completed) or `d` (disconnect). Returns the encoder for a given origin.
pub fn encode_control_flag(flag: u8) -> impl FnOnce(u64) -> Vec<u8> {
    move |origin| {
        let mut out = format!("{origin}\n0\n").into_bytes();
        out.push(flag);
        out.push(b'\n');
        out
    }
}

/// Encodes "replica `origin` now follows this stream".
pub fn encode_superseded(origin: u64) -> Vec<u8> {
    encode_control_flag(b's')(origin)
}

/// Counts pushes waiting in the store actor's mailbox, so a burst cannot grow it without
/// bound: past [`MAX_QUEUED_PUSHES`] pushes are dropped and one `FeedLost` asks the store
/// to read back from Redis instead.
#[derive(Debug, Default)]
pub struct PushQueue {
    queued: AtomicUsize,
    lost_pending: std::sync::atomic::AtomicBool,
}

impl PushQueue {
    /// One push was handled.
    pub fn handled(&self) {
        let _ = self
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(1))
            });
    }

    /// The store handled a `FeedLost`: the next overflow sends another.
    pub fn feed_lost_seen(&self) {
        self.lost_pending.store(false, Ordering::Relaxed);
    }

    /// A new store actor: nothing of the old mailbox is waiting any more.
    pub fn reset(&self) {
        self.queued.store(0, Ordering::Relaxed);
        self.lost_pending.store(false, Ordering::Relaxed);
    }
}

/// Decodes a stream-channel message: its origin replica and what it says.
pub fn decode_stream(key: StreamKey, message: &[u8]) -> Option<(u64, StreamNews)> {
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

/// A message between replicas on `P:bus:*`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum BusMessage {
    /// The session was terminated (DELETE) on some replica.
    SessionEnded {
        /// The session.
        session: String,
    },
    /// The client cancelled a request (`notifications/cancelled`) through a replica that
    /// is not running it.
    Cancel {
        /// The replica that heard it.
        origin: u64,
        /// The session.
        session: String,
        /// The client's id of the request.
        request: RequestId,
    },
    /// `logging/setLevel` or a resource subscription changed on some replica: replicas
    /// holding a copy of the session update it.
    SessionChanged {
        /// The replica where it changed.
        origin: u64,
        /// The session.
        session: String,
        /// The new log level.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        log_level: Option<crate::protocol::methods::LoggingLevel>,
        /// A resource subscribed to...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        subscribed: Option<String>,
        /// ...or unsubscribed from.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        unsubscribed: Option<String>,
    },
    /// The client answered, through another replica, a request this replica sent it.
    Answer {
        /// The session.
        session: String,
        /// Our id of the request.
        request: RequestId,
        /// The result...
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<serde_json::Value>,
        /// ...or the client's error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorObject>,
    },
}

/// Turns pushes into actor messages. Runs on redis-rs's connection task: it must not block,
/// so it only decodes and sends.
#[derive(Debug, Clone)]
pub struct Router {
    replica: u64,
    keys: Arc<Keys>,
    store: Slot<StoreMsg>,
    sessions: Slot<SessionMsg>,
    queued: Arc<PushQueue>,
}

impl Router {
    /// A router for replica `replica`, delivering to the actors behind the slots.
    /// `queued` counts pushes sent to the store and not yet handled (the store decrements).
    pub fn new(
        replica: u64,
        keys: Arc<Keys>,
        store: Slot<StoreMsg>,
        sessions: Slot<SessionMsg>,
        queued: Arc<PushQueue>,
    ) -> Self {
        Self {
            replica,
            keys,
            store,
            sessions,
            queued,
        }
    }

    /// Handles one push.
    pub fn route(&self, info: PushInfo) {
        match info.kind {
            PushKind::Message => {}
            PushKind::Disconnection => {
                tracing::warn!("redis pub/sub connection lost; will catch up from the streams");
                self.queued.lost_pending.store(true, Ordering::Relaxed);
                self.to_store(StoreMsg::FeedLost);
                return;
            }
            _ => return,
        }
        let [Value::BulkString(channel), Value::BulkString(message)] = info.data.as_slice() else {
            return;
        };
        match self.keys.parse_channel(channel) {
            Some(Channel::Stream(key)) => {
                let Some((origin, news)) = decode_stream(key, message) else {
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
                let q = &self.queued;
                if q.queued.fetch_add(1, Ordering::Relaxed) >= MAX_QUEUED_PUSHES {
                    q.handled();
                    if !q.lost_pending.swap(true, Ordering::Relaxed) {
                        self.to_store(StoreMsg::FeedLost);
                    }
                    return;
                }
                if !self.to_store(StoreMsg::Remote(key, news)) {
                    q.handled();
                }
            }
            Some(Channel::Replica(_) | Channel::Broadcast) => {
                match serde_json::from_slice::<BusMessage>(message) {
                    Ok(msg) => self.to_sessions(msg),
                    Err(e) => tracing::warn!(error = %e, "undecodable message on the bus"),
                }
            }
            None => {}
        }
    }

    fn to_store(&self, msg: StoreMsg) -> bool {
        self.store
            .current()
            .is_some_and(|actor| actor.send_message(msg).is_ok())
    }

    fn to_sessions(&self, msg: BusMessage) {
        let msg = match msg {
            BusMessage::SessionEnded { session } => {
                let Ok(id) = session.parse::<SessionId>() else {
                    return;
                };
                SessionMsg::Ended(id)
            }
            BusMessage::Cancel {
                origin,
                session,
                request,
            } => {
                let Ok(id) = session.parse::<SessionId>() else {
                    return;
                };
                if origin == self.replica {
                    return;
                }
                SessionMsg::RemoteCancel(id, request)
            }
            BusMessage::SessionChanged {
                origin,
                session,
                log_level,
                subscribed,
                unsubscribed,
            } => {
                let Ok(id) = session.parse::<SessionId>() else {
                    return;
                };
                if origin == self.replica {
                    return;
                }
                SessionMsg::RemoteChange(
                    id,
                    log_level,
                    subscribed
                        .map(|uri| (uri, true))
                        .or(unsubscribed.map(|uri| (uri, false))),
                )
            }
            BusMessage::Answer {
                session,
                request,
                result,
                error,
            } => {
                let Ok(id) = session.parse::<SessionId>() else {
                    return;
                };
                let outcome = match (result, error) {
                    (_, Some(error)) => Err(error),
                    (result, None) => Ok(result.unwrap_or(serde_json::Value::Null)),
                };
                SessionMsg::RemoteAnswer(id, request, outcome)
            }
        };
        if let Some(actor) = self.sessions.current() {
            let _ = actor.send_message(msg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_store::StreamNo;

    #[test]
    fn stream_messages_round_trip() {
        let key = StreamKey::new(SessionId::random(), StreamNo(3));
        let bytes = encode_event(9, 17, true, b"{\"a\":\n1}");
        let Some((origin, news)) = decode_stream(key, &bytes) else {
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
        assert_eq!(
            decode_stream(key, &encode_superseded(4)),
            Some((4, StreamNews::Superseded))
        );
        assert_eq!(
            decode_stream(key, &encode_control_flag(b'c')(5)),
            Some((5, StreamNews::Completed))
        );
        assert_eq!(
            decode_stream(key, &encode_control_flag(b'd')(5)),
            Some((5, StreamNews::Disconnect))
        );
        assert!(decode_stream(key, b"x\n1\n0\n").is_none());
        assert!(decode_stream(key, b"1\n0\n0\n{}").is_none());
    }
}
