//! Appends: each is one script that takes the position, stores the event, applies the
//! session's caps and TTL and publishes it, atomically. Detached from the store so several
//! can be in flight together (the multiplexed connection pipelines them; Redis orders
//! them).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::{MALFORMED, RedisLink, RedisStore, Scripts, UNAVAILABLE, millis, session_script};
use crate::event_store::{Appended, Event, Retention, StoreError, UNCONFIRMED};
use crate::ids::StreamKey;

/// What an append needs, detached from the store so appends can be in flight together
/// (the multiplexed connection pipelines them; Redis orders them).
pub(super) struct AppendJob {
    link: RedisLink,
    scripts: Arc<Scripts>,
    retention: Retention,
    session_ttl: Duration,
}

impl AppendJob {
    pub(super) async fn run(
        self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Result<Appended, StoreError> {
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
            .arg(payload.as_ref())
            .arg(if last { "1" } else { "0" })
            .arg(nonce)
            .arg(if r.enabled { "1" } else { "0" })
            .arg(millis(r.event_ttl))
            .arg(r.max_session_events)
            .arg(r.max_session_bytes)
            .arg(millis(session_ttl))
            .arg(link.keys.channel(key))
            .arg(link.replica);
        let call = invocation.invoke_async::<Vec<i64>>(&mut conn);
        // The breaker let it through (`append_job` checked): a failure now may come
        // after Redis stored it.
        let reply = link
            .breaker
            .guard("append", call)
            .await
            .map_err(|_| UNCONFIRMED)?;
        let (status, seq) = match reply.as_slice() {
            [status, seq] => (*status, u64::try_from(*seq).map_err(|_| MALFORMED)?),
            _ => return Err(MALFORMED),
        };
        let event = Event {
            id: key.event_id(seq),
            payload,
            last,
        };
        match status {
            0 | 1 => Ok(Appended {
                event,
                duplicate: status == 1,
            }),
            -2 => Err(StoreError::StreamCompleted),
            _ => Err(StoreError::UnknownStream),
        }
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
