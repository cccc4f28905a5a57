//! Leases on running requests, so that a request whose replica died still gets an answer.
//!
//! Each replica holds one lease (its score in `P:replicas`: the Redis time at which it
//! lapses) and renews it every third of `lease_ttl`; each request it runs is registered in
//! `P:inflight:<replica>` while it runs. When a lease lapses, any replica may answer that
//! replica's requests: it appends to each request's stream a JSON-RPC error response that
//! ends it (with a nonce every answering replica derives alike, so two answers store one
//! event), then clears the entry. A client resuming on any replica gets an answer instead
//! of waiting forever.
//!
//! A replica that shut down (a planned restart: its lease was let go, not lost) left its
//! unfinished requests behind on purpose. An entry that carries a [`Handover`] (a call of
//! a re-runnable tool) is run again from its start by the replica that claims it, on the
//! same stream; any other gets an error that says it may be retried.

use crate::telemetry::metrics;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use crate::event_store::format::{self, CURRENT_FORMAT};
use crate::event_store::redis::RedisLink;
use crate::handler::BoxFuture;
use crate::ids::{SessionId, StreamKey, StreamNo, TaskId};
use crate::protocol::{ErrorObject, Outgoing, RequestId};
use crate::server::Handover;
use crate::transport::{InFlight, InFlightError};

/// The message of the error appended for a request whose replica was lost.
pub const LOST_REPLICA_MESSAGE: &str =
    "the server replica running this request was lost before it answered";

/// The message of the error appended for a request whose replica shut down (a planned
/// restart) before it could answer; its `data` says `"retryable": true`.
pub const RESTARTED_MESSAGE: &str = "the server replica running this request shut down before it answered; the request may be retried";

/// The score of a lease let go at a clean shutdown ([`Leases::release`]): no lease that
/// lapsed by itself has it, so a reaper can tell a planned stop from a lost replica.
const RELEASED: u64 = 0;

/// Renews this replica's lease and states the newest shared format it reads (KEYS[4],
/// ARGV[3]); returns the oldest format a live replica reads (one without an entry
/// predates formats: 1) and the replicas whose lease has lapsed. Also keeps the replica
/// counter (KEYS[2]) at or above our number, so a Redis that lost its data cannot hand
/// our number to a new replica.
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
redis.call('HSET', KEYS[4], ARGV[1], ARGV[3])
-- Our in-flight table goes too if, against all odds, nobody ever reaps it.
redis.call('PEXPIRE', KEYS[3], 86400000)
if tonumber(redis.call('GET', KEYS[2]) or '0') < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[2], ARGV[1])
end
local oldest = tonumber(ARGV[3])
for _, live in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. now, '+inf')) do
  local reads = tonumber(redis.call('HGET', KEYS[4], live) or '1')
  if reads < oldest then oldest = reads end
end
return {oldest, redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'WITHSCORES')}
";

/// A request that lost its replica: where to answer and with which id.
#[derive(Debug, Clone, PartialEq)]
pub struct Orphan {
    /// Its stream.
    pub key: StreamKey,
    /// Its JSON-RPC id.
    pub request: RequestId,
    /// What it takes to run it again, for a call of a re-runnable tool.
    pub handover: Option<Handover>,
    /// The error response to append as the stream's last event.
    pub payload: Bytes,
    /// Its entry in the lapsed replica's in-flight table.
    pub field: String,
    /// The append's nonce, the same for every replica answering this entry, so two
    /// answers store one event.
    pub nonce: u64,
}

