//! A call another replica handed on at its shutdown, run again here from its start on
//! the same stream. The client, reading or resuming on any replica, sees what the first
//! run stored, a log note that the call restarted, then the whole new run and its result.
//! The new run is a request of this replica like any other: registered in its lease
//! table (so its own shutdown hands it on again), held on its session, and waited for by
//! its drain.

use std::sync::Arc;

use serde_json::Value;
use tracing::Instrument;

use super::AppState;
use super::outbox::StreamReady;
use super::streamed::{Ended, cancellable, see_through, stream_outbox};
use crate::auth::HandedPrincipal;
use crate::ids::StreamKey;
use crate::protocol::RequestId;
use crate::protocol::methods::LoggingLevel;
use crate::server::{HANDED_ON_NOTE, Handover};

/// Starts the call on `key` (request `id`) again from `handover`; false if it cannot run
/// here (this replica is stopping, or the call's session ended).
pub(super) async fn run_again(
    state: AppState,
    key: StreamKey,
    id: RequestId,
    handover: Handover,
) -> bool {
    if state.is_closing() {
        return false;
    }
    let inner = &state.inner;
    // The token was checked when the call first came; a run again is a new run, and a
    // token past its `exp` runs nothing. The client gets the handover's retryable error:
    // its retry is a new request, whose expired token gets the 401 its OAuth client acts
    // on (a refresh), where an error of ours inside the stream would name nothing to do.
    let leeway = inner.config.auth.leeway.as_secs();
    if let Some(principal) = &handover.principal
        && principal.expired(crate::auth::unix_now(), leeway)
    {
        tracing::info!(stream = ?key, "a handed-on call's token has expired; it is not run again");
        return false;
    }
    let owner = handover.principal.as_ref().map(HandedPrincipal::owner);
    let held = inner
        .sessions
        .hold(key.session, owner, false, Some(id.clone()))
        .await;
    let (touched, hold) = match held {
        Ok(held) => held,
        Err(e) => {
            tracing::debug!(stream = ?key, error = %e, "a handed-on call's session is gone");
            return false;
        }
    };
    let mut ended = Ended::new(key, hold, inner.running.start());
    ended
        .begin(inner.inflight.clone(), &id, Some(&handover))
        .await;
    // Nothing to wait for: the stream's clients follow it already, or resume it.
    let ready = StreamReady::default();
    let _ = ready.set(());
    let outbox = stream_outbox(&state, key, touched.protocol_version, ready);
    let call = inner.server.call(handover.request(id));
    let ctx = call
        .context(Some(outbox.clone()))
        .with_session(key.session)
        .with_principal(handover.principal.map(|p| Arc::new(p.into_principal())))
        .with_log_level(touched.log_level)
        .with_client_capabilities(touched.client_capabilities);
    if let Err(e) = ctx
        .log(
            LoggingLevel::Warning,
            Some("otpmcp"),
            Value::from(HANDED_ON_NOTE),
        )
        .await
    {
        tracing::debug!(error = %e, "the note of a handed-on call was not stored");
    }
    let work = cancellable(call, ctx, touched.cancel, None);
    let span = tracing::info_span!("transport.handed_on_call", mcp.session.id = %key.session, stream = key.stream.0);
    tokio::spawn(see_through(state.clone(), work, outbox, ended).instrument(span));
    true
}
