//! The session manager actor: creates sessions on `initialize`, validates and touches them
//! on every request, numbers their POST streams, expires idle ones and terminates them on
//! DELETE — telling the event store to forget them each time a session ends.

pub mod directory;
pub mod id;
pub mod state;

use std::time::{Duration, Instant, SystemTime};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::Value;
use tracing::Instrument;

pub use directory::Directory;
pub use id::{SessionId, SessionIdError};
pub use state::{ClientOutcome, NewSession, SessionRecord, SessionTable, TouchError};
use tokio::sync::oneshot;

use crate::cluster::bus::BusMessage;
use crate::event_store::{EventStoreHandle, StreamNo};
use crate::protocol::RequestId;
use crate::protocol::methods::{ListKind, LoggingLevel};
use crate::protocol::version::ProtocolVersion;
use crate::supervisor::heir::Lent;
use crate::supervisor::registry::{Slot, SlotError};

const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a session request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// Unknown, expired or terminated.
    #[error("session not found")]
    NotFound,
    /// `max_sessions` are alive already.
    #[error("too many sessions")]
    Full,
    /// `max_open_per_session` requests and streams are open already.
    #[error("too many requests and streams open in this session")]
    Busy,
    /// A running request of the session already uses this id.
    #[error("a running request of this session already uses this id")]
    DuplicateRequest,
    /// The session manager could not be reached.
    #[error(transparent)]
    Unreachable(#[from] SlotError),
    /// The shared session directory (Redis) could not be reached.
    #[error("the shared session store is unavailable")]
    Shared,
}

/// What a request learns about its session.
#[derive(Debug, Clone)]
pub struct Touched {
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// Cancelled when the session ends (DELETE, expiry, shutdown).
    pub cancel: tokio_util::sync::CancellationToken,
    /// The POST stream allocated for this request, when asked for.
    pub stream: Option<StreamNo>,
    /// The session's log level when the request started.
    pub log_level: std::sync::Arc<crate::protocol::methods::LogThreshold>,
    /// What the client said it supports at `initialize`.
    pub client_capabilities: std::sync::Arc<serde_json::Value>,
}

/// Observable state of one session (the erlmcp `get_session_info`).
#[derive(Debug, Clone)]
pub struct SessionInfo {
    /// The session.
    pub id: SessionId,
    /// Negotiated protocol revision.
    pub protocol_version: ProtocolVersion,
    /// The client's `clientInfo`.
    pub client_info: Value,
    /// When it initialized.
    pub connected_at: SystemTime,
    /// How long ago that was.
    pub connected_for: Duration,
    /// Requests and streams open now.
    pub open: u32,
    /// Last event position of each stream that still has a record in the store.
    pub last_event: Vec<(StreamNo, u64)>,
}

