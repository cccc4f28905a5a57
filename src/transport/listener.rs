//! The HTTP listener actor: runs axum on the socket the supervisor bound (and keeps, so a
//! restart reuses the same port), and parents the stream actors. Stream actors are
//! temporary: their exits are expected and never restart anything.

/// How long connections get to end once their streams were closed, past the drain.
const STREAMS_CLOSE_GRACE: std::time::Duration = std::time::Duration::from_millis(500);

use crate::telemetry::metrics::{ActorName, MAILBOX_DEPTH};
use std::net::Shutdown;
use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tracing::Instrument;

use super::{AppState, router};
use crate::config::Config;
use crate::event_store::EventStoreHandle;
use crate::ids::StreamKey;
use crate::protocol::RequestId;
use crate::rt::slot::Slot;
use crate::server::{Handover, McpServer};
use crate::session::SessionHandle;

/// Messages of the listener actor.
#[derive(Debug)]
pub enum ListenerMsg {
    /// The accept loop ended on its own (an I/O error): fail so the supervisor restarts us.
    ServeEnded(String),
    /// Stop accepting, close every open stream with a retry hint, and wait (up to
    /// `shutdown_timeout`) for connections to finish.
    Shutdown(RpcReplyPort<()>),
    /// Run again here a call another replica handed on at its shutdown; answers whether
    /// it runs.
    RunAgain {
        key: StreamKey,
        id: RequestId,
        handover: Box<Handover>,
        reply: RpcReplyPort<bool>,
    },
    /// Fault injection for supervision tests.
    InjectPanic,
}

/// How long the lease keeper waits for the listener to take a handed-on call.
const RUN_AGAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The listener's side of handovers: the calls a replica left behind at its shutdown
/// are run again by this replica's listener (which owns what a request needs to run).
#[derive(Debug, Clone)]
pub struct Handovers {
    listener: Slot<ListenerMsg>,
}

impl Handovers {
    /// Handovers run by the listener behind `listener`.
    pub fn new(listener: Slot<ListenerMsg>) -> Self {
        Self { listener }
    }

    /// Runs the call on `key` (request `id`) again from its start, on the same stream.
    /// False if it cannot run here: its session ended, this replica is stopping, or the
    /// listener is not running.
    pub async fn take(&self, key: StreamKey, id: RequestId, handover: Handover) -> bool {
        // Sent once, not as a call that a dropped answer repeats: the call must not run
        // twice.
        let handover = Box::new(handover);
        let asked = self.listener.request(|reply| ListenerMsg::RunAgain {
            key,
            id,
            handover,
            reply,
        });
        let Ok(answer) = asked.await else {
            return false;
        };
        matches!(
            tokio::time::timeout(RUN_AGAIN_TIMEOUT, answer).await,
            Ok(Ok(true))
        )
    }
}

/// Start-up arguments.
#[derive(Debug)]
pub struct ListenerArgs {
    /// The bound socket (a clone of the supervisor's).
    pub socket: std::net::TcpListener,
    /// Configuration.
    pub config: Arc<Config>,
    /// Session manager handle.
    pub sessions: SessionHandle,
    /// Store handle.
    pub store: EventStoreHandle,
    /// The MCP server.
    pub server: Arc<McpServer>,
    /// `[auth]`'s token checks, when enabled.
    pub gate: Option<Arc<crate::auth::Gate>>,
    /// This actor's own slot, so handlers parent streams on the current incarnation.
    pub me: Slot<ListenerMsg>,
    /// Where running requests are registered (Redis only).
    pub inflight: Option<Arc<dyn super::InFlight>>,
}

/// Running state.
#[derive(Debug)]
pub struct ListenerState {
    app: AppState,
    /// The listening socket (another handle on the supervisor's), to refuse connections
    /// once the drain begins.
    socket: std::net::TcpListener,
    stop_accepting: Option<oneshot::Sender<()>>,
    serve: AbortOnDrop,
    shutdown_timeout: Duration,
}

/// Aborts the accept loop if the actor's state is dropped (crash), so a restarted listener
/// never shares the socket with a stale loop.
#[derive(Debug)]
struct AbortOnDrop(Option<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.0.take() {
            task.abort();
        }
    }
}

/// The listener actor.
#[derive(Debug, Default)]
pub struct HttpListener;

