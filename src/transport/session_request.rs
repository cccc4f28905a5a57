//! What serving a session-era request needs whether it is answered as JSON
//! ([`super::post`]) or on a stream of its own ([`super::streamed`]): who sent it, and the
//! changes to session state it makes.

use std::net::IpAddr;
use std::sync::Arc;

use super::rejection::Rejection;
use super::{AppState, session_rejection};
use crate::auth::{Owner, Principal};
use crate::protocol::Request;
use crate::protocol::methods::Method;
use crate::server::McpServer;
use crate::session::SessionId;

/// Who sent a session-era request: its address (for `server.max_sessions_per_client`)
/// and its principal (`[auth]`) with what its sessions are bound to.
pub(super) struct Caller {
    pub(super) client: Option<IpAddr>,
    pub(super) principal: Option<Arc<Principal>>,
    pub(super) owner: Option<Owner>,
}

/// Requests that change session state, which the transport owns (`logging/setLevel`,
/// `resources/subscribe` and `unsubscribe`): applied once the request is accepted (its
/// hold taken), before its handler runs, and only when the server will answer it with
/// success; the server then only answers.
pub(super) async fn apply_session_effects(
    state: &AppState,
    session: SessionId,
    request: &Request,
) -> Result<(), Rejection> {
    let inner = &state.inner;
    let uri = || request.uri();
    match request.kind {
        Method::SetLevel => {
            if let Ok(level) = McpServer::set_level_params(request.params.as_ref()) {
                inner
                    .sessions
                    .set_log_level(session, level)
                    .await
                    .map_err(session_rejection)?;
            }
        }
        Method::ResourcesSubscribe => {
            if let Some(uri) = uri().filter(|u| inner.server.accepts_subscription(u)) {
                inner
                    .sessions
                    .set_subscription(session, uri.to_owned(), true)
                    .await
                    .map_err(session_rejection)?;
            }
        }
        Method::ResourcesUnsubscribe => {
            if let Some(uri) = uri() {
                inner
                    .sessions
                    .set_subscription(session, uri.to_owned(), false)
                    .await
                    .map_err(session_rejection)?;
            }
        }
        _ => {}
    }
    Ok(())
}
