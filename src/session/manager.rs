//! The session manager actor: owns the session table (lent by the supervisor, so sessions
//! survive a crash of the actor) and answers the messages its handle builds.

use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use tokio::sync::oneshot;
use tracing::Instrument;

use super::admission::create;
use super::changes::{cancel_request, set_log_level, subscription, terminate};
use super::manager_state::{SessionManagerState, forget};
use super::replicas::{end_locally, ensure_caller};
use super::{
    ClientOutcome, Directory, NewSession, SessionError, SessionHold, SessionId, SessionInfo,
    SessionTable, Touched,
};
use crate::auth::Owner;
use crate::event_store::EventStoreHandle;
use crate::protocol::RequestId;
use crate::protocol::methods::{ListKind, LoggingLevel};
use crate::rt::heir::Lent;
use crate::telemetry::metrics;

/// Messages of the session manager. Built only by [`super::SessionHandle`] (and the
/// actor's own timer).
#[derive(Debug)]
pub enum SessionMsg {
    /// Create a session.
    Create(NewSession, RpcReplyPort<Result<SessionId, SessionError>>),
    /// Validate and touch a session.
    Touch {
        /// The session.
        id: SessionId,
        /// Take a hold: count an open request or stream until the hold is dropped.
        hold: bool,
        /// Allocate a POST stream number.
        new_stream: bool,
        /// The JSON-RPC request this hold serves, registered for `notifications/cancelled`.
        request: Option<RequestId>,
        /// The principal asking (`[auth]`); another principal's session is not found.
        caller: Option<Owner>,
        /// What the request needs to know, and the hold when one was asked for. A caller
        /// that gave up before the answer arrived drops the hold unread, which releases it.
        reply: RpcReplyPort<Result<(Touched, Option<SessionHold>), SessionError>>,
    },
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
    /// DELETE, by a principal (`[auth]`); another principal's session is not found.
    Terminate(
        SessionId,
        Option<Owner>,
        RpcReplyPort<Result<(), SessionError>>,
    ),
    /// Session info (without store positions).
    Info(SessionId, RpcReplyPort<Option<SessionInfo>>),
    /// How many sessions live here, and the `n` most recently active.
    Overview(usize, RpcReplyPort<(usize, Vec<SessionInfo>)>),
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
            Self::CancelRequest(..) => "cancel_request",
            Self::SetLogLevel(..) => "set_log_level",
            Self::Subscription(..) => "subscription",
            Self::Subscribers(..) => "subscribers",
            Self::Unsubscribed(..) => "unsubscribed",
            Self::Offered(..) => "offered",
            Self::Terminate(..) => "terminate",
            Self::Info(..) => "info",
            Self::Overview(..) => "overview",
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
    /// `server.max_sessions_per_client` (0: no cap).
    pub max_sessions_per_client: u32,
    /// `auth.max_sessions_per_principal` (0: no cap).
    pub max_sessions_per_principal: u32,
    /// Parent of every session's cancellation token; cancelled at shutdown.
    pub root_cancel: tokio_util::sync::CancellationToken,
    /// How often to look for idle sessions.
    pub sweep_interval: Duration,
    /// Where sessions are shared with other replicas, if anywhere.
    pub directory: Directory,
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
            max_sessions_per_client: args.max_sessions_per_client,
            max_sessions_per_principal: args.max_sessions_per_principal,
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
        // Counted in by the handle (its slot); the sweep timer's messages never were.
        if !matches!(msg, SessionMsg::Sweep) {
            metrics::MAILBOX_DEPTH
                .get(metrics::ActorName::SessionManager)
                .dec_to_zero();
        }
        let span = tracing::debug_span!("session_manager.handle", msg = msg.name());
        handle(msg, state).instrument(span).await;
        Ok(())
    }
}

