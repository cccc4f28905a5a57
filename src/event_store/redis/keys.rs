//! Names of every Redis key and channel otpmcp uses: the store's, the session
//! directory's and the leases'. One place, so the whole layout can be read at once.
//!
//! Every key and channel starts with `key_prefix` (`P`). Redis Cluster places a key by
//! the part between braces (its hash tag), and a script or a multi-key command must touch
//! one slot. So the keys of one session carry the session id as their tag: every
//! event-store script touches exactly the four of its session, all declared. The keys the
//! lease scripts use together carry the prefix as theirs. Every other key is only ever
//! used alone.
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P:{S}:session` | hash | the session: `open`, retained `bytes`, and its metadata |
//! | `P:{S}:streams` | hash | per stream `n`: `n:open`, `n:end`, `n:done`, `n:nonces`, `n:kept`, `n:evicted` |
//! | `P:{S}:arrivals` | list | the session's retained events, oldest first |
//! | `P:{S}:events` | hash | every retained event: field `n:seq`, value `ms:last:payload` |
//! | `P:{S}:subs` | set | the resources the session subscribed to |
//! | `P:{S}:c:<n>` | channel | each event of stream `n`, as it is stored |
//! | `P:bus:<r>`, `P:bus:all` | channel | messages to replica `r`, or to all |
//! | `P:bus:news` | channel | what changed on some replica (lists, resources, tasks) |
//! | `P:bus:task:<r>` | channel | signals for the tasks running on replica `r` |
//! | `P:{P}:replicas` | sorted set | live replicas, scored by lease expiry |
//! | `P:{P}:replica-seq` | counter | the last replica number given out |
//! | `P:{P}:formats` | hash | per replica, the newest shared format it reads (absent: 1) |
//! | `P:{P}:inflight:<r>` | hash | requests running on replica `r` |
//! | `P:claim:<r>:<field>` | string | who answers an entry of a lapsed replica |
//! | `P:task:<id>` | string | a task's record |
//! | `P:{tq:<hex>}:tasks` | sorted set | a principal's live task ids (hex of the principal), scored by expiry |
//! | `P:subs:<uri>` | set | sessions subscribed to resource `uri`; expires with them |

use crate::ids::{SessionId, StreamKey, StreamNo};

/// Names of every Redis key and channel otpmcp uses.
#[derive(Debug, Clone)]
pub struct Keys {
    prefix: String,
}

impl Keys {
    /// Keys under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
        }
    }

    fn tagged(&self, session: SessionId, rest: &str) -> String {
        format!("{}:{{{session}}}:{rest}", self.prefix)
    }

    /// The session hash.
    pub fn session(&self, session: SessionId) -> String {
        self.tagged(session, "session")
    }

    /// The set of resources a session subscribed to.
    pub fn session_subscriptions(&self, session: SessionId) -> String {
        self.tagged(session, "subs")
    }

    /// The per-stream bookkeeping hash of a session.
    pub fn streams(&self, session: SessionId) -> String {
        self.tagged(session, "streams")
    }

    /// The list of a session's retained events, oldest first.
    pub fn arrivals(&self, session: SessionId) -> String {
        self.tagged(session, "arrivals")
    }

    /// Every retained event of a session, by `<stream>:<position>`.
    pub fn events(&self, session: SessionId) -> String {
        self.tagged(session, "events")
    }

    /// A key of the lease scripts, which use several together: tagged with the prefix so
    /// that they share a slot.
    fn cluster_wide(&self, rest: &str) -> String {
        format!("{0}:{{{0}}}:{rest}", self.prefix)
    }

    /// The channel carrying stream `key`'s events as they are stored.
    pub fn channel(&self, key: StreamKey) -> String {
        self.tagged(key.session, &format!("c:{}", key.stream))
    }

    /// The channel of replica `replica`.
    pub fn replica_channel(&self, replica: u64) -> String {
        format!("{}:bus:{replica}", self.prefix)
    }

    /// The channel every replica listens to.
    pub fn broadcast_channel(&self) -> String {
        format!("{}:bus:all", self.prefix)
    }

    /// The set of sessions subscribed to resource `uri` (`resources/subscribe`), so a
    /// resource update on any replica reaches them all, once each.
    pub fn subscribers(&self, uri: &str) -> String {
        format!("{}:subs:{uri}", self.prefix)
    }

    /// The counter that numbers replicas.
    pub fn replica_counter(&self) -> String {
        self.cluster_wide("replica-seq")
    }

    /// The format version each replica reads and writes at most (absent: format 1).
    pub fn formats(&self) -> String {
        self.cluster_wide("formats")
    }

    /// The sorted set of live replicas, scored by the expiry of their lease.
    pub fn replicas(&self) -> String {
        self.cluster_wide("replicas")
    }

    /// Where replicas tell each other what changed (lists, resources, tasks).
    pub fn news_channel(&self) -> String {
        format!("{}:bus:news", self.prefix)
    }

    /// Where signals for the tasks running on replica `replica` go.
    pub fn task_channel(&self, replica: u64) -> String {
        format!("{}:bus:task:{replica}", self.prefix)
    }

    /// Who handles entry `field` of lapsed replica `replica`'s in-flight table.
    pub fn claim(&self, replica: u64, field: &str) -> String {
        format!("{}:claim:{replica}:{field}", self.prefix)
    }

    /// A task's record.
    pub fn task(&self, id: &str) -> String {
        format!("{}:task:{id}", self.prefix)
    }

    /// The live tasks of `principal` (`tasks.max_per_principal`), its own hash tag: the
    /// principal as hex, so no character of it can open or close a tag.
    pub fn task_quota(&self, principal: &str) -> String {
        let hex: String = principal.bytes().map(|b| format!("{b:02x}")).collect();
        format!("{}:{{tq:{hex}}}:tasks", self.prefix)
    }

    /// The requests running on replica `replica`.
    pub fn inflight(&self, replica: u64) -> String {
        self.cluster_wide(&format!("inflight:{replica}"))
    }

    /// Splits a channel name back into what it is about.
    pub fn parse_channel(&self, channel: &[u8]) -> Option<Channel> {
        let rest = channel
            .strip_prefix(self.prefix.as_bytes())?
            .strip_prefix(b":")?;
        let rest = std::str::from_utf8(rest).ok()?;
        if let Some(bus) = rest.strip_prefix("bus:") {
            return Some(match bus {
                "all" => Channel::Broadcast,
                "news" => Channel::News,
                _ => match bus.strip_prefix("task:") {
                    Some(replica) => Channel::Task(replica.parse().ok()?),
                    None => Channel::Replica(bus.parse().ok()?),
                },
            });
        }
        let (session, stream) = rest.strip_prefix('{')?.split_once("}:c:")?;
        Some(Channel::Stream(StreamKey::new(
            session.parse().ok()?,
            StreamNo(stream.parse().ok()?),
        )))
    }
}

/// What a pub/sub channel carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// Events of one stream.
    Stream(StreamKey),
    /// Messages to one replica.
    Replica(u64),
    /// Messages to every replica.
    Broadcast,
    /// What changed on some replica (lists, resources, tasks), for listen streams.
    News,
    /// Signals for the tasks running on one replica.
    Task(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_parse_back() {
        let keys = Keys::new("otpmcp");
        let key = StreamKey::new(SessionId::random(), StreamNo(42));
        assert_eq!(
            keys.parse_channel(keys.channel(key).as_bytes()),
            Some(Channel::Stream(key))
        );
        assert_eq!(
            keys.parse_channel(keys.replica_channel(7).as_bytes()),
            Some(Channel::Replica(7))
        );
        assert_eq!(
            keys.parse_channel(keys.broadcast_channel().as_bytes()),
            Some(Channel::Broadcast)
        );
        assert_eq!(keys.parse_channel(b"other:bus:all"), None);
        assert_eq!(keys.parse_channel(b"otpmcp:{zz}:c:1"), None);
    }
}
