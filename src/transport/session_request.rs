//! What serving a session-era request needs whether it is answered as JSON
//! ([`super::post`]) or on a stream of its own ([`super::streamed`]): who sent it, and the
//! change to session state it makes.

use std::net::IpAddr;
use std::sync::Arc;

use super::rejection::Rejection;
use super::{AppState, session_rejection};
use crate::auth::{Owner, Principal};
use crate::server::Call;
use crate::session::SessionId;

/// Who sent a session-era request: its address (for `server.max_sessions_per_client`)
/// and its principal (`[auth]`) with what its sessions are bound to.
pub(super) struct Caller {
    pub(super) client: Option<IpAddr>,
    pub(super) principal: Option<Arc<Principal>>,
    pub(super) owner: Option<Owner>,
}

/// Applies the change to session state `call` makes, once the request is accepted (its
/// hold taken), before its handler runs.
pub(super) async fn apply_session_effects(
    state: &AppState,
    session: SessionId,
    call: &Call,
) -> Result<(), Rejection> {
    let Some(effect) = call.effect() else {
        return Ok(());
    };
    state
        .inner
        .sessions
        .apply(session, effect.clone())
        .await
        .map_err(session_rejection)
}
