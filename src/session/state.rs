//! The session table and its records. Pure data: the session manager actor owns it (lent
//! by the supervisor so sessions survive a crash of the actor).

use std::collections::HashMap;

use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::SessionId;
use crate::ids::StreamNo;
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, RequestId};
use tokio::sync::oneshot;

/// What `initialize` told us about the client.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// The client's `capabilities` object (shared with every request of the session).
    pub client_capabilities: std::sync::Arc<Value>,
    /// The client's `clientInfo` object.
    pub client_info: Value,
    /// The lists whose capability the server announced at `initialize`; only these get
    /// `list_changed` notifications.
    pub lists: Vec<crate::protocol::methods::ListKind>,
}

/// A client's answer to a request the server sent it.
pub type ClientOutcome = Result<Value, ErrorObject>;

/// One session.
#[derive(Debug)]
pub struct SessionRecord {
    /// What the client sent at `initialize`.
    pub init: NewSession,
    /// Wall-clock time of `initialize`.
    pub connected_at: SystemTime,
    /// Monotonic time of `initialize`.
    pub started: Instant,
    /// Last request or stream activity.
    pub last_seen: Instant,
    /// Requests and streams in progress; a session is never expired while any is open.
    pub holds: u32,
    /// Number of the last POST stream opened (0: none).
    pub last_stream: u64,
    /// `last_stream` must stay below this: the end of the block of numbers reserved for
    /// this replica's copy of the session.
    pub stream_limit: u64,
    /// The start of that block, also part of our ids for requests to the client, so a
    /// copy loaded again never reuses one.
    pub request_block: u64,
    /// Cancelled when the session ends: its running requests stop.
    pub cancel: CancellationToken,
    /// Running requests by JSON-RPC id, for `notifications/cancelled`. Each token is a
    /// child of `cancel`. At most `max_open_per_session` entries (each is a hold).
    pub requests: HashMap<RequestId, CancellationToken>,
    /// Requests we sent the client (sampling, elicitation, roots) awaiting its answer, by
    /// our id for them. Bounded like holds.
    pub pending: HashMap<RequestId, oneshot::Sender<ClientOutcome>>,
    /// Number of the last request we sent the client.
    pub last_client_request: u64,
    /// Least severe log level the client wants (`logging/setLevel`); `None`: all.
    pub log_level: std::sync::Arc<crate::protocol::methods::LogThreshold>,
    /// Resource URIs the client subscribed to (`resources/subscribe`).
    pub subscriptions: std::collections::HashSet<String>,
    /// Last time its TTL in the shared directory was renewed.
    pub refreshed: Instant,
}

impl SessionRecord {
    /// A session entering this replica's table at `now`, idle, with nothing open.
    fn new(
        init: NewSession,
        connected_at: SystemTime,
        cancel: CancellationToken,
        now: Instant,
    ) -> Self {
        Self {
            init,
            connected_at,
            started: now,
            last_seen: now,
            holds: 0,
            last_stream: 0,
            stream_limit: 1 << STREAM_BITS,
            request_block: 0,
            cancel,
            requests: HashMap::new(),
            pending: HashMap::new(),
            last_client_request: 0,
            log_level: Default::default(),
            subscriptions: Default::default(),
            refreshed: now,
        }
    }
}

/// Stream numbers are `replica << STREAM_BITS | n`.
pub const STREAM_BITS: u32 = 40;

/// Most resource subscriptions one session may hold.
pub const MAX_SUBSCRIPTIONS: usize = 1024;

/// Why [`SessionTable::touch`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TouchError {
    /// No such session.
    NotFound,
    /// The session has as many requests and streams open as allowed.
    Busy,
    /// A running request of the session already has this id.
    DuplicateRequest,
}

/// All live sessions.
#[derive(Debug, Default)]
pub struct SessionTable {
    sessions: HashMap<SessionId, SessionRecord>,
    /// This replica's number: the bits above [`STREAM_BITS`] of the stream numbers it
    /// allocates and part of its ids for requests to clients, so replicas sharing a
    /// session never allocate the same one.
    replica: u64,
}

