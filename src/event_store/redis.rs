//! The Redis backend: one Redis Stream per SSE stream, so every replica sharing the Redis
//! can replay any stream, and a pub/sub message per stored event, so the replica holding a
//! stream's connection hears of events other replicas store.
//!
//! Each operation is one Lua script (`redis/*.lua`), so it is atomic: the position is
//! taken, the event stored, the session's caps and TTL applied and the event published in
//! one step, and two replicas appending to one stream never interleave. The key layout is
//! in [`crate::cluster`].
//!
//! # Redis outages
//! A failed command opens a breaker for `retry_interval`: meanwhile every operation fails
//! at once with [`StoreError::Backend`] instead of waiting for Redis, and the store actor
//! delivers events live without storing them (counted in [`RedisStore::unstored`]). The
//! connection comes back by itself.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use redis::Value;

use super::{
    Appended, Event, EventStore, Replay, ReplayOutcome, Retention, StoreError, StreamKey, StreamNo,
    SweepStats,
};
use crate::cluster::{RedisLink, bus};
use crate::session::SessionId;

const PRELUDE: &str = include_str!("redis/prelude.lua");

struct Scripts {
    append: redis::Script,
    replay: redis::Script,
    session: redis::Script,
}

impl Scripts {
    fn new() -> Self {
        let with_prelude = |body: &str| redis::Script::new(&format!("{PRELUDE}\n{body}"));
        Self {
            append: with_prelude(include_str!("redis/append.lua")),
            replay: with_prelude(include_str!("redis/replay.lua")),
            session: with_prelude(include_str!("redis/session.lua")),
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
/// hash, the streams hash and the arrivals list, then the event-stream key prefix as the
/// first argument.
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
        .arg(keys.events_prefix(session));
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
        let mut conn = link.commands.clone();
        let mut invocation = session_script(&scripts.session, &link, session);
        invocation
            .arg(op)
            .arg(arg)
            .arg(millis(self.retention.event_ttl));
        let call = invocation.invoke_async(&mut conn);
        link.breaker.guard(op, call).await.map_err(|_| UNAVAILABLE)
    }

    /// Publishes a control message (`flag`, from this replica) on `key`'s channel.
    async fn publish(&mut self, key: StreamKey, flag: impl FnOnce(u64) -> Vec<u8>) -> bool {
        let Ok((link, _)) = self.conn() else {
            return false;
        };
        let mut conn = link.commands.clone();
        let mut cmd = redis::cmd("PUBLISH");
        cmd.arg(link.keys.channel(key)).arg(flag(link.replica));
        let call = cmd.query_async::<()>(&mut conn);
        link.breaker.guard("publish", call).await.is_ok()
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
        self.replay(key, None, true).await.map(|_| ())
    }

    async fn append(
        &mut self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Result<Appended, StoreError> {
        self.sessions.insert(key.session);
        self.append_job()?.run(key, payload, last, nonce).await
    }

    fn append_detached(
        &self,
        key: StreamKey,
        payload: Bytes,
        last: bool,
        nonce: u64,
    ) -> Option<super::DetachedAppend> {
        let job = self.append_job();
        Some(Box::pin(async move {
            job?.run(key, payload, last, nonce).await
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

    async fn replay_after(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
    ) -> Result<Replay, StoreError> {
        self.replay(key, after, false).await
    }

    async fn open_and_replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
    ) -> Result<Replay, StoreError> {
        self.replay(key, after, true).await
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
            let mut conn = link.commands.clone();
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
        let mut conn = link.commands.clone();
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

    async fn follow(&mut self, key: StreamKey) -> Result<(), StoreError> {
        let (link, _) = self.conn()?;
        let mut pubsub = link.pubsub.clone();
        let call = pubsub.subscribe(link.keys.channel(key));
        link.breaker
            .guard("subscribe", call)
            .await
            .map_err(|_| UNAVAILABLE)
    }

    async fn announce(&mut self, key: StreamKey) -> bool {
        self.publish(key, bus::encode_control_flag(b's')).await
    }

    async fn tell_followers(&mut self, key: StreamKey, control: super::Control) -> bool {
        let flag = match control {
            super::Control::Completed => b'c',
            super::Control::Disconnect => b'd',
        };
        self.publish(key, bus::encode_control_flag(flag)).await
    }

    async fn unfollow(&mut self, key: StreamKey) {
        let Ok((link, _)) = self.conn() else {
            return;
        };
        let mut pubsub = link.pubsub.clone();
        let call = pubsub.unsubscribe(link.keys.channel(key));
        let _ = link.breaker.guard("unsubscribe", call).await;
    }

    async fn feed_ready(&mut self) -> bool {
        let Ok((link, _)) = self.conn() else {
            return false;
        };
        let mut pubsub = link.pubsub.clone();
        let ping = redis::cmd("PING");
        let call = ping.query_async::<String>(&mut pubsub);
        link.breaker.guard("ping", call).await.is_ok()
    }

    fn note_unstored(&self) {
        self.count_unstored();
    }
}

/// What an append needs, detached from the store so appends can be in flight together
/// (the multiplexed connection pipelines them; Redis orders them).
struct AppendJob {
    link: RedisLink,
    scripts: Arc<Scripts>,
    retention: Retention,
    session_ttl: Duration,
}

impl AppendJob {
    async fn run(
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
        let mut conn = link.commands.clone();
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
            .map_err(|_| super::UNCONFIRMED)?;
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
    fn append_job(&self) -> Result<AppendJob, StoreError> {
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

    async fn replay(
        &mut self,
        key: StreamKey,
        after: Option<u64>,
        create: bool,
    ) -> Result<Replay, StoreError> {
        let (link, scripts) = self.conn()?;
        let keys = &link.keys;
        let s = key.session;
        let r = self.retention;
        let mut conn = link.commands.clone();
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
