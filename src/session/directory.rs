//! Where sessions are known beyond this process: nowhere (in-memory server), or Redis, so
//! that a replica that has never seen a session can serve it.
//!
//! With Redis, a session's metadata (negotiated version, client capabilities and info,
//! lists offered, creation time, log level) is written into the session hash the event
//! store registered (`P:{S}:session`, see [`crate::event_store::redis::keys`]), its resource subscriptions
//! into a set beside it. Their TTL is `server.session_timeout`, refreshed by every replica
//! that uses the session; DELETE removes them and tells every replica on the bus.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::replica_news::SessionNews;
use super::{NewSession, SessionId};
use crate::event_store::format;
use crate::event_store::redis::RedisLink;
use crate::protocol::methods::{ListKind, LoggingLevel};
use crate::protocol::{ErrorObject, RequestId};

/// A session read back from the directory.
#[derive(Debug, Clone)]
pub struct StoredSession {
    /// What the client sent at `initialize`.
    pub init: NewSession,
    /// When it initialized.
    pub connected_at: SystemTime,
    /// `logging/setLevel`, if any.
    pub log_level: Option<LoggingLevel>,
    /// Resource subscriptions.
    pub subscriptions: Vec<String>,
}

/// The session directory.
#[derive(Debug, Clone, Default)]
pub enum Directory {
    /// Sessions live in this process only.
    #[default]
    Local,
    /// Sessions live in Redis.
    Redis(RedisLink),
}

/// Why the directory could not answer.
#[derive(Debug, thiserror::Error)]
pub enum DirectoryError {
    /// Redis failed or is unavailable.
    #[error("session directory: {0}")]
    Redis(#[from] redis::RedisError),
    /// The session no longer exists.
    #[error("the session ended")]
    Gone,
}

impl Directory {
    /// This replica's number (0 without Redis).
    pub fn replica(&self) -> u64 {
        match self {
            Self::Local => 0,
            Self::Redis(link) => link.replica,
        }
    }

    /// Shared with other replicas.
    pub fn is_shared(&self) -> bool {
        matches!(self, Self::Redis(_))
    }