impl SessionTable {
    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when there is no session.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Sets this replica's number (0 when nothing is shared).
    pub fn set_replica(&mut self, replica: u64) {
        self.replica = replica;
    }

    /// Gives a session the numbers `[start, end)` for its streams and requests to the
    /// client on this replica (each copy a replica loads gets a fresh block from the
    /// shared directory, so a reload never reuses a number).
    pub fn set_block(&mut self, id: SessionId, start: u64, end: u64) {
        // Past 2^40 numbers would spill into the replica's bits: the session stays
        // exhausted here instead (new streams are refused as busy).
        if end > 1 << STREAM_BITS {
            return;
        }
        if let Some(record) = self.sessions.get_mut(&id) {
            record.last_stream = start;
            record.stream_limit = end;
            record.request_block = start;
            record.last_client_request = 0;
        }
    }

    /// Adds a session created by another replica, as read from the shared directory.
    pub fn insert_loaded(
        &mut self,
        id: SessionId,
        stored: super::directory::StoredSession,
        cancel: CancellationToken,
        now: Instant,
    ) {
        let mut record = SessionRecord::new(stored.init, stored.connected_at, cancel, now);
        if let Some(level) = stored.log_level {
            record.log_level.set(level);
        }
        record.subscriptions = stored.subscriptions.into_iter().collect();
        self.sessions.insert(id, record);
    }

