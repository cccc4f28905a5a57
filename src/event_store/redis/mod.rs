//! The Redis backend: every event of a session in one hash under the session's hash tag,
//! so every replica sharing the Redis (or Redis Cluster) can replay any stream, and a
//! pub/sub message per stored event, so the replica holding a stream's connection hears
//! of events other replicas store.
//!
//! Each change to a session's events is one Lua script (`*.lua`) on the session's four
//! keys, so it is atomic and touches one slot: on an append the position is taken, the
//! event stored, the session's caps and TTL applied and the event published in one step,
//! and two replicas appending to one stream never interleave. A replay is the script,
//! then `HMGET` of the positions it names, a page at a time; following a
//! stream's channel, announcing and the feed's PING are plain commands. The key layout is
//! in [`keys`]; the connections and the breaker in [`link`]; what the stream channels
//! carry in [`channel`].
//!
//! # Redis outages
//! A failed command opens a breaker for `retry_interval`: meanwhile every operation fails
//! at once with [`StoreError::Backend`] instead of waiting for Redis, and the store actor
//! delivers events live without storing them (counted in [`RedisStore::unstored`]). The
//! connection comes back by itself.

mod append;
pub mod breaker;
pub mod channel;
pub mod keys;
pub mod link;
mod replay;
mod sentinel;
mod tls;

pub use channel::{ControlFlag, StreamNews};
pub use link::{ConnectError, RedisConn, RedisLink, connect};
pub use replay::decode_event;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::{
    Appended, DetachedAppend, EventStore, NewEvent, Quota, Replay, Retention, StoreError,
    StreamKey, StreamNo, SweepStats,
};
use crate::ids::SessionId;

const PRELUDE: &str = include_str!("prelude.lua");

struct Scripts {
    append: redis::Script,
    replay: redis::Script,
    session: redis::Script,
    task_quota: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        let with_prelude = |body: &str| redis::Script::new(&format!("{PRELUDE}\n{body}"));
        Self {
            append: with_prelude(include_str!("append.lua")),
            replay: with_prelude(include_str!("replay.lua")),
            session: with_prelude(include_str!("session.lua")),
            task_quota: redis::Script::new(include_str!("task_quota.lua")),
        }
    }
}

/// Event storage in Redis, shared by every replica using the same Redis and key prefix.
pub struct RedisStore {
    link: Option<RedisLink>,
    scripts: Arc<Scripts>,
    retention: Retention,
    session_ttl: Duration,
    /// Sessions this replica has used, swept by it (any replica may sweep any session).
    sessions: HashSet<SessionId>,
    /// The sweep in progress: sessions found gone, events expired.
    sweeping: Option<tokio::task::JoinHandle<(Vec<SessionId>, usize)>>,
    unstored: Arc<AtomicU64>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("link", &self.link)
            .field("sessions", &self.sessions.len())
            .finish_non_exhaustive()
    }
}

impl Default for RedisStore {
    /// A store with no connection: every operation fails. Only a placeholder (the
    /// supervisor lends the real one to the store actor).
    fn default() -> Self {
        Self {
            link: None,
            scripts: Arc::new(Scripts::new()),
            retention: Retention::default(),
            session_ttl: Duration::from_secs(1800),
            sessions: HashSet::new(),
            sweeping: None,
            unstored: Arc::default(),
        }
    }
}

/// An invocation of `script` on `session`'s keys (see `redis/prelude.lua`): the session
/// hash, the streams hash, the arrivals list and the events hash.
fn session_script<'a>(
    script: &'a redis::Script,
    link: &RedisLink,
    session: SessionId,
) -> redis::ScriptInvocation<'a> {
    let keys = &link.keys;
    let mut invocation = script.key(keys.session(session));
    invocation
        .key(keys.streams(session))
        .key(keys.arrivals(session))
        .key(keys.events(session));
    invocation
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

fn uint(v: &Value) -> Option<u64> {
    int(v).and_then(|i| u64::try_from(i).ok())
}

const MALFORMED: StoreError = StoreError::Backend("malformed reply from redis");
const UNAVAILABLE: StoreError = StoreError::Backend("redis is unavailable");

