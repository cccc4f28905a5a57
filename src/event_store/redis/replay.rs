//! Replays: one script checks the stream and the replay window and reports its end, then
//! a plain exclusive `XRANGE` from the client's position reads the events (the script
//! returning them itself was slower: see docs/performance.md).

use bytes::Bytes;
use redis::Value;

use super::{MALFORMED, RedisStore, UNAVAILABLE, int, millis, session_script, uint};
use crate::event_store::{Event, Replay, ReplayOutcome, StoreError};
use crate::ids::StreamKey;

/// One XRANGE entry, `[id, [field, value, ...]]`, as an event. The payload's buffer is
/// taken, not copied.
fn decode_entry(key: StreamKey, entry: Value) -> Option<Event> {
    let Value::Array(parts) = entry else {
        return None;
    };
    let mut parts = parts.into_iter();
    let (Some(Value::BulkString(id)), Some(Value::Array(fields))) = (parts.next(), parts.next())
    else {
        return None;
    };
    let seq = std::str::from_utf8(id.split(|b| *b == b'-').next()?)
        .ok()?
        .parse()
        .ok()?;
    let (mut payload, mut last) = (None, false);
    let mut fields = fields.into_iter();
    while let (Some(Value::BulkString(name)), Some(value)) = (fields.next(), fields.next()) {
        match (name.as_slice(), value) {
            (b"d", Value::BulkString(d)) => payload = Some(Bytes::from(d)),
            (b"l", Value::BulkString(l)) => last = l == b"1",
            _ => {}
        }
    }
    Some(Event {
        id: key.event_id(seq),
        payload: payload?,
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
        let keys = &link.keys;
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
        let mut position = field(1)?;
        let mut completed = field(2)? == 1;
        let (replay_from, mut outcome) = match (after, field(3)?) {
            (Some(after), 0) => (Some(after), ReplayOutcome::Complete),
            (_, 2) => (None, ReplayOutcome::OutsideWindow),
            (_, 3) => (None, ReplayOutcome::Disabled),
            _ => (None, ReplayOutcome::Complete),
        };
        let mut events = Vec::new();
        if let Some(after) = replay_from.filter(|a| *a < position) {
            let mut cmd = redis::cmd("XRANGE");
            cmd.arg(keys.events_prefix(s) + &key.stream.0.to_string())
                .arg(format!("({after}-{}", u64::MAX))
                .arg("+");
            if max < usize::MAX {
                cmd.arg("COUNT").arg(max);
            }
            let call = cmd.query_async::<Value>(&mut conn);
            let entries = match link.breaker.guard("replay", call).await {
                Ok(Value::Array(entries)) => entries,
                Ok(_) => return Err(MALFORMED),
                Err(_) => return Err(UNAVAILABLE),
            };
            events.reserve(entries.len());
            for entry in entries {
                events.push(decode_entry(key, entry).ok_or(MALFORMED)?);
            }
            // Evicted events are the oldest, so a gap can only be at the start.
            let first = events.first().map_or(position + 1, |e| e.id.seq);
            if first > after + 1 {
                outcome = ReplayOutcome::Truncated {
                    missing: first - after - 1,
                };
            }
            // Appended since the script ran: part of this replay, so the live feed
            // continues after them.
            if let Some(newest) = events.last() {
                position = position.max(newest.id.seq);
                completed |= newest.last;
            }
        }
        Ok(Replay {
            events,
            outcome,
            position,
            completed,
        })
    }
}