impl Actor for HttpListener {
    type Msg = ListenerMsg;
    type State = ListenerState;
    type Arguments = ListenerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ListenerMsg>,
        args: ListenerArgs,
    ) -> Result<ListenerState, ActorProcessingErr> {
        args.socket.set_nonblocking(true)?;
        let socket = args.socket.try_clone()?;
        let listener = tokio::net::TcpListener::from_std(args.socket)?;
        let local = listener.local_addr().ok();
        let limits = crate::net::Limits::from_config(&args.config.server);
        let proxies = std::sync::Arc::new(crate::net::Proxies::from_config(&args.config.server));
        let shutdown_timeout = args.config.server.shutdown_timeout;
        let state = AppState::new(super::Parts {
            config: args.config,
            sessions: args.sessions,
            store: args.store,
            server: args.server,
            listener: args.me,
            inflight: args.inflight,
            gate: args.gate,
            local,
        });
        let app = router(state.clone());
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let me = myself.clone();
        let task = tokio::spawn(async move {
            crate::net::serve(listener, app, limits, proxies, stop_rx).await;
            // Only heard if we did not ask for it (the actor is gone after a shutdown).
            let _ = me.send_message(ListenerMsg::ServeEnded("accept loop finished".to_owned()));
        });
        Ok(ListenerState {
            app: state,
            socket,
            stop_accepting: Some(stop_tx),
            serve: AbortOnDrop(Some(task)),
            shutdown_timeout,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ListenerMsg>,
        msg: ListenerMsg,
        state: &mut ListenerState,
    ) -> Result<(), ActorProcessingErr> {
        let name = match &msg {
            ListenerMsg::ServeEnded(_) => "serve_ended",
            ListenerMsg::Shutdown(_) => "shutdown",
            ListenerMsg::RunAgain { .. } => "run_again",
            ListenerMsg::InjectPanic => "inject_panic",
        };
        // Counted in by the slot; its own serve task's report never was.
        if !matches!(msg, ListenerMsg::ServeEnded(_)) {
            MAILBOX_DEPTH.get(ActorName::HttpListener).dec_to_zero();
        }
        let span = tracing::debug_span!("http_listener.handle", msg = name);
        handle(myself, msg, state).instrument(span).await
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<ListenerMsg>,
        event: SupervisionEvent,
        _state: &mut ListenerState,
    ) -> Result<(), ActorProcessingErr> {
        // Stream actors are temporary children: their exits (normal or not) are expected,
        // already logged by the stream, and the client resumes on its own. ractor's
        // default would stop this listener on a child failure.
        if let SupervisionEvent::ActorFailed(cell, err) = event {
            tracing::warn!(actor = %cell.get_id(), error = %err, "stream actor failed");
        }
        Ok(())
    }
}

async fn handle(
    myself: ActorRef<ListenerMsg>,
    msg: ListenerMsg,
    state: &mut ListenerState,
) -> Result<(), ActorProcessingErr> {
    {
        match msg {
            ListenerMsg::ServeEnded(why) => {
                if state.stop_accepting.is_some() {
                    return Err(why.into());
                }
            }
            ListenerMsg::Shutdown(reply) => {
                // The drain: no new requests or streams (503 with Retry-After), and the
                // running requests get until `shutdown_timeout` to finish, their streams
                // ending as usual. Then every stream still open is closed with the retry
                // hint, before anything is cancelled (the supervisor cancels what still
                // runs only after this), so no cancellation can end a stream first.
                let deadline = tokio::time::Instant::now() + state.shutdown_timeout;
                state.app.begin_closing();
                if let Some(stop) = state.stop_accepting.take() {
                    let _ = stop.send(());
                }
                // Stop listening, not only accepting: a connection the kernel took in the
                // backlog would wait unanswered, then be reset at exit, after a proxy
                // had sent its request there (nginx cannot send a POST again: 502).
                // Refused, it goes to another replica.
                if let Err(e) = socket2::SockRef::from(&state.socket).shutdown(Shutdown::Read) {
                    tracing::warn!(error = %e, "could not stop listening; new connections wait for the exit");
                }
                if tokio::time::timeout_at(deadline, state.app.requests_finished())
                    .await
                    .is_err()
                {
                    tracing::warn!(
                        "requests still running after shutdown_timeout; closing their streams"
                    );
                }
                for child in myself.get_children() {
                    crate::stream::close_for_shutdown(&child);
                }
                if let Some(task) = state.serve.0.take() {
                    let abort = task.abort_handle();
                    // Closed streams end their connections at once; a little grace for
                    // those past the deadline.
                    let until = deadline.max(tokio::time::Instant::now() + STREAMS_CLOSE_GRACE);
                    if tokio::time::timeout_at(until, task).await.is_err() {
                        // Connection tasks are axum's own; the stall timeout ends any that
                        // are stuck on a client that stopped reading.
                        tracing::warn!(
                            "connections still open after shutdown_timeout; no longer waiting"
                        );
                        abort.abort();
                    }
                }
                let _ = reply.send(());
                myself.stop(Some("shutdown".into()));
            }
            ListenerMsg::RunAgain {
                key,
                id,
                handover,
                reply,
            } => {
                // Its session and lease round trips must not hold up the mailbox.
                let app = state.app.clone();
                tokio::spawn(async move {
                    let runs = super::handover::run_again(app, key, id, *handover).await;
                    let _ = reply.send(runs);
                });
            }
            ListenerMsg::InjectPanic => panic!("fault injection: http listener"),
        }
        Ok(())
    }
}