async fn handle(msg: SessionMsg, state: &mut SessionManagerState) {
    let now = Instant::now();
    match msg {
        SessionMsg::Create(init, reply) => {
            let _ = reply.send(create(state, init, now).await);
        }
        SessionMsg::Touch {
            id,
            hold,
            new_stream,
            request,
            caller,
            reply,
        } => {
            // If the caller is gone, the unsent hold is dropped here and releases itself.
            let touched = touch(state, id, caller, (hold, new_stream), request, now).await;
            let _ = reply.send(touched);
        }
        SessionMsg::Subscription(id, uri, on, reply) => {
            let _ = reply.send(subscription(state, id, uri, on).await);
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
            let _ = reply.send(set_log_level(state, id, level).await);
        }
        SessionMsg::CancelRequest(id, request) => cancel_request(state, id, request).await,
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
                    // Capped where it was subscribed.
                    Some((uri, true)) => {
                        let _ = record.subscriptions.add(uri);
                    }
                    Some((uri, false)) => {
                        record.subscriptions.remove(&uri);
                    }
                    None => {}
                }
            }
        }
        SessionMsg::Terminate(id, caller, reply) => {
            let ended = match ensure_caller(state, id, caller, now).await {
                Ok(()) => terminate(state, id, now).await,
                Err(e) => Err(e),
            };
            if ended.is_ok() {
                tracing::debug!(session_id = %id, "session terminated by client");
                metrics::SESSIONS_DELETED.inc();
            }
            let _ = reply.send(ended);
        }
        SessionMsg::Info(id, reply) => {
            let info = state.table.get(id).map(|record| info_of(id, record));
            let _ = reply.send(info);
        }
        SessionMsg::Overview(n, reply) => {
            let mut all: Vec<_> = state.table.iter().collect();
            all.sort_by_key(|(_, record)| std::cmp::Reverse(record.last_seen));
            let recent = all
                .into_iter()
                .take(n)
                .map(|(id, record)| info_of(id, record))
                .collect();
            let _ = reply.send((state.table.len(), recent));
        }
        SessionMsg::OpenClientRequest(id, reply) => {
            let result = state
                .table
                .open_client_request(id, state.max_open_per_session)
                .map_err(SessionError::from);
            let _ = reply.send(result);
        }
        SessionMsg::ResolveClientRequest(id, request, outcome, reply) => {
            let _ = reply.send(resolve_client_request(state, id, request, outcome).await);
        }
        SessionMsg::Sweep => sweep(state, now).await,
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

fn info_of(id: SessionId, record: &super::record::SessionRecord) -> SessionInfo {
    SessionInfo {
        id,
        protocol_version: record.init.protocol_version,
        client_info: record.init.client_info.clone(),
        connected_at: record.connected_at,
        connected_for: record.started.elapsed(),
        idle_for: record.last_seen.elapsed(),
        open: record.holds.open(),
        last_event: Vec::new(),
    }
}

async fn touch(
    state: &mut SessionManagerState,
    id: SessionId,
    caller: Option<Owner>,
    (hold, new_stream): (bool, bool),
    request: Option<RequestId>,
    now: Instant,
) -> Result<(Touched, Option<SessionHold>), SessionError> {
    ensure_caller(state, id, caller, now).await?;
    let touch = state.table.touch(
        id,
        hold,
        new_stream,
        request.as_ref(),
        state.max_open_per_session,
        now,
    )?;
    let touched = Touched {
        protocol_version: touch.record.init.protocol_version,
        cancel: touch.cancel,
        stream: touch.stream,
        log_level: touch.record.log_level.clone(),
        client_capabilities: touch.record.init.client_capabilities.clone(),
    };
    Ok((touched, touch.hold))
}

async fn resolve_client_request(
    state: &mut SessionManagerState,
    id: SessionId,
    request: RequestId,
    outcome: ClientOutcome,
) -> bool {
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
    delivered
}

/// Expires idle sessions; with Redis, renews the sessions that have work open here.
async fn sweep(state: &mut SessionManagerState, now: Instant) {
    let shared = state.directory.is_shared();
    for id in state.table.expire(state.session_timeout, now) {
        if shared {
            // Idle here, perhaps not elsewhere: the shared copy expires by its own TTL,
            // which every replica using the session renews.
            tracing::debug!(session_id = %id, "session idle on this replica; dropped locally");
        } else {
            tracing::info!(session_id = %id, "session expired");
            metrics::SESSIONS_EXPIRED.inc();
            forget(&state.store, id).await;
        }
    }
    // The subscriber sets of what the sessions here subscribed to live as long as they.
    let uris = state.table.subscribed_uris();
    let kept = state
        .directory
        .keep_subscribers(&uris, state.session_timeout);
    if let Err(e) = kept.await {
        tracing::warn!(error = %e, "could not renew the shared subscriber sets");
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