/// Forgets a lapsed replica (KEYS[1] the replicas, KEYS[2] its in-flight table, KEYS[3]
/// the formats) if no request of it is left.
const RETIRE: &str = r"
if redis.call('HLEN', KEYS[2]) > 0 then return 0 end
redis.call('HDEL', KEYS[3], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
";

/// What a replica publishes on the broadcast channel when it lets its lease go, followed
/// by its number. Not JSON: replicas tell it from the session news at a glance.
pub(super) const STOPPED_NOTICE: &str = "replica-stopped:";

/// This replica's side of the leases.
#[derive(Debug, Clone)]
pub struct Leases {
    link: RedisLink,
    ttl: Duration,
    renew: std::sync::Arc<redis::Script>,
}

impl Leases {
    /// Leases of `ttl` for the replica behind `link`.
    pub fn new(link: RedisLink, ttl: Duration) -> Self {
        Self {
            link,
            ttl,
            renew: std::sync::Arc::new(redis::Script::new(RENEW)),
        }
    }

    /// How often [`Leases::renew`] should run.
    pub fn interval(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_millis(10))
    }

    /// Registers a running request; awaited before its stream is given to the client, so
    /// a request the client can resume is always covered.
    pub async fn begin(
        &self,
        key: StreamKey,
        request: &RequestId,
        handover: Option<&Handover>,
    ) -> redis::RedisResult<()> {
        let value = entry_value(self.link.format.get(), request, handover);
        self.hold_as(&field(key), &value).await
    }

    /// The request ended (answered, cancelled or dropped).
    pub async fn end(&self, key: StreamKey) {
        self.drop_field(field(key)).await
    }

    /// Registers `field` in this replica's in-flight table (a task).
    pub(super) async fn hold(&self, field: &str) -> redis::RedisResult<()> {
        self.hold_as(field, "task").await
    }

    async fn hold_as(&self, field: &str, value: &str) -> redis::RedisResult<()> {
        let mut conn = self.link.commands();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(self.link.keys.inflight(self.link.replica))
            .arg(field)
            .arg(value);
        let call = cmd.query_async::<i64>(&mut conn);
        let added = self.link.breaker.guard("lease", call).await?;
        if added > 0 {
            metrics::LEASES_HELD.inc();
        }
        Ok(())
    }

    /// Clears `field` from this replica's in-flight table.
    pub(super) async fn drop_field(&self, field: String) {
        let mut conn = self.link.commands();
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.link.keys.inflight(self.link.replica))
            .arg(field);
        let call = cmd.query_async::<i64>(&mut conn);
        let result = self.link.breaker.guard("lease", call).await;
        if matches!(result, Ok(n) if n > 0) {
            metrics::LEASES_HELD.dec_to_zero();
        }
        if let Err(e) = result {
            // Harmless: if this replica's lease ever lapses, the reaper finds the request
            // ended (or the task finished) and changes nothing.
            tracing::debug!(error = %e, "could not clear a lease entry");
        }
    }

    /// Renews our lease and learns the format to write (`store.write_format`); returns
    /// the replicas whose lease has lapsed.
    pub async fn renew(&self) -> redis::RedisResult<Vec<Lapsed>> {
        let mut conn = self.link.commands();
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let mut invocation = self.renew.key(self.link.keys.replicas());
        invocation
            .key(self.link.keys.replica_counter())
            .key(self.link.keys.inflight(self.link.replica))
            .key(self.link.keys.formats())
            .arg(self.link.replica)
            .arg(ttl_ms)
            .arg(CURRENT_FORMAT);
        let call = invocation.invoke_async::<(u8, Vec<(u64, f64)>)>(&mut conn);
        let (oldest, lapsed) = self.link.breaker.guard("lease", call).await?;
        self.link.format.learn(oldest);
        Ok(lapsed
            .into_iter()
            .filter(|(r, _)| *r != self.link.replica)
            .map(|(replica, score)| Lapsed {
                replica,
                // Scores are whole milliseconds, so the comparison is exact.
                stopped: score == RELEASED as f64,
            })
            .collect())
    }

    /// The lease duration (`store.lease_ttl`).
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The entries still registered for replica `replica` (field, value).
    pub async fn entries(&self, replica: u64) -> redis::RedisResult<Vec<(String, String)>> {
        let mut conn = self.link.commands();
        let mut cmd = redis::cmd("HGETALL");
        cmd.arg(self.link.keys.inflight(replica));
        let call = cmd.query_async::<Vec<(String, String)>>(&mut conn);
        self.link.breaker.guard("lease", call).await
    }

    /// Claims entry `field` of lapsed replica `replica` for this replica, for three lease
    /// times: of the replicas reaping at once, only the one that claims it first acts on
    /// it (a task is run again, or failed, once). False if another has it, or Redis is
    /// away.
    pub async fn claim(&self, replica: u64, field: &str) -> bool {
        let mut conn = self.link.commands();
        let ttl_ms = u64::try_from(self.ttl.as_millis().saturating_mul(3)).unwrap_or(u64::MAX);
        let mut cmd = redis::cmd("SET");
        cmd.arg(self.link.keys.claim(replica, field))
            .arg(self.link.replica)
            .arg("NX")
            .arg("PX")
            .arg(ttl_ms.max(1));
        let call = cmd.query_async::<Option<String>>(&mut conn);
        matches!(self.link.breaker.guard("lease", call).await, Ok(Some(_)))
    }

    /// Clears an entry whose request was answered (or needs no answer); false if Redis
    /// could not be told (the entry stays for the next round).
    pub async fn settle(&self, replica: u64, field: &str) -> bool {
        let mut conn = self.link.commands();
        let mut cmd = redis::cmd("HDEL");
        cmd.arg(self.link.keys.inflight(replica)).arg(field);
        let call = cmd.query_async::<()>(&mut conn);
        self.link.breaker.guard("lease", call).await.is_ok()
    }

    /// Forgets a lapsed replica once none of its requests is left.
    pub async fn retire(&self, replica: u64) {
        let mut conn = self.link.commands();
        let script = redis::Script::new(RETIRE);
        let mut invocation = script.key(self.link.keys.replicas());
        invocation
            .key(self.link.keys.inflight(replica))
            .key(self.link.keys.formats())
            .arg(replica);
        let call = invocation.invoke_async::<i64>(&mut conn);
        if let Ok(1) = self.link.breaker.guard("lease", call).await {
            tracing::debug!(replica, "a lapsed replica is forgotten");
        }
    }

    /// Lets our lease lapse now (clean shutdown) and says so on the bus: another replica
    /// reaps at once any request of ours whose end did not reach Redis, and nobody waits
    /// `lease_ttl`. The lease's score says it was let go, not lost: a call of a
    /// re-runnable tool runs again, other answers say the request may be retried, and a
    /// re-run of a task does not count as a lost attempt.
    pub async fn release(&self) {
        let mut conn = self.link.commands();
        let mut pipe = redis::pipe();
        pipe.cmd("ZADD")
            .arg(self.link.keys.replicas())
            .arg(RELEASED)
            .arg(self.link.replica)
            .ignore()
            .cmd("PUBLISH")
            .arg(self.link.keys.broadcast_channel())
            .arg(format!("{STOPPED_NOTICE}{}", self.link.replica))
            .ignore();
        let call = pipe.query_async::<()>(&mut conn);
        let _ = self.link.breaker.guard("lease", call).await;
    }
}