impl RedisStore {
    /// A store on `link`. Session keys live `session_ttl` past their last use.
    pub fn new(link: RedisLink, session_ttl: Duration) -> Self {
        Self {
            unstored: link.unstored.clone(),
            link: Some(link),
            session_ttl,
            ..Self::default()
        }
    }

    /// Events delivered live but not stored because Redis was unavailable.
    #[cfg(any(test, feature = "testing"))]
    pub fn unstored(&self) -> Arc<AtomicU64> {
        self.unstored.clone()
    }

    /// The connection, unless the breaker is open.
    fn conn(&mut self) -> Result<(RedisLink, Arc<Scripts>), StoreError> {
        let link = self.link.clone().ok_or(UNAVAILABLE)?;
        if !link.breaker.allows() {
            return Err(UNAVAILABLE);
        }
        Ok((link, self.scripts.clone()))
    }

    /// Counts an event that was delivered without being stored.
    pub fn count_unstored(&self) {
        self.unstored.fetch_add(1, Ordering::Relaxed);
    }

    async fn session_op(
        &mut self,
        session: SessionId,
        op: &'static str,
        arg: String,
    ) -> Result<Value, StoreError> {
        let (link, scripts) = self.conn()?;
        let mut conn = link.commands();
        let mut invocation = session_script(&scripts.session, &link, session);
        invocation
            .arg(op)
            .arg(arg)
            .arg(millis(self.retention.event_ttl))
            .arg(link.format.get());
        let call = invocation.invoke_async(&mut conn);
        link.breaker.guard(op, call).await.map_err(|_| UNAVAILABLE)
    }

    /// Publishes a control message (`flag`, from this replica) on `key`'s channel.
    async fn publish(&mut self, key: StreamKey, flag: ControlFlag) -> bool {
        let Ok((link, _)) = self.conn() else {
            return false;
        };
        let body = channel::encode_control(link.replica, flag);
        link.publish("publish", link.keys.channel(key), body)
            .await
            .is_ok()
    }
}

impl EventStore for RedisStore {
    async fn open_session(&mut self, session: SessionId) {
        self.sessions.insert(session);
        let ttl = millis(self.session_ttl).to_string();
        if let Err(e) = self.session_op(session, "open", ttl).await {
            tracing::warn!(session_id = %session, error = %e, "could not register the session in redis");
        }
    }

    async fn open_stream(&mut self, key: StreamKey) -> Result<(), StoreError> {
        self.replay(key, None, true, 0).await.map(|_| ())
    }

