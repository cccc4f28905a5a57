//! Changes to a session that every replica holding a copy must hear of: resource
//! subscriptions, the log level, cancellations and DELETE. Each is applied to the local
//! table first, then shared through the directory (Redis) and broadcast as
//! [`SessionNews`]; without Redis the sharing does nothing.

use std::time::Instant;

use super::manager_state::{SessionManagerState, forget};
use super::replicas::ensure_local;
use super::{Directory, SessionError, SessionId, SessionNews};
use crate::protocol::RequestId;
use crate::protocol::methods::LoggingLevel;

pub(super) async fn subscription(
    state: &mut SessionManagerState,
    id: SessionId,
    uri: String,
    on: bool,
) -> Result<(), SessionError> {
    if on {
        state.table.subscribe(id, &uri)?;
    } else {
        state.table.unsubscribe(id, &uri)?;
    }
    if let Err(e) = state
        .directory
        .subscription(id, &uri, on, state.session_timeout)
        .await
    {
        tracing::warn!(session_id = %id, error = %e, "could not share a subscription");
    }
    let news = SessionNews::SessionChanged {
        origin: state.directory.replica(),
        session: id,
        log_level: None,
        subscribed: on.then(|| uri.clone()),
        unsubscribed: (!on).then_some(uri),
    };
    share_change(&state.directory, id, &news).await;
    Ok(())
}

pub(super) async fn set_log_level(
    state: &mut SessionManagerState,
    id: SessionId,
    level: LoggingLevel,
) -> Result<(), SessionError> {
    let record = state.table.get_mut(id).ok_or(SessionError::NotFound)?;
    record.log_level.set(level);
    let value = serde_json::to_string(&level).unwrap_or_default();
    if let Err(e) = state.directory.set_field(id, "log_level", value).await {
        tracing::warn!(session_id = %id, error = %e, "could not share a session change");
    }
    let news = SessionNews::SessionChanged {
        origin: state.directory.replica(),
        session: id,
        log_level: Some(level),
        subscribed: None,
        unsubscribed: None,
    };
    share_change(&state.directory, id, &news).await;
    Ok(())
}

pub(super) async fn cancel_request(
    state: &mut SessionManagerState,
    id: SessionId,
    request: RequestId,
) {
    if state.table.cancel_request(id, &request) {
        tracing::info!(session_id = %id, request_id = %request, "request cancelled by the client");
    } else if state.directory.is_shared() {
        // Perhaps running on another replica.
        let news = SessionNews::Cancel {
            origin: state.directory.replica(),
            session: id,
            request,
        };
        if let Err(e) = state.directory.broadcast(&news).await {
            tracing::warn!(session_id = %id, error = %e, "could not pass a cancellation to the other replicas");
        }
    }
}

pub(super) async fn terminate(
    state: &mut SessionManagerState,
    id: SessionId,
    now: Instant,
) -> Result<(), SessionError> {
    let found = match ensure_local(state, id, now).await {
        Ok(()) => state.table.get(id).is_some(),
        Err(SessionError::Shared) => return Err(SessionError::Shared),
        Err(_) => false,
    };
    // With Redis away the shared session cannot be ended: say so (503) rather than answer
    // 200 while any replica would go on serving it.
    if found && let Err(e) = state.directory.drop_subscriptions(id).await {
        tracing::warn!(session_id = %id, error = %e, "could not end a shared session");
        return Err(SessionError::Shared);
    }
    if !(found && state.table.remove(id)) {
        return Err(SessionError::NotFound);
    }
    forget(&state.store, id).await;
    // The other replicas are told without the manager waiting: they drop their copies
    // when they hear, and a DELETE needs no answer from them.
    if state.directory.is_shared() {
        let directory = state.directory.clone();
        let tell = async move {
            let news = SessionNews::SessionEnded { session: id };
            if let Err(e) = directory.broadcast(&news).await {
                tracing::warn!(session_id = %id, error = %e, "could not tell the other replicas that a session ended; they find out when it expires");
            }
        };
        tokio::spawn(tracing::Instrument::in_current_span(tell));
    }
    Ok(())
}

async fn share_change(directory: &Directory, id: SessionId, news: &SessionNews) {
    if let Err(e) = directory.broadcast(news).await {
        tracing::warn!(session_id = %id, error = %e, "could not tell the other replicas of a session change");
    }
}