/// Messages of the session manager. Built only by [`SessionHandle`].
#[derive(Debug)]
pub enum SessionMsg {
    /// Create a session.
    Create(NewSession, RpcReplyPort<Result<SessionId, SessionError>>),
    /// Validate and touch a session.
    Touch {
        /// The session.
        id: SessionId,
        /// Count an open request or stream until [`SessionMsg::Release`].
        hold: bool,
        /// Allocate a POST stream number.
        new_stream: bool,
        /// The JSON-RPC request this hold serves, registered for `notifications/cancelled`.
        request: Option<RequestId>,
        /// What the request needs to know, and the hold when one was asked for. The hold is
        /// built here, not by the caller, so a caller that gave up before the answer
        /// arrived (its reply is dropped unread) still releases what it took.
        reply: RpcReplyPort<Result<(Touched, Option<SessionHold>), SessionError>>,
    },
    /// A hold ended (acknowledged, so a crash of this actor cannot lose it silently).
    Release(SessionId, Option<RequestId>, RpcReplyPort<()>),
    /// `notifications/cancelled`: stop a running request.
    CancelRequest(SessionId, RequestId),
    /// `logging/setLevel`.
    SetLogLevel(
        SessionId,
        LoggingLevel,
        RpcReplyPort<Result<(), SessionError>>,
    ),
    /// `resources/subscribe` (true) or `resources/unsubscribe` (false).
    Subscription(
        SessionId,
        String,
        bool,
        RpcReplyPort<Result<(), SessionError>>,
    ),
    /// The sessions subscribed to a resource.
    Subscribers(String, RpcReplyPort<Vec<SessionId>>),
    /// These sessions, listed as subscribers of a resource, were found gone.
    Unsubscribed(String, Vec<SessionId>),
    /// The sessions that were offered a list at `initialize`.
    Offered(ListKind, RpcReplyPort<Vec<SessionId>>),
    /// DELETE.
    Terminate(SessionId, RpcReplyPort<Result<(), SessionError>>),
    /// Session info (without store positions).
    Info(SessionId, RpcReplyPort<Option<SessionInfo>>),
    /// Register a request to the client; answers our id for it and its answer's channel.
    OpenClientRequest(
        SessionId,
        RpcReplyPort<Result<(RequestId, oneshot::Receiver<ClientOutcome>), SessionError>>,
    ),
    /// The client answered a request we sent; replies whether anyone was waiting.
    ResolveClientRequest(SessionId, RequestId, ClientOutcome, RpcReplyPort<bool>),
    /// Timer: expire idle sessions.
    Sweep,
    /// Another replica ended a session (DELETE there).
    Ended(SessionId),
    /// `notifications/cancelled` that reached another replica.
    RemoteCancel(SessionId, RequestId),
    /// Another replica changed the session's log level, or a subscription (`true`:
    /// subscribed).
    RemoteChange(SessionId, Option<LoggingLevel>, Option<(String, bool)>),
    /// A client answered, through another replica, a request this replica sent.
    RemoteAnswer(SessionId, RequestId, ClientOutcome),
    /// Fault injection for supervision tests.
    InjectPanic,
}

impl SessionMsg {
    fn name(&self) -> &'static str {
        match self {
            Self::Create(..) => "create",
            Self::Touch { .. } => "touch",
            Self::Release(..) => "release",
            Self::CancelRequest(..) => "cancel_request",
            Self::SetLogLevel(..) => "set_log_level",
            Self::Subscription(..) => "subscription",
            Self::Subscribers(..) => "subscribers",
            Self::Unsubscribed(..) => "unsubscribed",
            Self::Offered(..) => "offered",
            Self::Terminate(..) => "terminate",
            Self::Info(..) => "info",
            Self::OpenClientRequest(..) => "open_client_request",
            Self::ResolveClientRequest(..) => "resolve_client_request",
            Self::Sweep => "sweep",
            Self::Ended(..) => "ended",
            Self::RemoteAnswer(..) => "remote_answer",
            Self::RemoteCancel(..) => "remote_cancel",
            Self::RemoteChange(..) => "remote_change",
            Self::InjectPanic => "inject_panic",
        }
    }
}

/// Start-up arguments of the session manager.
#[derive(Debug)]
pub struct SessionArgs {
    /// The table, lent by the supervisor.
    pub table: Lent<SessionTable>,
    /// Told to forget ended sessions.
    pub store: EventStoreHandle,
    /// `server.session_timeout`.
    pub session_timeout: Duration,
    /// `server.max_sessions`.
    pub max_sessions: usize,
    /// `server.max_open_per_session`.
    pub max_open_per_session: u32,
    /// This actor's own slot, for the holds it hands out.
    pub me: Slot<SessionMsg>,
    /// Parent of every session's cancellation token; cancelled at shutdown.
    pub root_cancel: tokio_util::sync::CancellationToken,
    /// How often to look for idle sessions.
    pub sweep_interval: Duration,
    /// Where sessions are shared with other replicas, if anywhere.
    pub directory: Directory,
}

