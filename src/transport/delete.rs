//! DELETE: the client ends its session.

use axum::Extension;
use axum::extract::RawQuery;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use tracing::Instrument;

use super::rejection::Rejection;
use super::serve::ClientAddr;
use super::{AppState, extract, reject};
use crate::session::SessionError;

/// Terminates the session: 200, or 404 if it is unknown.
pub(crate) async fn handle(
    State(state): State<AppState>,
    client: Option<Extension<ClientAddr>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let span = super::trace::http_span("DELETE", &headers);
    let client = client.map(|Extension(ClientAddr(addr))| addr);
    async move {
        match terminate(&state, query.as_deref(), &headers, client).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(r) => reject(r),
        }
    }
    .instrument(span)
    .await
}

async fn terminate(
    state: &AppState,
    query: Option<&str>,
    headers: &HeaderMap,
    client: Option<std::net::IpAddr>,
) -> Result<(), Rejection> {
    state.inner.guard.check(headers)?;
    let principal = state.authenticate(query, headers, client).await?;
    let id = extract::required_session_id(headers)?;
    tracing::Span::current().record("mcp.session.id", tracing::field::display(id));
    extract::protocol_version(headers)?;
    state
        .inner
        .sessions
        .terminate(id, principal.map(|p| p.owner()))
        .await
        .map_err(|e| match e {
            SessionError::Unreachable(e) => Rejection::Unavailable(e.to_string()),
            SessionError::Shared => Rejection::Unavailable(e.to_string()),
            _ => Rejection::UnknownSession,
        })
}