    /// Sessions with a request or stream open.
    pub fn held(&self) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, r)| r.holds > 0)
            .map(|(id, _)| *id)
            .collect()
    }

    /// Adds a session with a fresh random id; `cancel` stops its requests when it ends.
    pub fn create(
        &mut self,
        init: NewSession,
        cancel: CancellationToken,
        now: Instant,
    ) -> SessionId {
        let mut id = SessionId::random();
        while self.sessions.contains_key(&id) {
            id = SessionId::random();
        }
        self.sessions
            .insert(id, SessionRecord::new(init, SystemTime::now(), cancel, now));
        id
    }

    /// The sessions that were offered list `kind` at `initialize`.
    pub fn offered(&self, kind: crate::protocol::methods::ListKind) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, r)| r.init.lists.contains(&kind))
            .map(|(id, _)| *id)
            .collect()
    }

    /// The record of `id`, if alive.
    pub fn get(&self, id: SessionId) -> Option<&SessionRecord> {
        self.sessions.get(&id)
    }

    /// The record of `id` to change, if alive.
    pub fn get_mut(&mut self, id: SessionId) -> Option<&mut SessionRecord> {
        self.sessions.get_mut(&id)
    }

    /// Marks activity; with `hold`, counts one more request or stream in progress (refused
    /// with [`TouchError::Busy`] at `max_holds`); with `new_stream`, allocates the next POST
    /// stream number. With `request` (and `hold`), registers the request for cancellation.
    /// Returns the token that stops the work: the request's own, or the session's.
    pub fn touch(
        &mut self,
        id: SessionId,
        hold: bool,
        new_stream: bool,
        request: Option<&RequestId>,
        max_holds: u32,
        now: Instant,
    ) -> Result<(&SessionRecord, Option<StreamNo>, CancellationToken), TouchError> {
        let base = self.replica << STREAM_BITS;
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        record.last_seen = now;
        // Ids tell running requests apart for cancellation; a reused one would make
        // `notifications/cancelled` ambiguous.
        if hold && request.is_some_and(|r| record.requests.contains_key(r)) {
            return Err(TouchError::DuplicateRequest);
        }
        if new_stream && record.last_stream + 1 >= record.stream_limit {
            // The block ran out and no new one could be reserved (Redis away).
            return Err(TouchError::Busy);
        }
        if hold {
            if record.holds >= max_holds {
                return Err(TouchError::Busy);
            }
            record.holds += 1;
        }
        let stream = new_stream.then(|| {
            record.last_stream += 1;
            StreamNo(base | record.last_stream)
        });
        let cancel = match request {
            Some(request) if hold => {
                let token = record.cancel.child_token();
                record.requests.insert(request.clone(), token.clone());
                token
            }
            _ => record.cancel.clone(),
        };
        Ok((record, stream, cancel))
    }

    /// Ends one hold taken by [`SessionTable::touch`] (and forgets its request).
    pub fn release(&mut self, id: SessionId, request: Option<&RequestId>, now: Instant) {
        if let Some(record) = self.sessions.get_mut(&id) {
            record.holds = record.holds.saturating_sub(1);
            record.last_seen = now;
            if let Some(request) = request {
                record.requests.remove(request);
            }
        }
    }

    /// Registers a request to the client and returns our id for it and where its answer
    /// will arrive. Refused with [`TouchError::Busy`] beyond `max_pending` unanswered.
    pub fn open_client_request(
        &mut self,
        id: SessionId,
        max_pending: u32,
    ) -> Result<(RequestId, oneshot::Receiver<ClientOutcome>), TouchError> {
        let replica = self.replica;
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        // Answers to requests whose askers gave up are no longer wanted.
        record.pending.retain(|_, tx| !tx.is_closed());
        if record.pending.len() >= max_pending as usize {
            return Err(TouchError::Busy);
        }
        record.last_client_request += 1;
        // A namespace of our own, so a client reading its own ids cannot be confused.
        let request = super::directory::client_request_id(
            replica,
            record.request_block,
            record.last_client_request,
        );
        let (tx, rx) = oneshot::channel();
        record.pending.insert(request.clone(), tx);
        Ok((request, rx))
    }

    /// Delivers the client's answer to `request`; false if nobody waits for it.
    pub fn resolve_client_request(
        &mut self,
        id: SessionId,
        request: &RequestId,
        outcome: ClientOutcome,
    ) -> bool {
        let waiter = self
            .sessions
            .get_mut(&id)
            .and_then(|r| r.pending.remove(request));
        waiter.is_some_and(|tx| tx.send(outcome).is_ok())
    }

    /// `resources/subscribe` (idempotent); refused with [`TouchError::Busy`] beyond
    /// [`MAX_SUBSCRIPTIONS`].
    pub fn subscribe(&mut self, id: SessionId, uri: &str) -> Result<(), TouchError> {
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        if !record.subscriptions.contains(uri) && record.subscriptions.len() >= MAX_SUBSCRIPTIONS {
            return Err(TouchError::Busy);
        }
        record.subscriptions.insert(uri.to_owned());
        Ok(())
    }

    /// `resources/unsubscribe` (idempotent).
    pub fn unsubscribe(&mut self, id: SessionId, uri: &str) -> Result<(), TouchError> {
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        record.subscriptions.remove(uri);
        Ok(())
    }

    /// Sessions subscribed to `uri`. A scan of all sessions: updates are rare next to
    /// requests, and an index would be one more structure to keep consistent.
    pub fn subscribers(&self, uri: &str) -> Vec<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, r)| r.subscriptions.contains(uri))
            .map(|(id, _)| *id)
            .collect()
    }

    /// `notifications/cancelled`: stops request `request` of session `id`, if running.
    pub fn cancel_request(&mut self, id: SessionId, request: &RequestId) -> bool {
        let token = self
            .sessions
            .get_mut(&id)
            .and_then(|r| r.requests.remove(request));
        token.map(|t| t.cancel()).is_some()
    }

    /// Removes `id` and cancels its requests; false if it was not there.
    pub fn remove(&mut self, id: SessionId) -> bool {
        match self.sessions.remove(&id) {
            Some(record) => {
                record.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Removes and returns the sessions idle for longer than `timeout` with nothing open.
    pub fn expire(&mut self, timeout: Duration, now: Instant) -> Vec<SessionId> {
        let mut gone = Vec::new();
        self.sessions.retain(|id, r| {
            let keep = r.holds > 0 || now.saturating_duration_since(r.last_seen) <= timeout;
            if !keep {
                r.cancel.cancel();
                gone.push(*id);
            }
            keep
        });
        gone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn init() -> NewSession {
        NewSession {
            protocol_version: ProtocolVersion::LATEST,
            client_capabilities: Default::default(),
            lists: Vec::new(),
            client_info: Value::Null,
        }
    }

    #[test]
    fn idle_sessions_expire_unless_something_is_open() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let idle = table.create(init(), CancellationToken::new(), t);
        let busy = table.create(init(), CancellationToken::new(), t);
        assert!(table.touch(busy, true, false, None, 8, t).is_ok());
        let later = t + Duration::from_secs(11);
        assert_eq!(table.expire(Duration::from_secs(10), later), vec![idle]);
        assert!(table.get(busy).is_some());
        table.release(busy, None, later);
        assert!(table.expire(Duration::from_secs(10), later).is_empty());
        let much_later = later + Duration::from_secs(11);
        assert_eq!(
            table.expire(Duration::from_secs(10), much_later),
            vec![busy]
        );
    }

    #[test]
    fn a_running_request_can_be_cancelled_by_id_until_it_ends() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let id = table.create(init(), CancellationToken::new(), t);
        let req = RequestId::Number(7);
        let token = table
            .touch(id, true, true, Some(&req), 8, t)
            .map(|(_, _, token)| token)
            .unwrap_or_else(|_| panic!("touch"));
        assert!(!token.is_cancelled());
        assert!(table.cancel_request(id, &req));
        assert!(token.is_cancelled());
        assert!(!table.cancel_request(id, &req), "only once");
        let other = RequestId::String("b".into());
        let token = table
            .touch(id, true, true, Some(&other), 8, t)
            .map(|(_, _, token)| token)
            .unwrap_or_else(|_| panic!("touch"));
        table.release(id, Some(&other), t);
        assert!(
            !table.cancel_request(id, &other),
            "finished requests are forgotten"
        );
        assert!(!token.is_cancelled());
    }

    #[test]
    fn subscriptions_are_per_session_idempotent_and_capped() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let a = table.create(init(), CancellationToken::new(), t);
        let b = table.create(init(), CancellationToken::new(), t);
        assert!(table.subscribe(a, "x://1").is_ok());
        assert!(table.subscribe(a, "x://1").is_ok(), "again is fine");
        assert!(table.subscribe(b, "x://2").is_ok());
        assert_eq!(table.subscribers("x://1"), vec![a]);
        assert!(table.unsubscribe(a, "x://1").is_ok());
        assert!(table.subscribers("x://1").is_empty());
        for i in 0..MAX_SUBSCRIPTIONS {
            assert!(table.subscribe(a, &format!("x://{i}")).is_ok());
        }
        assert_eq!(
            table.subscribe(a, "x://one-more").err(),
            Some(TouchError::Busy)
        );
        assert!(
            table.subscribe(a, "x://0").is_ok(),
            "an existing one is not a new one"
        );
        assert_eq!(
            table.subscribe(SessionId::random(), "x://1").err(),
            Some(TouchError::NotFound)
        );
    }

    #[test]
    fn post_streams_are_numbered_from_one() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let id = table.create(init(), CancellationToken::new(), t);
        let streams: Vec<_> = (0..3)
            .filter_map(|_| {
                table
                    .touch(id, false, true, None, 8, t)
                    .ok()
                    .and_then(|(_, s, _)| s)
            })
            .collect();
        assert_eq!(streams, [StreamNo(1), StreamNo(2), StreamNo(3)]);
        assert_eq!(
            table
                .touch(SessionId::random(), false, true, None, 8, t)
                .err(),
            Some(TouchError::NotFound)
        );
    }

    #[test]
    fn holds_are_capped_per_session() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let id = table.create(init(), CancellationToken::new(), t);
        assert!(table.touch(id, true, false, None, 2, t).is_ok());
        assert!(table.touch(id, true, false, None, 2, t).is_ok());
        assert_eq!(
            table.touch(id, true, false, None, 2, t).err(),
            Some(TouchError::Busy)
        );
        assert!(
            table.touch(id, false, false, None, 2, t).is_ok(),
            "plain requests still pass"
        );
        table.release(id, None, t);
        assert!(table.touch(id, true, false, None, 2, t).is_ok());
    }
}