/// Running state of the session manager.
#[derive(Debug)]
pub struct SessionManagerState {
    table: Lent<SessionTable>,
    store: EventStoreHandle,
    session_timeout: Duration,
    max_sessions: usize,
    max_open_per_session: u32,
    me: Slot<SessionMsg>,
    root_cancel: tokio_util::sync::CancellationToken,
    sweeper: tokio::task::JoinHandle<()>,
    directory: Directory,
}

/// The session manager actor.
#[derive(Debug, Default)]
pub struct SessionManager;

impl Actor for SessionManager {
    type Msg = SessionMsg;
    type State = SessionManagerState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let sweeper = myself.send_interval(args.sweep_interval, || SessionMsg::Sweep);
        let mut table = args.table;
        table.set_replica(args.directory.replica());
        Ok(SessionManagerState {
            directory: args.directory,
            table,
            store: args.store,
            session_timeout: args.session_timeout,
            max_sessions: args.max_sessions,
            max_open_per_session: args.max_open_per_session,
            me: args.me,
            root_cancel: args.root_cancel,
            sweeper,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<SessionMsg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.sweeper.abort();
        Ok(())
    }

    async fn handle(
        &self,
        _myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let span = tracing::debug_span!("session_manager.handle", msg = msg.name());
        handle(msg, state).instrument(span).await;
        Ok(())
    }
}

async fn handle(msg: SessionMsg, state: &mut SessionManagerState) {
    let now = Instant::now();
    match msg {
        SessionMsg::Create(init, reply) => {
            let result = if state.table.len() >= state.max_sessions {
                Err(SessionError::Full)
            } else {
                let id = state
                    .table
                    .create(init, state.root_cancel.child_token(), now);
                let saved = match state.store.open_session(id).await {
                    Err(e) => Err(SessionError::Unreachable(e)),
                    Ok(()) => match state.table.get(id) {
                        Some(record) => state
                            .directory
                            .save(id, &record.init, record.connected_at)
                            .await
                            .map_err(|e| {
                                tracing::error!(session_id = %id, error = %e, "could not share the new session");
                                SessionError::Shared
                            }),
                        None => Err(SessionError::NotFound),
                    },
                };
                let saved = match saved {
                    Ok(()) => reserve_block(state, id).await,
                    Err(e) => Err(e),
                };
                match saved {
                    Ok(()) => {
                        tracing::info!(session_id = %id, "session created");
                        Ok(id)
                    }
                    Err(e) => {
                        state.table.remove(id);
                        Err(e)
                    }
                }
            };
            let _ = reply.send(result);
        }
        SessionMsg::Touch {
            id,
            hold,
            new_stream,
            request,
            reply,
        } => {
            if let Err(e) = ensure_local(state, id, now).await {
                let _ = reply.send(Err(e));
                return;
            }
            let me = &state.me;
            let result = state
                .table
                .touch(
                    id,
                    hold,
                    new_stream,
                    request.as_ref(),
                    state.max_open_per_session,
                    now,
                )
                .map(|(record, stream, cancel)| {
                    let touched = Touched {
                        protocol_version: record.init.protocol_version,
                        cancel,
                        stream,
                        log_level: record.log_level.clone(),
                        client_capabilities: record.init.client_capabilities.clone(),
                    };
                    let guard = hold.then(|| SessionHold {
                        id,
                        request,
                        slot: me.clone(),
                    });
                    (touched, guard)
                })
                .map_err(|e| match e {
                    TouchError::NotFound => SessionError::NotFound,
                    TouchError::Busy => SessionError::Busy,
                    TouchError::DuplicateRequest => SessionError::DuplicateRequest,
                });
            // If the caller is gone, the unsent hold is dropped here and releases itself.
            let _ = reply.send(result);
        }
        SessionMsg::Release(id, request, reply) => {
            state.table.release(id, request.as_ref(), now);
            let _ = reply.send(());
        }
        SessionMsg::Subscription(id, uri, on, reply) => {
            let result = if on {
                state.table.subscribe(id, &uri)
            } else {
                state.table.unsubscribe(id, &uri)
            };
            if result.is_ok() {
                if let Err(e) = state
                    .directory
                    .subscription(id, &uri, on, state.session_timeout)
                    .await
                {
                    tracing::warn!(session_id = %id, error = %e, "could not share a subscription");
                }
                let msg = BusMessage::SessionChanged {
                    origin: state.directory.replica(),
                    session: id.to_string(),
                    log_level: None,
                    subscribed: on.then(|| uri.clone()),
                    unsubscribed: (!on).then(|| uri.clone()),
                };
                share_change(&state.directory, id, &msg).await;
            }
            let _ = reply.send(result.map_err(|e| match e {
                TouchError::NotFound => SessionError::NotFound,
                TouchError::Busy => SessionError::Busy,
                TouchError::DuplicateRequest => SessionError::DuplicateRequest,
            }));
        }
        SessionMsg::Subscribers(uri, reply) => {
            let subscribers = match state.directory.subscribers(&uri).await {
                Ok(Some(all)) => all,
                Ok(None) => state.table.subscribers(&uri),
                Err(e) => {
                    tracing::warn!(uri, error = %e, "could not read the shared subscribers; telling this replica's only");
                    state.table.subscribers(&uri)
                }
            };
            let _ = reply.send(subscribers);
        }
        SessionMsg::Unsubscribed(uri, gone) => {
            if let Err(e) = state.directory.prune_subscribers(&uri, &gone).await {
                tracing::debug!(uri, error = %e, "could not prune the subscriber index");
            }
        }
        SessionMsg::Offered(kind, reply) => {
            let _ = reply.send(state.table.offered(kind));
        }
        SessionMsg::SetLogLevel(id, level, reply) => {
            let result = match state.table.get_mut(id) {
                Some(record) => {
                    record.log_level.set(level);
                    Ok(())
                }
                None => Err(SessionError::NotFound),
            };
            if result.is_ok() {
                let value = serde_json::to_string(&level).unwrap_or_default();
                share_field(&state.directory, id, "log_level", value).await;
                let msg = BusMessage::SessionChanged {
                    origin: state.directory.replica(),
                    session: id.to_string(),
                    log_level: Some(level),
                    subscribed: None,
                    unsubscribed: None,
                };
                share_change(&state.directory, id, &msg).await;
            }
            let _ = reply.send(result);
        }
        SessionMsg::CancelRequest(id, request) => {
            if state.table.cancel_request(id, &request) {
                tracing::info!(session_id = %id, request_id = %request, "request cancelled by the client");
            } else if state.directory.is_shared() {
                // Perhaps running on another replica.
                let msg = BusMessage::Cancel {
                    origin: state.directory.replica(),
                    session: id.to_string(),
                    request,
                };
                if let Err(e) = state.directory.broadcast(&msg).await {
                    tracing::warn!(session_id = %id, error = %e, "could not pass a cancellation to the other replicas");
                }
            }
        }
        SessionMsg::RemoteCancel(id, request) => {
            if state.table.cancel_request(id, &request) {
                tracing::info!(session_id = %id, request_id = %request, "request cancelled by the client through another replica");
            }
        }
        SessionMsg::RemoteChange(id, level, subscription) => {
            if let Some(record) = state.table.get_mut(id) {
                if let Some(level) = level {
                    record.log_level.set(level);
                }
                match subscription {
                    Some((uri, true)) => {
                        record.subscriptions.insert(uri);
                    }
                    Some((uri, false)) => {
                        record.subscriptions.remove(&uri);
                    }
                    None => {}
                }
            }
        }
        SessionMsg::Terminate(id, reply) => {
            let found = match ensure_local(state, id, now).await {
                Ok(()) => state.table.get(id).is_some(),
                Err(SessionError::Shared) => {
                    let _ = reply.send(Err(SessionError::Shared));
                    return;
                }
                Err(_) => false,
            };
            // With Redis away the shared session cannot be ended: say so (503) rather than
            // answer 200 while any replica would go on serving it.
            if found && let Err(e) = state.directory.drop_subscriptions(id).await {
                tracing::warn!(session_id = %id, error = %e, "could not end a shared session");
                let _ = reply.send(Err(SessionError::Shared));
                return;
            }
            let found = found && state.table.remove(id);
            if found {
                tracing::info!(session_id = %id, "session terminated by client");
                forget(&state.store, id).await;
                let msg = BusMessage::SessionEnded {
                    session: id.to_string(),
                };
                if let Err(e) = state.directory.broadcast(&msg).await {
                    tracing::warn!(session_id = %id, error = %e, "could not tell the other replicas that a session ended; they find out when it expires");
                }
            }
            let _ = reply.send(if found {
                Ok(())
            } else {
                Err(SessionError::NotFound)
            });
        }
        SessionMsg::Info(id, reply) => {
            let info = state.table.get(id).map(|record| SessionInfo {
                id,
                protocol_version: record.init.protocol_version,
                client_info: record.init.client_info.clone(),
                connected_at: record.connected_at,
                connected_for: record.started.elapsed(),
                open: record.holds,
                last_event: Vec::new(),
            });
            let _ = reply.send(info);
        }
        SessionMsg::OpenClientRequest(id, reply) => {
            let result = state
                .table
                .open_client_request(id, state.max_open_per_session)
                .map_err(|e| match e {
                    TouchError::NotFound => SessionError::NotFound,
                    TouchError::Busy => SessionError::Busy,
                    TouchError::DuplicateRequest => SessionError::DuplicateRequest,
                });
            let _ = reply.send(result);
        }
        SessionMsg::ResolveClientRequest(id, request, outcome, reply) => {
            let mut delivered = state
                .table
                .resolve_client_request(id, &request, outcome.clone());
            if !delivered {
                delivered = match state.directory.route_answer(id, &request, outcome).await {
                    Ok(routed) => routed,
                    Err(e) => {
                        tracing::warn!(session_id = %id, error = %e, "could not pass an answer to the replica that asked");
                        false
                    }
                };
            }
            if !delivered {
                tracing::debug!(session_id = %id, request_id = %request, "answer to a request nobody waits for");
            }
            let _ = reply.send(delivered);
        }
        SessionMsg::Sweep => {
            let shared = state.directory.is_shared();
            for id in state.table.expire(state.session_timeout, now) {
                if shared {
                    // Idle here, perhaps not elsewhere: the shared copy expires by its own
                    // TTL, which every replica using the session renews.
                    tracing::debug!(session_id = %id, "session idle on this replica; dropped locally");
                } else {
                    tracing::info!(session_id = %id, "session expired");
                    forget(&state.store, id).await;
                }
            }
            // Sessions with work open here never expire: renew them for everyone.
            let held = state.table.held();
            match state.directory.refresh(&held, state.session_timeout).await {
                Ok(alive) => {
                    for (id, alive) in held.into_iter().zip(alive) {
                        if let Some(record) = state.table.get_mut(id) {
                            record.refreshed = now;
                        }
                        if !alive {
                            tracing::info!(session_id = %id, "session ended elsewhere");
                            end_locally(state, id).await;
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not renew shared sessions"),
            }
        }
        SessionMsg::Ended(id) => {
            if state.table.get(id).is_some() {
                tracing::info!(session_id = %id, "session terminated on another replica");
                end_locally(state, id).await;
            }
        }
        SessionMsg::RemoteAnswer(id, request, outcome) => {
            if !state.table.resolve_client_request(id, &request, outcome) {
                tracing::debug!(session_id = %id, request_id = %request, "answer from another replica to a request nobody waits for");
            }
        }
        SessionMsg::InjectPanic => panic!("fault injection: session manager"),
    }
}

/// Makes sure `id` is in the local table: a session another replica created is read from
/// the shared directory; a shared one not renewed for a while is renewed (and found gone if
/// it ended elsewhere).
async fn ensure_local(
    state: &mut SessionManagerState,
    id: SessionId,
    now: Instant,
) -> Result<(), SessionError> {
    if !state.directory.is_shared() {
        return Ok(());
    }
    if let Some(record) = state.table.get(id) {
        if record.last_stream + 1 >= record.stream_limit {
            // Best effort: without a new block the request is refused as busy.
            let _ = reserve_block(state, id).await;
        }
        let Some(record) = state.table.get(id) else {
            return Err(SessionError::NotFound);
        };
        if now.saturating_duration_since(record.refreshed) < state.session_timeout / 4 {
            return Ok(());
        }
        let alive = match state.directory.refresh(&[id], state.session_timeout).await {
            Ok(alive) => alive.first().copied().unwrap_or(false),
            // Redis is away: the session cannot be confirmed, nor can it have been ended
            // by DELETE elsewhere without Redis. Serve it; the next refresh will tell.
            Err(_) => true,
        };
        if alive {
            if let Some(record) = state.table.get_mut(id) {
                record.refreshed = now;
            }
            return Ok(());
        }
        end_locally(state, id).await;
        return Err(SessionError::NotFound);
    }
    let stored = state.directory.load(id).await.map_err(|e| {
        tracing::warn!(session_id = %id, error = %e, "could not read a shared session");
        SessionError::Shared
    })?;
    let Some(stored) = stored else {
        return Err(SessionError::NotFound);
    };
    if state.table.len() >= state.max_sessions {
        return Err(SessionError::Full);
    }
    state
        .table
        .insert_loaded(id, stored, state.root_cancel.child_token(), now);
    if let Err(e) = reserve_block(state, id).await {
        state.table.remove(id);
        return Err(e);
    }
    let _ = state.directory.refresh(&[id], state.session_timeout).await;
    tracing::info!(session_id = %id, "serving a session created by another replica");
    Ok(())
}

/// Takes this replica's next block of stream numbers for `id` from the directory.
async fn reserve_block(state: &mut SessionManagerState, id: SessionId) -> Result<(), SessionError> {
    match state.directory.reserve_block(id).await {
        Ok(Some((start, end))) => {
            state.table.set_block(id, start, end);
            Ok(())
        }
        Ok(None) => Ok(()),
        Err(directory::DirectoryError::Gone) => Err(SessionError::NotFound),
        Err(e) => {
            tracing::warn!(session_id = %id, error = %e, "could not reserve stream numbers");
            Err(SessionError::Shared)
        }
    }
}

/// Drops a session that ended elsewhere: its requests here stop, its connections here close.
async fn end_locally(state: &mut SessionManagerState, id: SessionId) {
    state.table.remove(id);
    forget(&state.store, id).await;
}

async fn share_change(directory: &Directory, id: SessionId, msg: &BusMessage) {
    if let Err(e) = directory.broadcast(msg).await {
        tracing::warn!(session_id = %id, error = %e, "could not tell the other replicas of a session change");
    }
}

async fn share_field(directory: &Directory, id: SessionId, field: &str, value: String) {
    if let Err(e) = directory.set_field(id, field, value).await {
        tracing::warn!(session_id = %id, field, error = %e, "could not share a session change");
    }
}

async fn forget(store: &EventStoreHandle, id: SessionId) {
    if let Err(e) = store.forget_session(id).await {
        tracing::error!(session_id = %id, error = %e, "could not tell the event store to forget a session");
    }
}

/// Typed access to the current session manager.
#[derive(Debug, Clone)]
pub struct SessionHandle {
    slot: Slot<SessionMsg>,
    store: EventStoreHandle,
}

/// An open request or stream of a session: keeps the session from expiring until dropped.
/// Part of the handle: it sends the matching [`SessionMsg::Release`] itself.
#[derive(Debug)]
pub struct SessionHold {
    id: SessionId,
    request: Option<RequestId>,
    slot: Slot<SessionMsg>,
}

impl Drop for SessionHold {
    fn drop(&mut self) {
        // A lost Release would keep the session from ever expiring, so it is a call (a
        // crash that swallows it is noticed and the call repeated) made from a task that
        // can wait for a restarting session manager.
        let id = self.id;
        let request = self.request.take();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let slot = self.slot.clone();
                rt.spawn(
                    async move {
                        let _ = slot
                            .call(
                                |reply| SessionMsg::Release(id, request.clone(), reply),
                                CALL_TIMEOUT,
                            )
                            .await;
                    }
                    .instrument(tracing::Span::current()),
                );
            }
            // Outside a runtime (only while the process is being torn down) nobody could
            // wait; a cast is all that is left.
            Err(_) => {
                let (tx, _) = tokio::sync::oneshot::channel();
                let _ = self
                    .slot
                    .cast(SessionMsg::Release(id, request, RpcReplyPort::from(tx)));
            }
        }
    }
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

    /// Validates and touches `id`.
    pub async fn touch(&self, id: SessionId) -> Result<Touched, SessionError> {
        Ok(self.touch_with(id, false, false, None).await?.0)
    }

    /// Validates `id`, allocates a POST stream if `new_stream`, and holds the session open
    /// until the returned guard is dropped. With `request`, the request can be stopped by
    /// `notifications/cancelled` ([`Touched::cancel`] is its own token).
    pub async fn hold(
        &self,
        id: SessionId,
        new_stream: bool,
        request: Option<RequestId>,
    ) -> Result<(Touched, SessionHold), SessionError> {
        match self.touch_with(id, true, new_stream, request).await? {
            (touched, Some(hold)) => Ok((touched, hold)),
            (_, None) => Err(SessionError::NotFound),
        }
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

    /// Stores a notification on the standalone stream of each of `sessions`.
    async fn tell(
        &self,
        sessions: Vec<SessionId>,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> (usize, Vec<SessionId>) {
        let payload = crate::protocol::Outgoing::Notification(crate::protocol::Notification {
            method: method.into(),
            params,
        })
        .to_bytes();
        let (mut told, mut gone) = (0, Vec::new());
        for session in sessions {
            let key = crate::event_store::StreamKey::new(session, StreamNo::STANDALONE);
            // A session that ended meanwhile is skipped, not an error.
            match self.store.append(key, payload.clone(), false).await {
                Ok(_) => told += 1,
                Err(crate::event_store::actor::StoreCallError::Store(
                    crate::event_store::StoreError::UnknownStream,
                )) => gone.push(session),
                Err(_) => {}
            }
        }
        (told, gone)
    }

    /// `logging/setLevel`: the least severe level this session's requests report from now on.
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

    /// `notifications/cancelled` from the client: stops the request if it still runs.
    /// Best effort, as the spec allows: a request that has just finished is not affected.
    pub async fn cancel_request(&self, id: SessionId, request: RequestId) -> Result<(), SlotError> {
        self.slot.send(SessionMsg::CancelRequest(id, request)).await
    }

    async fn touch_with(
        &self,
        id: SessionId,
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
                    reply,
                },
                CALL_TIMEOUT,
            )
            .await?
    }

    /// Ends a session (DELETE): forgets its events and closes its streams.
    pub async fn terminate(&self, id: SessionId) -> Result<(), SessionError> {
        self.slot
            .call(|reply| SessionMsg::Terminate(id, reply), CALL_TIMEOUT)
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
