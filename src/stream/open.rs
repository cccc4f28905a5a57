//! Opening a connection's stream: the pipe toward the HTTP body, the stream actor linked
//! to its parent (the listener), and the body that reads the pipe. The transport asks,
//! and maps an [`OpenError`] to its HTTP answer.

use crate::telemetry::metrics::StreamKind;

use ractor::{Actor, ActorCell, SpawnErr};

use super::{SseBody, StreamActor, StreamArgs, StreamSettings, StreamStartError};
use crate::event_store::{EventStoreHandle, StoreCallError, StoreError};
use crate::ids::StreamKey;
use crate::rt::slot::SlotError;
use crate::session::SessionHold;

/// How a stream is opened: where its replay starts, whether the store creates it, and
/// what it counts as.
#[derive(Debug, Clone, Copy)]
pub struct Opening {
    after: Option<u64>,
    create: bool,
    kind: StreamKind,
}

impl Opening {
    /// A new POST stream, from its start.
    pub fn new_post() -> Self {
        Self {
            after: Some(0),
            create: true,
            kind: StreamKind::Post,
        }
    }

    /// A POST stream whose events are stored already, from its start.
    pub fn stored_post() -> Self {
        Self {
            create: false,
            ..Self::new_post()
        }
    }

    /// A GET: live (the standalone stream, created if need be), or a resume after `after`.
    pub fn get(after: Option<u64>, create: bool) -> Self {
        let kind = if after.is_some() {
            StreamKind::Resume
        } else {
            StreamKind::Get
        };
        Self {
            after,
            create,
            kind,
        }
    }
}

/// Why a stream could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The store refused: an unknown stream, a position past its end, its backend failing.
    #[error(transparent)]
    Store(StoreError),
    /// The store actor could not be reached.
    #[error(transparent)]
    Unreachable(SlotError),
    /// The stream actor did not start, for another reason.
    #[error("could not start the stream: {0}")]
    Spawn(SpawnErr),
}

impl From<SpawnErr> for OpenError {
    fn from(err: SpawnErr) -> Self {
        match err {
            SpawnErr::StartupFailed(inner) => match inner.downcast::<StreamStartError>() {
                Ok(start) => match start.0 {
                    StoreCallError::Store(e) => Self::Store(e),
                    StoreCallError::Unreachable(e) => Self::Unreachable(e),
                },
                Err(inner) => Self::Spawn(SpawnErr::StartupFailed(inner)),
            },
            other => Self::Spawn(other),
        }
    }
}

/// A stream actor to open for one connection.
#[derive(Debug)]
pub struct Open {
    /// The actor's parent (the listener), which closes it at shutdown.
    pub parent: ActorCell,
    /// The stream to follow.
    pub key: StreamKey,
    /// Where it starts, and what it counts as.
    pub opening: Opening,
    /// `[sse]`'s settings; [`Open::spawn`] decides `priming` and `close_idle`.
    pub settings: StreamSettings,
    /// The client speaks 2025-11-25 or later: it expects the priming event, and polls
    /// back after an idle close.
    pub polls_back: bool,
    /// The pipe's bound in frames (`stream_buffer`); in bytes it is the settings'.
    pub frames: usize,
    /// The event store.
    pub store: EventStoreHandle,
    /// The `transport_sse.handle_stream` span.
    pub span: tracing::Span,
    /// Keeps the session from expiring while the connection is open.
    pub hold: Option<SessionHold>,
}

impl Open {
    /// Starts the stream actor and returns the body it feeds. `closing` is asked once the
    /// actor runs: shutdown closes the listener's children it can see, and an actor still
    /// starting then was not one of them, so it is closed here instead.
    pub async fn spawn(self, closing: impl FnOnce() -> bool) -> Result<SseBody, OpenError> {
        let Opening {
            after,
            create,
            kind,
        } = self.opening;
        let (tx, rx) = super::pipe(self.frames, self.settings.buffer_bytes);
        let args = StreamArgs {
            key: self.key,
            after,
            create,
            tx,
            store: self.store,
            settings: StreamSettings {
                priming: self.polls_back,
                // An older client's POST stream stays open: it would not poll back for
                // its response.
                close_idle: self.polls_back || self.key.stream.is_standalone(),
                ..self.settings
            },
            span: self.span,
            hold: self.hold,
            kind,
        };
        let (actor, _) = Actor::spawn_linked(None, StreamActor, args, self.parent).await?;
        if closing() {
            super::close_for_shutdown(&actor);
        }
        Ok(SseBody::new(rx, actor))
    }
}
