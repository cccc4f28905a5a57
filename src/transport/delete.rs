//! DELETE: the client ends its session.

use axum::extract::{FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::AppState;
use super::endpoint::{Session, Version, answer_in};
use super::rejection::Rejection;
use super::session_request::Caller;
use crate::session::SessionError;

/// Terminates the session: 200, or 404 if it is unknown.
pub(crate) async fn handle(State(state): State<AppState>, request: Request) -> Response {
    let (mut parts, _) = request.into_parts();
    let span = super::trace::http_span("DELETE", &parts.headers);
    answer_in(span, terminate(&state, &mut parts)).await
}

async fn terminate(state: &AppState, parts: &mut Parts) -> Result<Response, Rejection> {
    let caller = Caller::from_request_parts(parts, state).await?;
    let Session(id) = Session::from_request_parts(parts, state).await?;
    Version::from_request_parts(parts, state).await?;
    state
        .inner
        .sessions
        .terminate(id, caller.owner)
        .await
        .map_err(|e| match e {
            SessionError::Unreachable(e) => Rejection::Unavailable(e.to_string()),
            SessionError::Shared => Rejection::Unavailable(e.to_string()),
            _ => Rejection::UnknownSession,
        })?;
    Ok(StatusCode::OK.into_response())
}