    async fn append(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Result<Appended, StoreError> {
        self.sessions.insert(key.session);
        let event = NewEvent {
            payload,
            last,
            nonce,
            after: 0,
        };
        let mut results = self.append_job()?.run(key, vec![event]).await;
        results.pop().unwrap_or(Err(MALFORMED))
    }

    fn detaches_appends(&self) -> bool {
        true
    }

    fn append_detached(&self, key: StreamKey, events: &[NewEvent]) -> Option<DetachedAppend> {
        let job = self.append_job();
        let events = events.to_vec();
        Some(Box::pin(async move {
            match job {
                Ok(job) => job.run(key, events).await,
                Err(e) => events.iter().map(|_| Err(e)).collect(),
            }
        }))
    }

    async fn complete_stream(&mut self, key: StreamKey) {
        if let Err(e) = self
            .session_op(key.session, "complete", key.stream.0.to_string())
            .await
        {
            tracing::warn!(stream = ?key, error = %e, "could not mark a stream complete in redis");
        }
    }

    async fn adopt_position(&mut self, key: StreamKey, at: u64) -> Result<(), StoreError> {
        let (link, scripts) = self.conn()?;
        let mut conn = link.commands();
        let mut invocation = session_script(&scripts.session, &link, key.session);
        invocation.arg("adopt").arg(key.stream.0).arg(at);
        let call = invocation.invoke_async::<i64>(&mut conn);
        match link.breaker.guard("adopt", call).await {
            Ok(0) => {
                tracing::warn!(stream = ?key, at, "a client resumed past the stream's stored end: events up to there were lost (a Redis failover?); going on from there");
                Ok(())
            }
            Ok(_) => Err(StoreError::FuturePosition(at)),
            Err(_) => Err(UNAVAILABLE),
        }
    }

    async fn replay_page(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> Result<Replay, StoreError> {
        self.replay(key, after, false, max).await
    }

    async fn open_and_replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        max: usize,
    ) -> Result<Replay, StoreError> {
        self.replay(key, after, true, max).await
    }

    async fn forget_session(&mut self, session: SessionId) {
        self.sessions.remove(&session);
        if let Err(e) = self.session_op(session, "forget", String::new()).await {
            tracing::warn!(session_id = %session, error = %e, "could not forget a session in redis; its keys expire by themselves");
        }
    }

    /// Runs in a task of its own, so a sweep of many sessions (one script each) never
    /// holds up the store actor; the next call collects what it found.
    async fn sweep(&mut self) -> SweepStats {
        if self.sweeping.as_ref().is_some_and(|t| !t.is_finished()) {
            return SweepStats::default();
        }
        let mut stats = SweepStats::default();
        if let Some(previous) = self.sweeping.take()
            && let Ok((gone, expired)) = previous.await
        {
            for session in gone {
                self.sessions.remove(&session);
            }
            stats.expired_events = expired;
        }
        let Ok((link, scripts)) = self.conn() else {
            return stats;
        };
        let sessions: Vec<SessionId> = self.sessions.iter().copied().collect();
        let ttl = millis(self.retention.event_ttl);
        self.sweeping = Some(tokio::spawn(async move {
            let (mut gone, mut expired) = (Vec::new(), 0);
            let mut conn = link.commands();
            for session in sessions {
                let mut invocation = session_script(&scripts.session, &link, session);
                invocation.arg("sweep").arg("").arg(ttl);
                let call = invocation.invoke_async::<i64>(&mut conn);
                match link.breaker.guard("sweep", call).await {
                    Ok(-1) => gone.push(session),
                    Ok(n) => expired += usize::try_from(n).unwrap_or(0),
                    // Redis is away: the rest waits for the next sweep.
                    Err(_) => break,
                }
            }
            (gone, expired)
        }));
        stats
    }

    async fn positions(&self, session: SessionId) -> Vec<(StreamNo, u64)> {
        let Some(link) = self.link.clone() else {
            return Vec::new();
        };
        if !link.breaker.allows() {
            return Vec::new();
        }
        let mut conn = link.commands();
        let mut invocation = session_script(&self.scripts.session, &link, session);
        invocation.arg("positions").arg("").arg(0);
        let call = invocation.invoke_async::<Value>(&mut conn);
        let result = link.breaker.guard("positions", call).await;
        let Ok(Value::Array(items)) = result else {
            return Vec::new();
        };
        let mut out: Vec<(StreamNo, u64)> = items
            .chunks_exact(2)
            .filter_map(|pair| Some((StreamNo(uint(&pair[0])?), uint(&pair[1])?)))
            .collect();
        out.sort_unstable();
        out
    }

    fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }

