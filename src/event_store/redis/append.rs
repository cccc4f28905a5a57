//! Appends, committed in groups: one script call stores a run of consecutive events of
//! one stream, each taking the next position, its session's caps and TTL applied and each
//! event published, atomically. Detached from the store so several runs (of different
//! streams) are in flight together: the multiplexed connection pipelines them, and Redis
//! orders them.

use std::sync::Arc;
use std::time::Duration;

use super::{MALFORMED, RedisLink, RedisStore, Scripts, UNAVAILABLE, millis, session_script};
use crate::event_store::{Appended, Event, NewEvent, Retention, StoreError, UNCONFIRMED};
use crate::ids::StreamKey;

/// What a run of appends needs, detached from the store.
pub(super) struct AppendJob {
    link: RedisLink,
    scripts: Arc<Scripts>,
    retention: Retention,
    session_ttl: Duration,
}

impl AppendJob {
    /// Stores `events` on `key` in order: one result per event.
    pub(super) async fn run(
        self,
        key: StreamKey,
        events: Vec<NewEvent>,
    ) -> Vec<Result<Appended, StoreError>> {
        let Self {
            link,
            scripts,
            retention: r,
            session_ttl,
        } = self;
        let mut conn = link.commands();
        let mut invocation = session_script(&scripts.append, &link, key.session);
        invocation
            .arg(key.stream.0)
            .arg(if r.enabled { "1" } else { "0" })
            .arg(millis(r.event_ttl))
            .arg(r.max_session_events)
            .arg(r.max_session_bytes)
            .arg(millis(session_ttl))
            .arg(link.keys.channel(key))
            .arg(link.replica)
            .arg(events.iter().map(|e| e.after).max().unwrap_or(0));
        for event in &events {
            invocation
                .arg(event.payload.as_ref())
                .arg(if event.last { "1" } else { "0" })
                .arg(event.nonce);
        }
        let call = invocation.invoke_async::<Vec<i64>>(&mut conn);
        // The breaker let it through (`append_job` checked): a failure now may come
        // after Redis stored it.
        let reply = match link.breaker.guard("append", call).await {
            Ok(reply) if reply.len() == 2 * events.len() => reply,
            Ok(_) => return events.iter().map(|_| Err(MALFORMED)).collect(),
            Err(_) => return events.iter().map(|_| Err(UNCONFIRMED)).collect(),
        };
        events
            .into_iter()
            .zip(reply.chunks_exact(2))
            .map(|(event, answer)| outcome(key, event, answer[0], answer[1]))
            .collect()
    }
}

/// One event's answer from the script.
fn outcome(key: StreamKey, event: NewEvent, status: i64, seq: i64) -> Result<Appended, StoreError> {
    let seq = u64::try_from(seq).map_err(|_| MALFORMED)?;
    match status {
        0 | 1 => Ok(Appended {
            event: Event {
                id: key.event_id(seq),
                payload: event.payload,
                last: event.last,
            },
            duplicate: status == 1,
        }),
        -2 => Err(StoreError::StreamCompleted),
        _ => Err(StoreError::UnknownStream),
    }
}

impl RedisStore {
    pub(super) fn append_job(&self) -> Result<AppendJob, StoreError> {
        let link = self.link.clone().ok_or(UNAVAILABLE)?;
        if !link.breaker.allows() {
            return Err(UNAVAILABLE);
        }
        Ok(AppendJob {
            link,
            scripts: self.scripts.clone(),
            retention: self.retention,
            session_ttl: self.session_ttl,
        })
    }
}
