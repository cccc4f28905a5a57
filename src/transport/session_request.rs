//! What serving a session-era request needs whether it is answered as JSON
//! ([`super::post`]) or on a stream of its own ([`super::streamed`]): who sent it, and the
//! changes to session state it makes.

use std::net::IpAddr;
use std::sync::Arc;

use super::rejection::Rejection;
use super::{AppState, session_rejection};
use crate::auth::{Owner, Principal};
use crate::protocol::Request;
use crate::server::SessionEffect;
use crate::session::SessionId;

/// Who sent a session-era request: its address (for `server.max_sessions_per_client`)
/// and its principal (`[auth]`) with what its sessions are bound to.
pub(super) struct Caller {
    pub(super) client: Option<IpAddr>,
    pub(super) principal: Option<Arc<Principal>>,
    pub(super) owner: Option<Owner>,
}

/// Applies the change to session state `request` makes (`logging/setLevel`,
/// `resources/subscribe` and `unsubscribe`, as the server says: [`SessionEffect`]): once
/// the request is accepted (its hold taken), before its handler runs.
pub(super) async fn apply_session_effects(
    state: &AppState,
    session: SessionId,
    request: &Request,
) -> Result<(), Rejection> {
    let sessions = &state.inner.sessions;
    let applied = match state.inner.server.session_effect(request) {
        Some(SessionEffect::LogLevel(level)) => sessions.set_log_level(session, level).await,
        Some(SessionEffect::Subscribe(uri)) => sessions.set_subscription(session, uri, true).await,
        Some(SessionEffect::Unsubscribe(uri)) => {
            sessions.set_subscription(session, uri, false).await
        }
        None => return Ok(()),
    };
    applied.map_err(session_rejection)
}