    async fn put_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
    ) -> Result<(), StoreError> {
        let (link, _) = self.conn()?;
        let mut conn = link.commands();
        let mut cmd = redis::cmd("SET");
        cmd.arg(link.keys.task(id))
            .arg(record.as_ref())
            .arg("PX")
            .arg(millis(ttl).max(1));
        let call = cmd.query_async::<()>(&mut conn);
        link.breaker
            .guard("task", call)
            .await
            .map_err(|_| UNAVAILABLE)
    }

    async fn create_record(
        &mut self,
        id: &str,
        record: Bytes,
        ttl: Duration,
        quota: &Quota,
    ) -> Result<(), StoreError> {
        let (link, scripts) = self.conn()?;
        let mut conn = link.commands();
        let single = matches!(conn, RedisConn::Single(_));
        let ttl = millis(ttl).max(1);
        let mut invocation = scripts.task_quota.prepare_invoke();
        invocation.key(link.keys.task_quota(&quota.principal));
        // On one server the record is set by the script, in the same step as its count.
        // A cluster places the two keys in different slots, which no script may span:
        // the count is taken first, then the record set, so a failure between can only
        // over-count (until the reservation's expiry), never let a principal past it.
        if single {
            invocation.key(link.keys.task(id));
        }
        invocation.arg(id).arg(ttl).arg(quota.max);
        if single {
            invocation.arg(record.as_ref());
        }
        let call = invocation.invoke_async::<i64>(&mut conn);
        let stored = link
            .breaker
            .guard("task", call)
            .await
            .map_err(|_| UNAVAILABLE)?;
        if stored == 0 {
            return Err(StoreError::PrincipalFull);
        }
        if !single {
            let mut cmd = redis::cmd("SET");
            cmd.arg(link.keys.task(id))
                .arg(record.as_ref())
                .arg("PX")
                .arg(ttl);
            let call = cmd.query_async::<()>(&mut conn);
            if link.breaker.guard("task", call).await.is_err() {
                let mut undo = redis::cmd("ZREM");
                undo.arg(link.keys.task_quota(&quota.principal)).arg(id);
                let _ = undo.query_async::<()>(&mut conn).await;
                return Err(UNAVAILABLE);
            }
        }
        Ok(())
    }

    async fn delete_record(&mut self, id: &str, principal: Option<&str>) -> Result<(), StoreError> {
        let (link, _) = self.conn()?;
        let mut conn = link.commands();
        // Two keys in two slots (a cluster): a command each.
        let mut cmd = redis::cmd("DEL");
        cmd.arg(link.keys.task(id));
        let call = cmd.query_async::<()>(&mut conn);
        link.breaker
            .guard("task", call)
            .await
            .map_err(|_| UNAVAILABLE)?;
        if let Some(principal) = principal {
            let mut cmd = redis::cmd("ZREM");
            cmd.arg(link.keys.task_quota(principal)).arg(id);
            let call = cmd.query_async::<()>(&mut conn);
            link.breaker
                .guard("task", call)
                .await
                .map_err(|_| UNAVAILABLE)?;
        }
        Ok(())
    }

    async fn get_record(&mut self, id: &str) -> Result<Option<Bytes>, StoreError> {
        let (link, _) = self.conn()?;
        let mut conn = link.commands();
        let mut cmd = redis::cmd("GET");
        cmd.arg(link.keys.task(id));
        let call = cmd.query_async::<Option<Vec<u8>>>(&mut conn);
        link.breaker
            .guard("task", call)
            .await
            .map(|v| v.map(Bytes::from))
            .map_err(|_| UNAVAILABLE)
    }

    async fn follow(&mut self, key: StreamKey) -> Result<(), StoreError> {
        let (link, _) = self.conn()?;
        let mut pubsub = link.pubsub();
        let call = pubsub.subscribe(link.keys.channel(key));
        link.breaker
            .guard("subscribe", call)
            .await
            .map_err(|_| UNAVAILABLE)
    }

    async fn announce(&mut self, key: StreamKey) -> bool {
        self.publish(key, ControlFlag::Follows).await
    }

    async fn tell_followers(&mut self, key: StreamKey, control: super::Control) -> bool {
        let flag = match control {
            super::Control::Completed => ControlFlag::Completed,
            super::Control::Disconnect => ControlFlag::Disconnect,
        };
        self.publish(key, flag).await
    }

    async fn unfollow(&mut self, key: StreamKey) {
        let Ok((link, _)) = self.conn() else {
            return;
        };
        let mut pubsub = link.pubsub();
        let call = pubsub.unsubscribe(link.keys.channel(key));
        let _ = link.breaker.guard("unsubscribe", call).await;
    }

    fn is_shared(&self) -> bool {
        true
    }

    async fn feed_ready(&mut self) -> bool {
        let Ok((link, _)) = self.conn() else {
            return false;
        };
        let mut pubsub = link.pubsub();
        let ping = redis::cmd("PING");
        let call = ping.query_async::<String>(&mut pubsub);
        link.breaker.guard("ping", call).await.is_ok()
    }

    fn note_unstored(&self) {
        self.count_unstored();
    }
}
