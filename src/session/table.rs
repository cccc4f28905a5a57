//! The session table: every live session's record. Pure data: the session manager actor
//! owns it (lent by the supervisor so sessions survive a crash of the actor).

use std::collections::HashMap;
use std::sync::Weak;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use super::SessionId;
use super::hold::{HoldEntry, SessionHold};
use super::party::{Party, left};
use super::record::{ClientOutcome, NewSession, SessionRecord};
use crate::ids::{IdMap, STREAM_BITS, StreamNo};
use crate::protocol::RequestId;

/// What [`SessionTable::touch`] gives a request.
#[derive(Debug)]
pub struct Touch<'a> {
    /// The session.
    pub record: &'a SessionRecord,
    /// The POST stream allocated, if asked for.
    pub stream: Option<StreamNo>,
    /// Stops the work: the request's own token, or the session's.
    pub cancel: CancellationToken,
    /// The hold, if asked for.
    pub hold: Option<SessionHold>,
}

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
    sessions: IdMap<SessionId, SessionRecord>,
    /// This replica's number: the bits above [`STREAM_BITS`] of the stream numbers it
    /// allocates and part of its ids for requests to clients, so replicas sharing a
    /// session never allocate the same one.
    replica: u64,
    /// How many sessions each client address and each principal created here
    /// (`server.max_sessions_per_client`, `auth.max_sessions_per_principal`); a party
    /// leaves the map with its last session.
    per_party: HashMap<Party, u32>,
}

