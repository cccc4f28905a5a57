//! The session manager's side of sessions shared by replicas (Redis): loading a session
//! another replica created, renewing one that is in use, reserving blocks of stream
//! numbers, and dropping a session that ended elsewhere. Without Redis these do nothing.

use std::time::Instant;

use super::manager_state::{SessionManagerState, forget};
use super::{SessionError, SessionId, directory};
use crate::auth::Owner;

/// [`ensure_local`], then refuses a caller other than the session's owner as if the
/// session did not exist (404), so ids cannot be probed across principals.
pub(super) async fn ensure_caller(
    state: &mut SessionManagerState,
    id: SessionId,
    caller: Option<Owner>,
    now: Instant,
) -> Result<(), SessionError> {
    ensure_local(state, id, now).await?;
    match state.table.get(id) {
        Some(record) if record.init.owner == caller => Ok(()),
        Some(_) => {
            tracing::info!(session_id = %id, "a request for a session of another principal was refused as unknown");
            Err(SessionError::NotFound)
        }
        None => Err(SessionError::NotFound),
    }
}

/// Makes sure `id` is in the local table: a session another replica created is read from
/// the shared directory; a shared one not renewed for a while is renewed (and found gone
/// if it ended elsewhere).
pub(super) async fn ensure_local(
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
pub(super) async fn reserve_block(
    state: &mut SessionManagerState,
    id: SessionId,
) -> Result<(), SessionError> {
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

/// Drops a session that ended elsewhere: its requests here stop, its connections here
/// close.
pub(super) async fn end_locally(state: &mut SessionManagerState, id: SessionId) {
    state.table.remove(id);
    forget(&state.store, id).await;
}
