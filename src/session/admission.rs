//! Admission: a new session under the caps (`server.max_sessions`, and per party
//! `server.max_sessions_per_client` and `auth.max_sessions_per_principal`), making room by
//! ending an idle session rather than refusing, and registering it with the store and the
//! other replicas.

use std::time::Instant;

use super::changes::terminate;
use super::manager_state::SessionManagerState;
use super::party::Party;
use super::{NewSession, SessionError, SessionId};
use crate::telemetry::metrics;

/// At a cap, ends the least recently used idle session (nothing running, no stream open)
/// so that a new client is served: a client that never sends DELETE must not lock others
/// out. Its client gets 404 on its next request and initializes again, as the spec says.
/// `full` only when every session is busy.
///
/// With `party`, the cap is that address's (`max_sessions_per_client`) or principal's
/// (`max_sessions_per_principal`) and only its own sessions are candidates: one client
/// looping on `initialize` churns its own sessions, never another client's.
async fn make_room(
    state: &mut SessionManagerState,
    party: Option<Party>,
    full: SessionError,
    now: Instant,
) -> Result<(), SessionError> {
    let Some(victim) = state.table.least_recently_used_idle(party) else {
        return Err(full);
    };
    match terminate(state, victim, now).await {
        Ok(()) => {
            let cap = match party {
                Some(Party::Address(_)) => "max_sessions_per_client",
                Some(Party::Principal(_)) => "max_sessions_per_principal",
                None => "max_sessions",
            };
            tracing::info!(session_id = %victim, cap, "a cap was reached: the least recently used idle session was ended");
            metrics::SESSIONS_EVICTED.inc();
            Ok(())
        }
        Err(SessionError::Shared) => Err(SessionError::Shared),
        Err(_) => Err(full),
    }
}

/// A new session: in the table, registered with the store, shared (with Redis) and given
/// its block of stream numbers; or nothing at all if any of that fails.
pub(super) async fn create(
    state: &mut SessionManagerState,
    init: NewSession,
    now: Instant,
) -> Result<SessionId, SessionError> {
    let capped = [
        (
            init.client.map(Party::Address),
            state.max_sessions_per_client,
            SessionError::ClientFull,
        ),
        (
            init.owner.map(Party::Principal),
            state.max_sessions_per_principal,
            SessionError::PrincipalFull,
        ),
    ];
    for (party, cap, full) in capped {
        if let Some(party) = party
            && cap > 0
            && state.table.sessions_of(party) >= cap
        {
            make_room(state, Some(party), full, now).await?;
        }
    }
    if state.table.len() >= state.max_sessions {
        make_room(state, None, SessionError::Full, now).await?;
    }
    let id = state
        .table
        .create(init, state.root_cancel.child_token(), now);
    let Some(record) = state.table.get(id) else {
        return Err(SessionError::NotFound);
    };
    // Registered with the store and shared with the other replicas at once: the two
    // write different fields of the session's hash, in either order.
    let (opened, shared) = tokio::join!(
        state.store.open_session(id),
        state
            .directory
            .share(id, &record.init, record.connected_at, state.session_timeout)
    );
    let saved = match (opened, shared) {
        (Err(e), _) => Err(SessionError::Unreachable(e)),
        (Ok(()), Err(e)) => {
            tracing::error!(session_id = %id, error = %e, "could not share the new session");
            Err(SessionError::Shared)
        }
        (Ok(()), Ok(block)) => Ok(block),
    };
    let saved = saved.map(|block| {
        if let Some((start, end)) = block {
            state.table.set_block(id, start, end);
        }
    });
    match saved {
        Ok(()) => {
            // Debug, not info: a line per session is noise at 10,000 sessions, and cost
            // about a tenth of a session's CPU (8,000 instructions per line).
            tracing::debug!(session_id = %id, "session created");
            metrics::SESSIONS_CREATED.inc();
            Ok(id)
        }
        Err(e) => {
            state.table.discard(id);
            Err(e)
        }
    }
}