impl SessionTable {
    /// Number of sessions.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// True when there is no session.
    #[cfg(any(test, feature = "testing"))]
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
            .filter(|(_, r)| r.holds.open() > 0)
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
        for party in Party::of(&init) {
            *self.per_party.entry(party).or_default() += 1;
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

    /// Marks activity; with `hold`, takes a hold on the session (refused with
    /// [`TouchError::Busy`] at `max_holds` open); with `new_stream`, allocates the next POST
    /// stream number. With `request` (and `hold`), registers the request for cancellation
    /// until its hold is dropped. The token in the answer stops the work: the request's
    /// own, or the session's.
    pub fn touch(
        &mut self,
        id: SessionId,
        hold: bool,
        new_stream: bool,
        request: Option<&RequestId>,
        max_holds: u32,
        now: Instant,
    ) -> Result<Touch<'_>, TouchError> {
        let base = self.replica << STREAM_BITS;
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        record.last_seen = now;
        // Ids tell running requests apart for cancellation; a reused one would make
        // `notifications/cancelled` ambiguous.
        let running = |r: &RequestId, requests: &HashMap<_, (_, Weak<HoldEntry>)>| {
            requests
                .get(r)
                .is_some_and(|(_, alive): &(CancellationToken, _)| alive.strong_count() > 0)
        };
        if hold && request.is_some_and(|r| running(r, &record.requests)) {
            return Err(TouchError::DuplicateRequest);
        }
        if new_stream && record.last_stream + 1 >= record.stream_limit {
            // The block ran out and no new one could be reserved (Redis away).
            return Err(TouchError::Busy);
        }
        let taken = if hold {
            if record.holds.open() >= max_holds {
                return Err(TouchError::Busy);
            }
            Some(record.holds.hold())
        } else {
            None
        };
        let stream = new_stream.then(|| {
            record.last_stream += 1;
            StreamNo(base | record.last_stream)
        });
        let cancel = match (request, &taken) {
            (Some(request), Some(taken)) => {
                if record.requests.len() >= max_holds as usize {
                    record
                        .requests
                        .retain(|_, (_, alive)| alive.strong_count() > 0);
                }
                let token = record.cancel.child_token();
                record
                    .requests
                    .insert(request.clone(), (token.clone(), taken.watch()));
                token
            }
            _ => record.cancel.clone(),
        };
        Ok(Touch {
            record,
            stream,
            cancel,
            hold: taken,
        })
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
    /// [`MAX_SUBSCRIPTIONS`](super::effect::MAX_SUBSCRIPTIONS).
    pub fn subscribe(&mut self, id: SessionId, uri: &str) -> Result<(), TouchError> {
        let record = self.sessions.get_mut(&id).ok_or(TouchError::NotFound)?;
        record
            .subscriptions
            .add(uri.to_owned())
            .map_err(|_| TouchError::Busy)
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

    /// Every resource URI some session here subscribed to, once each.
    pub fn subscribed_uris(&self) -> Vec<&str> {
        let mut uris: Vec<&str> = self
            .sessions
            .values()
            .flat_map(|record| record.subscriptions.iter())
            .collect();
        uris.sort_unstable();
        uris.dedup();
        uris
    }

    /// `notifications/cancelled`: stops request `request` of session `id`, if running.
    pub fn cancel_request(&mut self, id: SessionId, request: &RequestId) -> bool {
        let entry = self
            .sessions
            .get_mut(&id)
            .and_then(|r| r.requests.remove(request));
        // A request whose hold is gone has finished: nothing to stop.
        match entry {
            Some((token, alive)) if alive.strong_count() > 0 => {
                token.cancel();
                true
            }
            _ => false,
        }
    }

    /// Every session with its record.
    pub fn iter(&self) -> impl Iterator<Item = (SessionId, &SessionRecord)> {
        self.sessions.iter().map(|(id, r)| (*id, r))
    }

    /// Removes `id` and cancels its requests; false if it was not there.
    pub fn remove(&mut self, id: SessionId) -> bool {
        match self.sessions.remove(&id) {
            Some(record) => {
                record.cancel.cancel();
                ended(&record);
                left(&mut self.per_party, &record.init);
                true
            }
            None => false,
        }
    }

    /// Sessions that `party` created here and that are still alive.
    pub fn sessions_of(&self, party: Party) -> u32 {
        self.per_party.get(&party).copied().unwrap_or(0)
    }

    /// Removes `id` that never became a session (its creation failed half-way): nothing
    /// ran, so nothing is measured.
    pub fn discard(&mut self, id: SessionId) {
        if let Some(record) = self.sessions.remove(&id) {
            record.cancel.cancel();
            left(&mut self.per_party, &record.init);
        }
    }

    /// The session with nothing open that was used least recently, if any; with
    /// `party`, among the sessions that party created.
    pub fn least_recently_used_idle(&self, party: Option<Party>) -> Option<SessionId> {
        self.sessions
            .iter()
            .filter(|(_, r)| r.holds.open() == 0)
            .filter(|(_, r)| party.is_none_or(|p| p.holds(&r.init)))
            .min_by_key(|(_, r)| last_used(r))
            .map(|(id, _)| *id)
    }

    /// Removes and returns the sessions idle for longer than `timeout` with nothing open.
    pub fn expire(&mut self, timeout: Duration, now: Instant) -> Vec<SessionId> {
        let mut gone = Vec::new();
        let per_party = &mut self.per_party;
        self.sessions.retain(|id, r| {
            let last = last_used(r);
            let keep = r.holds.open() > 0 || now.saturating_duration_since(last) <= timeout;
            if !keep {
                r.cancel.cancel();
                ended(r);
                gone.push(*id);
                left(per_party, &r.init);
            }
            keep
        });
        gone
    }
}

/// When `record` was last used: its last request, or the end of its last request or
/// stream, whichever came later.
fn last_used(record: &SessionRecord) -> Instant {
    record
        .holds
        .released_at()
        .map_or(record.last_seen, |at| at.max(record.last_seen))
}

/// `mcp.server.session.duration`: one observation as a session leaves this replica.
fn ended(record: &SessionRecord) {
    crate::telemetry::session_ended(
        record.init.protocol_version.as_str(),
        record.started.elapsed(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::version::ProtocolVersion;
    use crate::session::effect::MAX_SUBSCRIPTIONS;
    use serde_json::Value;

    fn init() -> NewSession {
        NewSession {
            protocol_version: ProtocolVersion::LATEST,
            client_capabilities: Default::default(),
            lists: Vec::new(),
            client_info: Value::Null,
            client: None,
            owner: None,
        }
    }

    /// `Instant::now()` minus `secs`: holds stamp their end with the real clock, so a test
    /// places the rest of its timeline in the past.
    fn ago(secs: u64) -> Instant {
        let now = Instant::now();
        now.checked_sub(Duration::from_secs(secs))
            .unwrap_or_else(|| panic!("the clock cannot go back {secs} s"))
    }

    #[test]
    fn idle_sessions_expire_unless_something_is_open() {
        let t = ago(20);
        let mut table = SessionTable::default();
        let idle = table.create(init(), CancellationToken::new(), t);
        let busy = table.create(init(), CancellationToken::new(), t);
        let hold = table
            .touch(busy, true, false, None, 8, t)
            .map(|touch| touch.hold)
            .unwrap_or_else(|_| panic!("touch"));
        assert!(hold.is_some());
        let later = t + Duration::from_secs(11);
        assert_eq!(table.expire(Duration::from_secs(10), later), vec![idle]);
        assert!(table.get(busy).is_some());
        // Released now, 20 s after it was last touched: idle from the release.
        drop(hold);
        let soon = Instant::now() + Duration::from_secs(5);
        assert!(table.expire(Duration::from_secs(10), soon).is_empty());
        let much_later = Instant::now() + Duration::from_secs(11);
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
        let Ok(Touch {
            cancel: token,
            hold: _running,
            ..
        }) = table.touch(id, true, true, Some(&req), 8, t)
        else {
            panic!("touch");
        };
        assert!(!token.is_cancelled());
        assert!(table.cancel_request(id, &req));
        assert!(token.is_cancelled());
        assert!(!table.cancel_request(id, &req), "only once");
        let other = RequestId::String("b".into());
        let Ok(Touch {
            cancel: token,
            hold,
            ..
        }) = table.touch(id, true, true, Some(&other), 8, t)
        else {
            panic!("touch");
        };
        assert_eq!(
            table.touch(id, true, true, Some(&other), 8, t).err(),
            Some(TouchError::DuplicateRequest),
            "an id in use"
        );
        drop(hold);
        assert!(
            !table.cancel_request(id, &other),
            "finished requests are forgotten"
        );
        assert!(!token.is_cancelled());
        assert!(
            table.touch(id, true, true, Some(&other), 8, t).is_ok(),
            "a finished request's id may be used again"
        );
    }

    #[test]
    fn the_request_index_stays_bounded_by_the_holds() {
        let t = Instant::now();
        let mut table = SessionTable::default();
        let id = table.create(init(), CancellationToken::new(), t);
        for n in 0..1000 {
            let touched = table.touch(id, true, false, Some(&RequestId::Number(n)), 4, t);
            assert!(touched.is_ok_and(|touch| touch.hold.is_some()));
        }
        let indexed = table.get(id).map(|r| r.requests.len());
        assert!(indexed.is_some_and(|n| n <= 5), "indexed: {indexed:?}");
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
                    .and_then(|touch| touch.stream)
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
        let mut holds = Vec::new();
        for _ in 0..2 {
            let touched = table.touch(id, true, false, None, 2, t);
            holds.push(touched.map(|touch| touch.hold).ok().flatten());
        }
        assert!(holds.iter().all(Option::is_some));
        assert_eq!(
            table.touch(id, true, false, None, 2, t).err(),
            Some(TouchError::Busy)
        );
        assert!(
            table.touch(id, false, false, None, 2, t).is_ok(),
            "plain requests still pass"
        );
        holds.pop();
        assert!(table.touch(id, true, false, None, 2, t).is_ok());
    }
}