impl InFlight for Leases {
    fn begin<'a>(
        &'a self,
        key: StreamKey,
        request: &'a RequestId,
        handover: Option<&'a Handover>,
    ) -> BoxFuture<'a, Result<(), InFlightError>> {
        Box::pin(async move {
            Leases::begin(self, key, request, handover)
                .await
                .map_err(|e| InFlightError(e.to_string()))
        })
    }

    fn end(&self, key: StreamKey) -> BoxFuture<'_, ()> {
        Box::pin(Leases::end(self, key))
    }
}

/// A replica whose lease lapsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lapsed {
    /// Its number.
    pub replica: u64,
    /// It let its lease go at a clean shutdown (a planned restart), rather than dying.
    pub stopped: bool,
}

/// Prefix of a running task's entry in an in-flight table.
pub(super) const TASK_FIELD: &str = "task:";

/// The in-flight entry of task `id`.
pub(super) fn task_field(id: TaskId) -> String {
    format!("{TASK_FIELD}{id}")
}

fn field(key: StreamKey) -> String {
    format!("{}:{}", key.session, key.stream)
}

/// A request's in-flight entry when it can be handed on. Otherwise the entry is the bare
/// request id, as replicas without handovers write and read it.
#[derive(Serialize, Deserialize)]
struct Entry {
    id: RequestId,
    handover: Handover,
}

fn entry_value(version: u8, request: &RequestId, handover: Option<&Handover>) -> String {
    let value = match handover {
        Some(handover) => format::to_string(
            version,
            &Entry {
                id: request.clone(),
                handover: handover.clone(),
            },
        ),
        // The same in every format (module `format`).
        None => serde_json::to_string(request),
    };
    value.unwrap_or_else(|_| "null".into())
}

fn parse_entry(value: &str) -> Option<(RequestId, Option<Handover>)> {
    if let Ok(id) = serde_json::from_str::<RequestId>(value) {
        return Some((id, None));
    }
    let entry = format::from_slice::<Entry>("in-flight entry", value.as_bytes()).ok()?;
    Some((entry.id, Some(entry.handover)))
}

