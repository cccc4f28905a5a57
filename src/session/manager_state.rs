//! The running state of the session manager, and what its message handlers in the
//! sibling files share: kept apart from the actor so that those files need not import it.

use std::time::Duration;

use super::{Directory, SessionId, SessionTable};
use crate::event_store::EventStoreHandle;
use crate::rt::heir::Lent;

/// Running state of the session manager.
#[derive(Debug)]
pub struct SessionManagerState {
    pub(super) table: Lent<SessionTable>,
    pub(super) store: EventStoreHandle,
    pub(super) session_timeout: Duration,
    pub(super) max_sessions: usize,
    pub(super) max_open_per_session: u32,
    pub(super) max_sessions_per_client: u32,
    pub(super) max_sessions_per_principal: u32,
    pub(super) root_cancel: tokio_util::sync::CancellationToken,
    pub(super) sweeper: tokio::task::JoinHandle<()>,
    pub(super) directory: Directory,
}

/// Tells the store to forget an ended session (and close its connections).
pub(super) async fn forget(store: &EventStoreHandle, id: SessionId) {
    if let Err(e) = store.forget_session(id).await {
        tracing::error!(session_id = %id, error = %e, "could not tell the event store to forget a session");
    }
}
