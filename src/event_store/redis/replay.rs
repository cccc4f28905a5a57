//! Replays: one script checks the stream and the replay window and reports its end and
//! what was evicted, then `HMGET` reads the events by position, a page at a time (the
//! script returning them itself was slower: see docs/performance.md).

use bytes::Bytes;
use redis::Value;

use super::{MALFORMED, RedisStore, UNAVAILABLE, int, millis, session_script, uint};
use crate::event_store::{Event, Replay, ReplayOutcome, StoreError};
use crate::ids::StreamKey;

/// The event at position `seq` of `key` from its value in the events hash,
/// `<ms stored>:<last 0|1>:<payload>`; `None` for anything else. The payload is a slice of
/// the value's buffer, not a copy.
pub fn decode_event(key: StreamKey, seq: u64, value: Value) -> Option<Event> {
    let Value::BulkString(bytes) = value else {
        return None;
    };
    let bytes = Bytes::from(bytes);
    let first = bytes.iter().position(|b| *b == b':')?;
    let last = match bytes.get(first + 1..first + 3)? {
        b"1:" => true,
        b"0:" => false,
        _ => return None,
    };
    if !bytes[..first].iter().all(u8::is_ascii_digit) || first == 0 {
        return None;
    }
    Some(Event {
        id: key.event_id(seq),
        payload: bytes.slice(first + 3..),
        last,
    })
}

impl RedisStore {
    pub(super) async fn replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        create: bool,
        max: usize,
    ) -> Result<Replay, StoreError> {
        let (link, scripts) = self.conn()?;
        let s = key.session;
        let r = self.retention;
        let mut conn = link.commands();
        let mut invocation = session_script(&scripts.replay, &link, s);
        invocation
            .arg(key.stream.0)
            .arg(after.map(|a| a.to_string()).unwrap_or_default())
            .arg(if r.enabled { "1" } else { "0" })
            .arg(millis(r.event_ttl))
            .arg(millis(r.replay_window))
            .arg(if create { "1" } else { "0" })
            .arg(millis(self.session_ttl));
        let call = invocation.invoke_async::<Value>(&mut conn);
        let reply = link
            .breaker
            .guard("replay", call)
            .await
            .map_err(|_| UNAVAILABLE)?;
        let Value::Array(items) = reply else {
            return Err(MALFORMED);
        };
        let status = items.first().and_then(int).ok_or(MALFORMED)?;
        match status {
            0 => {}
            -3 => return Err(StoreError::FuturePosition(after.unwrap_or(0))),
            _ => return Err(StoreError::UnknownStream),
        }
        self.sessions.insert(s);
        let field = |i: usize| items.get(i).and_then(uint).ok_or(MALFORMED);
        let position = field(1)?;
        let completed = field(2)? == 1;
        let (replay_from, outcome) = match (after, field(3)?) {
            (Some(after), 0) => (Some(after), ReplayOutcome::Complete),
            (_, 2) => (None, ReplayOutcome::OutsideWindow),
            (_, 3) => (None, ReplayOutcome::Disabled),
            _ => (None, ReplayOutcome::Complete),
        };
        let mut replay = Replay {
            events: Vec::new(),
            outcome,
            position,
            completed,
        };
        let Some(after) = replay_from else {
            return Ok(replay);
        };
        // Evicted events are the oldest, so what is left starts after the last evicted.
        let mut from = after.max(field(4)?);
        let events_key = link.keys.events(s);
        while from < position {
            let to = position.min(from.saturating_add(u64::try_from(max).unwrap_or(u64::MAX)));
            let mut cmd = redis::cmd("HMGET");
            cmd.arg(&events_key);
            for seq in from + 1..=to {
                cmd.arg(format!("{}:{seq}", key.stream.0));
            }
            let call = cmd.query_async::<Vec<Value>>(&mut conn);
            let values = link
                .breaker
                .guard("replay", call)
                .await
                .map_err(|_| UNAVAILABLE)?;
            for (seq, value) in (from + 1..=to).zip(values) {
                // Evicted by an append since the script ran: missing, like those before.
                if value == Value::Nil {
                    continue;
                }
                replay
                    .events
                    .push(decode_event(key, seq, value).ok_or(MALFORMED)?);
            }
            if !replay.events.is_empty() {
                break;
            }
            from = to;
        }
        // Evicted events are before the first one read; events a failover lost (see
        // `EventStore::adopt_position`) may be anywhere: every position not read counts.
        let read = u64::try_from(replay.events.len()).unwrap_or(u64::MAX);
        let missing = match replay.events.last() {
            Some(last) => last.id.seq.saturating_sub(after).saturating_sub(read),
            None => position.saturating_sub(after),
        };
        if missing > 0 {
            replay.outcome = ReplayOutcome::Truncated { missing };
        }
        Ok(replay)
    }
}