/// The answer owed for in-flight entry `field` (`value`: the request id as JSON, or an
/// [`Entry`]) of lapsed replica `lapsed`; `None` if the entry is malformed.
pub fn orphan(lapsed: Lapsed, field: String, value: &str) -> Option<Orphan> {
    let Lapsed { replica, stopped } = lapsed;
    let (session, stream) = field.split_once(':')?;
    let key = StreamKey::new(
        session.parse::<SessionId>().ok()?,
        StreamNo(stream.parse().ok()?),
    );
    let (id, handover) = parse_entry(value)?;
    let request = id.clone();
    let error = if stopped {
        ErrorObject::retryable(RESTARTED_MESSAGE)
    } else {
        ErrorObject::new(ErrorObject::INTERNAL_ERROR, LOST_REPLICA_MESSAGE)
    };
    let payload = Outgoing::Error {
        id: Some(id),
        error,
    }
    .to_bytes();
    let nonce = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (replica, &field).hash(&mut h);
        h.finish()
    };
    Some(Orphan {
        key,
        request,
        handover,
        payload,
        field,
        nonce,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event_store::format::OLDEST_FORMAT;

    const LOST: Lapsed = Lapsed {
        replica: 3,
        stopped: false,
    };

    #[test]
    fn an_orphan_gets_an_internal_error_with_its_own_id() {
        let session = SessionId::random();
        let Some(o) = orphan(LOST, format!("{session}:4294967298"), "\"call-7\"") else {
            panic!("a well-formed entry is an orphan");
        };
        assert_eq!(o.key, StreamKey::new(session, StreamNo(4_294_967_298)));
        let v: serde_json::Value =
            serde_json::from_slice(&o.payload).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["id"], "call-7");
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(v["error"]["message"], LOST_REPLICA_MESSAGE);
        assert!(orphan(LOST, "nonsense".into(), "1").is_none());
        let again = orphan(LOST, format!("{session}:4294967298"), "\"call-7\"");
        assert_eq!(
            again.map(|a| a.nonce),
            Some(o.nonce),
            "every reaper answers alike"
        );
    }

    #[test]
    fn a_stopped_replicas_orphan_may_be_retried() {
        let session = SessionId::random();
        let stopped = Lapsed {
            stopped: true,
            ..LOST
        };
        let Some(o) = orphan(stopped, format!("{session}:2"), "5") else {
            panic!("a well-formed entry is an orphan");
        };
        let v: serde_json::Value =
            serde_json::from_slice(&o.payload).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["error"]["message"], RESTARTED_MESSAGE);
        assert_eq!(v["error"]["data"]["retryable"], true);
    }

    #[test]
    fn an_entry_carries_its_handover_and_a_bare_id_none() {
        let session = SessionId::random();
        let field = format!("{session}:2");
        let handover = Handover {
            params: serde_json::json!({"name": "stream_events", "arguments": {"count": 3}}),
            principal: None,
        };
        let id = RequestId::Number(7);
        for version in OLDEST_FORMAT..=CURRENT_FORMAT {
            let value = entry_value(version, &id, Some(&handover));
            assert_eq!(format::version(value.as_bytes()), version);
            let Some(o) = orphan(LOST, field.clone(), &value) else {
                panic!("an entry with a handover is an orphan: {value}");
            };
            assert_eq!(o.request, id);
            assert_eq!(o.handover.as_ref(), Some(&handover));
        }
        // Replicas without handovers wrote, and read, the bare id: in every format.
        let bare = entry_value(CURRENT_FORMAT, &id, None);
        assert_eq!(bare, "7");
        let o = orphan(LOST, field, &bare).map(|o| (o.request, o.handover));
        assert_eq!(o, Some((id, None)));
    }

    /// A rolling upgrade: a replica of the version before wrote the whole principal,
    /// every claim with it; it reads here with its owner and scopes, `exp` kept.
    #[test]
    fn an_older_replicas_entry_with_the_whole_principal_is_read() {
        let session = SessionId::random();
        let old = r#"{"id":2,"handover":{"params":{"name":"stream_events"},"principal":
            {"issuer":"https://as","subject":"alice","scopes":["mcp"],"client_id":"app",
             "claims":{"iss":"https://as","sub":"alice","exp":1700000000,"email":"secret@x"}}}}"#;
        let stopped = Lapsed {
            stopped: true,
            ..LOST
        };
        let Some(o) = orphan(stopped, format!("{session}:2"), old) else {
            panic!("an older replica's entry is an orphan");
        };
        let Some(principal) = o.handover.and_then(|h| h.principal) else {
            panic!("with its principal");
        };
        assert_eq!(
            principal.owner(),
            crate::auth::Owner::of("https://as", "alice")
        );
        assert_eq!(principal.scopes, ["mcp"]);
        assert_eq!(principal.expires_at, Some(1_700_000_000));
    }
}
