//! [`SessionHandle`]: typed access to the current session manager. The only code that
//! builds [`SessionMsg`]s.

use std::time::Duration;

use tokio::sync::oneshot;

use super::{
    ClientOutcome, NewSession, SessionError, SessionHold, SessionId, SessionInfo, SessionMsg,
};
use super::{SessionEffect, SessionNews, Touched};
use crate::auth::Owner;
use crate::event_store::{EventStoreHandle, StoreCallError, StoreError};
use crate::ids::{StreamKey, StreamNo};
use crate::protocol::methods::{ListKind, LoggingLevel};
use crate::protocol::{Notification, Outgoing, RequestId};
use crate::rt::slot::{Slot, SlotError};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Typed access to the current session manager.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    slot: Slot<SessionMsg>,
    store: EventStoreHandle,
}

impl SessionHandle {
    /// A handle reading the supervisor's slot for the session manager.
    pub fn new(slot: Slot<SessionMsg>, store: EventStoreHandle) -> Self {
        Self { slot, store }
    }

    /// Creates a session.
    pub async fn create(&self, init: NewSession) -> Result<SessionId, SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::Create(init.clone(), reply),
                CALL_TIMEOUT,
            )
            .await?
    }

    /// Validates and touches `id` for `caller` (the principal asking, with `[auth]`):
    /// a session another principal owns is [`SessionError::NotFound`].
    pub async fn touch(
        &self,
        id: SessionId,
        caller: Option<Owner>,
    ) -> Result<Touched, SessionError> {
        Ok(self.touch_with(id, caller, false, false, None).await?.0)
    }

    /// Validates `id`, allocates a POST stream if `new_stream`, and holds the session open
    /// until the returned guard is dropped. With `request`, the request can be stopped by
    /// `notifications/cancelled` ([`Touched::cancel`] is its own token).
    pub async fn hold(
        &self,
        id: SessionId,
        caller: Option<Owner>,
        new_stream: bool,
        request: Option<RequestId>,
    ) -> Result<(Touched, SessionHold), SessionError> {
        match self
            .touch_with(id, caller, true, new_stream, request)
            .await?
        {
            (touched, Some(hold)) => Ok((touched, hold)),
            (_, None) => Err(SessionError::NotFound),
        }
    }

    async fn touch_with(
        &self,
        id: SessionId,
        caller: Option<Owner>,
        hold: bool,
        new_stream: bool,
        request: Option<RequestId>,
    ) -> Result<(Touched, Option<SessionHold>), SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::Touch {
                    id,
                    hold,
                    new_stream,
                    request: request.clone(),
                    caller,
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await?
    }

    /// `resources/subscribe` (`on`) or `resources/unsubscribe`.
    pub async fn set_subscription(
        &self,
        id: SessionId,
        uri: String,
        on: bool,
    ) -> Result<(), SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::Subscription(id, uri.clone(), on, reply),
                CALL_TIMEOUT,
            )
            .await?
    }

    /// Tells every session subscribed to `uri` that it changed: a stored
    /// `notifications/resources/updated` on each one's standalone GET stream (so a client
    /// that is not connected gets it when it reconnects). Returns how many were told.
    pub async fn notify_resource_updated(&self, uri: &str) -> Result<usize, SessionError> {
        let owned = uri.to_owned();
        let sessions = self
            .slot
            .call(
                |reply| SessionMsg::Subscribers(owned.clone(), reply),
                CALL_TIMEOUT,
            )
            .await?;
        let method = crate::protocol::methods::notifications::RESOURCE_UPDATED;
        let (told, gone) = self
            .tell(sessions, method, Some(serde_json::json!({ "uri": uri })))
            .await;
        if !gone.is_empty() {
            let _ = self.slot.cast(SessionMsg::Unsubscribed(owned, gone));
        }
        Ok(told)
    }

    /// Tells every session that was offered list `kind` that it changed
    /// (`notifications/<kind>/list_changed` on its standalone stream). Returns how many
    /// sessions were told.
    pub async fn list_changed(&self, kind: ListKind) -> Result<usize, SessionError> {
        let sessions = self
            .slot
            .call(|reply| SessionMsg::Offered(kind, reply), CALL_TIMEOUT)
            .await?;
        Ok(self.tell(sessions, kind.notification(), None).await.0)
    }

    /// Stores a notification on the standalone stream of each of `sessions`; returns how
    /// many were told and which were found gone.
    async fn tell(
        &self,
        sessions: Vec<SessionId>,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> (usize, Vec<SessionId>) {
        let payload = Outgoing::Notification(Notification {
            method: method.into(),
            params,
        })
        .to_bytes();
        let (mut told, mut gone) = (0, Vec::new());
        for session in sessions {
            let key = StreamKey::new(session, StreamNo::STANDALONE);
            // A session that ended meanwhile is skipped, not an error.
            match self.store.append(key, payload.clone(), false).await {
                Ok(_) => told += 1,
                Err(StoreCallError::Store(StoreError::UnknownStream)) => gone.push(session),
                Err(_) => {}
            }
        }
        (told, gone)
    }

    /// `logging/setLevel`: the least severe level this session's requests report from now
    /// on.
    pub async fn set_log_level(
        &self,
        id: SessionId,
        level: LoggingLevel,
    ) -> Result<(), SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::SetLogLevel(id, level, reply),
                CALL_TIMEOUT,
            )
            .await?
    }

    /// Applies `effect` to session `id` (a request's change to its session's state).
    pub async fn apply(&self, id: SessionId, effect: SessionEffect) -> Result<(), SessionError> {
        match effect {
            SessionEffect::LogLevel(level) => self.set_log_level(id, level).await,
            SessionEffect::Subscribe(uri) => self.set_subscription(id, uri, true).await,
            SessionEffect::Unsubscribe(uri) => self.set_subscription(id, uri, false).await,
        }
    }

    /// `notifications/cancelled` from the client: stops the request if it still runs.
    /// Best effort, as the spec allows: a request that has just finished is not affected.
    pub async fn cancel_request(&self, id: SessionId, request: RequestId) -> Result<(), SlotError> {
        self.slot.send(SessionMsg::CancelRequest(id, request)).await
    }

    /// Ends a session (DELETE) for `caller`: forgets its events and closes its streams.
    pub async fn terminate(
        &self,
        id: SessionId,
        caller: Option<Owner>,
    ) -> Result<(), SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::Terminate(id, caller, reply),
                CALL_TIMEOUT,
            )
            .await?
    }

    /// The erlmcp `session_info`: record plus last event position per stream.
    pub async fn info(&self, id: SessionId) -> Result<SessionInfo, SessionError> {
        let mut info = self
            .slot
            .call(|reply| SessionMsg::Info(id, reply), CALL_TIMEOUT)
            .await?
            .ok_or(SessionError::NotFound)?;
        info.last_event = self.store.positions(id).await?;
        Ok(info)
    }

    /// How many sessions live on this replica, and the `n` most recently active (without
    /// their event positions).
    pub async fn overview(&self, n: usize) -> Result<(usize, Vec<SessionInfo>), SessionError> {
        Ok(self
            .slot
            .call(|reply| SessionMsg::Overview(n, reply), CALL_TIMEOUT)
            .await?)
    }

    /// Registers a request to the client (sampling, elicitation, roots): our id for it,
    /// and the channel its answer arrives on. The entry ends with the answer, the session,
    /// or when the receiver is dropped (checked at the next registration).
    pub async fn open_client_request(
        &self,
        id: SessionId,
    ) -> Result<(RequestId, oneshot::Receiver<ClientOutcome>), SessionError> {
        self.slot
            .call(
                |reply| SessionMsg::OpenClientRequest(id, reply),
                CALL_TIMEOUT,
            )
            .await?
    }

    /// Routes the client's answer (a POSTed JSON-RPC response) to the waiting handler.
    /// False if nobody waits for it (unknown id, answered already, or gave up).
    pub async fn resolve_client_request(
        &self,
        id: SessionId,
        request: RequestId,
        outcome: ClientOutcome,
    ) -> Result<bool, SessionError> {
        Ok(self
            .slot
            .call(
                |reply| {
                    SessionMsg::ResolveClientRequest(id, request.clone(), outcome.clone(), reply)
                },
                CALL_TIMEOUT,
            )
            .await?)
    }

    /// News another replica published about a session (from the bus). Never waits: it
    /// runs on the Redis connection's task.
    pub fn remote(&self, news: SessionNews) {
        let msg = match news {
            SessionNews::SessionEnded { session } => SessionMsg::Ended(session),
            SessionNews::Cancel {
                session, request, ..
            } => SessionMsg::RemoteCancel(session, request),
            SessionNews::SessionChanged {
                session,
                log_level,
                subscribed,
                unsubscribed,
                ..
            } => SessionMsg::RemoteChange(
                session,
                log_level,
                subscribed
                    .map(|uri| (uri, true))
                    .or(unsubscribed.map(|uri| (uri, false))),
            ),
            SessionNews::Answer {
                session,
                request,
                result,
                error,
            } => {
                let outcome = match (result, error) {
                    (_, Some(error)) => Err(error),
                    (result, None) => Ok(result.unwrap_or(serde_json::Value::Null)),
                };
                SessionMsg::RemoteAnswer(session, request, outcome)
            }
        };
        let _ = self.slot.cast(msg);
    }

    /// The current incarnation's id (observability and tests).
    pub fn current_id(&self) -> Option<ractor::ActorId> {
        self.slot.current().map(|a| a.get_id())
    }

    /// Fault injection: makes the session manager panic.
    #[doc(hidden)]
    pub fn inject_panic(&self) -> Result<(), SlotError> {
        self.slot.cast(SessionMsg::InjectPanic)
    }
}