    /// Writes a new session's metadata and reserves this replica's first block of its
    /// stream numbers (see [`Directory::reserve_block`]), in one round trip; `None`
    /// without Redis. It may run before or after the store registers the session: either
    /// way the key lives for `ttl`, even if the registration fails.
    pub async fn share(
        &self,
        id: SessionId,
        init: &NewSession,
        connected_at: SystemTime,
        ttl: Duration,
    ) -> Result<Option<(u64, u64)>, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(None);
        };
        let at = connected_at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis()
            .to_string();
        let mut conn = link.commands();
        let mut cmd = redis::cmd("HSET");
        cmd.arg(link.keys.session(id))
            .arg("version")
            .arg(init.protocol_version.as_str())
            .arg("capabilities")
            .arg(init.client_capabilities.to_string())
            .arg("client_info")
            .arg(init.client_info.to_string())
            .arg("lists")
            .arg(serde_json::to_string(&init.lists).unwrap_or_default())
            .arg("connected_at")
            .arg(at);
        if let Some(owner) = init.owner {
            // The binding travels with the session: every replica refuses other principals.
            cmd.arg("owner").arg(owner.to_string());
        }
        // Nobody knows the session's id yet, so nobody can have ended it: the block needs
        // none of `RESERVE`'s care, and goes in the same pipeline (one slot).
        let mut pipe = redis::pipe();
        pipe.add_command(cmd).ignore();
        pipe.cmd("HINCRBY")
            .arg(link.keys.session(id))
            .arg(format!("block:{}", link.replica))
            .arg(BLOCK)
            .cmd("PEXPIRE")
            .arg(link.keys.session(id))
            .arg(millis(ttl))
            .ignore();
        let call = pipe.query_async::<(u64,)>(&mut conn);
        let (end,) = link.breaker.guard("session directory", call).await?;
        Ok(Some((end.saturating_sub(BLOCK), end)))
    }

    /// Reserves this replica's next block of stream numbers for session `id` (see
    /// [`super::SessionTable::set_block`]); `None` without Redis (one block is all there is).
    pub async fn reserve_block(&self, id: SessionId) -> Result<Option<(u64, u64)>, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(None);
        };
        let mut conn = link.commands();
        let script = redis::Script::new(RESERVE);
        let mut invocation = script.key(link.keys.session(id));
        invocation.arg(format!("block:{}", link.replica)).arg(BLOCK);
        let call = invocation.invoke_async::<i64>(&mut conn);
        let end = link.breaker.guard("session directory", call).await?;
        // -1: the session ended meanwhile; reserving must not bring its hash back.
        let end = u64::try_from(end).map_err(|_| DirectoryError::Gone)?;
        Ok(Some((end.saturating_sub(BLOCK), end)))
    }

    /// Reads a session another replica created; `None` if it does not exist (any more).
    pub async fn load(&self, id: SessionId) -> Result<Option<StoredSession>, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(None);
        };
        let mut conn = link.commands();
        let mut pipe = redis::pipe();
        pipe.cmd("HGETALL")
            .arg(link.keys.session(id))
            .cmd("SMEMBERS")
            .arg(link.keys.session_subscriptions(id));
        let call = pipe.query_async(&mut conn);
        let (fields, subscriptions): (std::collections::HashMap<String, String>, Vec<String>) =
            link.breaker.guard("session directory", call).await?;
        Ok(parse(&fields).map(|stored| StoredSession {
            subscriptions,
            ..stored
        }))
    }

    /// Keeps sessions alive for another `session_timeout`; answers, per session, whether
    /// it still existed (false: it expired or was deleted elsewhere).
    pub async fn refresh(
        &self,
        ids: &[SessionId],
        ttl: Duration,
    ) -> Result<Vec<bool>, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(vec![true; ids.len()]);
        };
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ms = millis(ttl);
        // A pipeline per session: its keys share a slot, another session's may not (Redis
        // Cluster). The pipelines go out together on the multiplexed connection.
        let each = ids.iter().map(|id| {
            let mut pipe = redis::pipe();
            pipe.cmd("PEXPIRE").arg(link.keys.session(*id)).arg(ms);
            for key in [
                link.keys.streams(*id),
                link.keys.arrivals(*id),
                link.keys.events(*id),
                link.keys.session_subscriptions(*id),
            ] {
                pipe.cmd("PEXPIRE").arg(key).arg(ms).ignore();
            }
            let mut conn = link.commands();
            async move { pipe.query_async::<(u8,)>(&mut conn).await }
        });
        let call = async { futures_util::future::try_join_all(each).await };
        let alive = link.breaker.guard("session directory", call).await?;
        Ok(alive.into_iter().map(|(n,)| n == 1).collect())
    }

    /// Keeps the subscriber sets of `uris` for another `ttl`: each lives as long as a
    /// session subscribed to it is alive on some replica, then expires.
    pub async fn keep_subscribers(
        &self,
        uris: &[&str],
        ttl: Duration,
    ) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        let ms = millis(ttl);
        let each = uris.iter().map(|uri| {
            let mut cmd = redis::cmd("PEXPIRE");
            cmd.arg(link.keys.subscribers(uri)).arg(ms);
            let mut conn = link.commands();
            async move { cmd.query_async::<()>(&mut conn).await }
        });
        let call = async { futures_util::future::try_join_all(each).await };
        link.breaker.guard("session directory", call).await?;
        Ok(())
    }

    /// Records a session field that changes after `initialize` (`log_level`), unless the
    /// session ended meanwhile (writing would bring back its hash, with no TTL).
    pub async fn set_field(
        &self,
        id: SessionId,
        field: &str,
        value: String,
    ) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        let mut conn = link.commands();
        let script = redis::Script::new(SET_IF_EXISTS);
        let mut invocation = script.key(link.keys.session(id));
        invocation.arg(field).arg(value);
        let call = invocation.invoke_async::<i64>(&mut conn);
        link.breaker.guard("session directory", call).await?;
        Ok(())
    }

    /// Records that session `id` subscribed to (`on`) or unsubscribed from `uri`: in the
    /// session's own set (read when a replica loads it) and in the URI's set of
    /// subscribers (read by a resource update on any replica).
    pub async fn subscription(
        &self,
        id: SessionId,
        uri: &str,
        on: bool,
        ttl: Duration,
    ) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        let op = if on { "SADD" } else { "SREM" };
        let ms = millis(ttl);
        // Two keys in two slots (Redis Cluster): a pipeline each, sent together. Both
        // changes are idempotent, so a client that retries after a failure repairs one
        // that went through alone.
        let mut own = redis::pipe();
        own.cmd(op)
            .arg(link.keys.session_subscriptions(id))
            .arg(uri)
            .ignore()
            .cmd("PEXPIRE")
            .arg(link.keys.session_subscriptions(id))
            .arg(ms)
            .ignore();
        let mut index = redis::pipe();
        index
            .cmd(op)
            .arg(link.keys.subscribers(uri))
            .arg(id.to_string())
            .ignore()
            .cmd("PEXPIRE")
            .arg(link.keys.subscribers(uri))
            .arg(ms)
            .ignore();
        let (mut a, mut b) = (link.commands(), link.commands());
        let call = async {
            tokio::try_join!(
                own.query_async::<()>(&mut a),
                index.query_async::<()>(&mut b)
            )
        };
        link.breaker.guard("session directory", call).await?;
        Ok(())
    }

    /// Removes sessions found gone from the subscribers of `uri`.
    pub async fn prune_subscribers(
        &self,
        uri: &str,
        gone: &[SessionId],
    ) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        if gone.is_empty() {
            return Ok(());
        }
        let mut cmd = redis::cmd("SREM");
        cmd.arg(link.keys.subscribers(uri));
        for id in gone {
            cmd.arg(id.to_string());
        }
        let mut conn = link.commands();
        let call = cmd.query_async::<()>(&mut conn);
        link.breaker.guard("session directory", call).await?;
        Ok(())
    }

    /// Removes an ended session from the subscribers of everything it subscribed to.
    pub async fn drop_subscriptions(&self, id: SessionId) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        let mut conn = link.commands();
        // Read and removed in one round trip. If a removal below fails, the URI's set
        // keeps a member whose session is gone, which the next update of that URI prunes.
        let mut pipe = redis::pipe();
        pipe.cmd("SMEMBERS")
            .arg(link.keys.session_subscriptions(id))
            .cmd("DEL")
            .arg(link.keys.session_subscriptions(id))
            .ignore();
        let call = pipe.query_async::<(Vec<String>,)>(&mut conn);
        let (uris,) = link.breaker.guard("session directory", call).await?;
        if uris.is_empty() {
            return Ok(());
        }
        // One command per key: each URI's set may live in a slot of its own.
        let member = id.to_string();
        let each = uris.iter().map(|uri| {
            let mut cmd = redis::cmd("SREM");
            cmd.arg(link.keys.subscribers(uri)).arg(&member);
            let mut conn = link.commands();
            async move { cmd.query_async::<()>(&mut conn).await }
        });
        let call = async { futures_util::future::try_join_all(each).await };
        link.breaker.guard("session directory", call).await?;
        Ok(())
    }

    /// Every session subscribed to `uri`, on any replica (`None` without Redis: the local
    /// table knows them all). Sessions that ended without unsubscribing may be listed;
    /// [`Directory::prune_subscribers`] removes them once found gone.
    pub async fn subscribers(&self, uri: &str) -> Result<Option<Vec<SessionId>>, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(None);
        };
        let mut conn = link.commands();
        let mut cmd = redis::cmd("SMEMBERS");
        cmd.arg(link.keys.subscribers(uri));
        let call = cmd.query_async::<Vec<String>>(&mut conn);
        let members = link.breaker.guard("session directory", call).await?;
        Ok(Some(
            members.iter().filter_map(|m| m.parse().ok()).collect(),
        ))
    }

    /// Tells every replica (`SessionEnded` on DELETE, `Cancel`, `SessionChanged`).
    pub async fn broadcast(&self, msg: &SessionNews) -> Result<(), DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(());
        };
        publish(link, link.keys.broadcast_channel(), msg).await
    }

    /// Passes a client's answer to the replica that sent the request, if it is another
    /// one (read from our request id, `otpmcp-<replica>-<block>-<n>`). False if it is ours.
    pub async fn route_answer(
        &self,
        id: SessionId,
        request: &RequestId,
        outcome: Result<Value, ErrorObject>,
    ) -> Result<bool, DirectoryError> {
        let Self::Redis(link) = self else {
            return Ok(false);
        };
        let Some(replica) = sender_of(request).filter(|r| *r != link.replica) else {
            return Ok(false);
        };
        let (result, error) = match outcome {
            Ok(v) => (Some(v), None),
            Err(e) => (None, Some(e)),
        };
        let msg = SessionNews::Answer {
            session: id,
            request: request.clone(),
            result,
            error,
        };
        publish(link, link.keys.replica_channel(replica), &msg).await?;
        Ok(true)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn publish(
    link: &RedisLink,
    channel: String,
    msg: &SessionNews,
) -> Result<(), DirectoryError> {
    let body = format::to_vec(link.format.get(), msg).unwrap_or_default();
    link.publish("bus", channel, body).await?;
    Ok(())
}

/// Sets a field of the session hash, unless the session is gone.
const SET_IF_EXISTS: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
";

/// Takes a block of numbers, unless the session is gone.
const RESERVE: &str = r"
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
";

/// Stream numbers reserved at a time per replica and session: a replica that loads a
/// session again (after dropping its idle copy) continues above what it used before.
const BLOCK: u64 = 1 << 20;

/// Our id for the `n`-th request replica `replica` sent a client, in the copy of the
/// session that holds `block` (see [`super::SessionTable::set_block`]).
pub fn client_request_id(replica: u64, block: u64, n: u64) -> RequestId {
    RequestId::String(format!("otpmcp-{replica}-{block}-{n}"))
}

/// The replica that sent request `id`, if it is one of ours.
pub fn sender_of(id: &RequestId) -> Option<u64> {
    let RequestId::String(s) = id else {
        return None;
    };
    let (replica, _) = s.strip_prefix("otpmcp-")?.split_once('-')?;
    replica.parse().ok()
}

/// A session as its hash holds it; `None` if a field is missing or malformed.
pub fn parse(fields: &std::collections::HashMap<String, String>) -> Option<StoredSession> {
    let protocol_version = fields.get("version")?.parse().ok()?;
    let client_capabilities: Value = serde_json::from_str(fields.get("capabilities")?).ok()?;
    let client_info: Value = serde_json::from_str(fields.get("client_info")?).ok()?;
    let lists: Vec<ListKind> = serde_json::from_str(fields.get("lists")?).ok()?;
    let at: u64 = fields.get("connected_at")?.parse().ok()?;
    let log_level = fields
        .get("log_level")
        .and_then(|l| serde_json::from_str(l).ok());
    // An owner that does not parse is a damaged record: not loaded, rather than unowned.
    let owner = match fields.get("owner") {
        Some(text) => Some(crate::auth::Owner::parse(text)?),
        None => None,
    };
    Some(StoredSession {
        init: NewSession {
            protocol_version,
            client_capabilities: std::sync::Arc::new(client_capabilities),
            client_info,
            lists,
            client: None,
            owner,
        },
        connected_at: UNIX_EPOCH + Duration::from_millis(at),
        log_level,
        subscriptions: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_request_ids_name_their_replica() {
        assert_eq!(sender_of(&client_request_id(12, 1 << 20, 3)), Some(12));
        assert_eq!(sender_of(&RequestId::String("otpmcp-x-1".into())), None);
        assert_eq!(sender_of(&RequestId::Number(4)), None);
    }
}
