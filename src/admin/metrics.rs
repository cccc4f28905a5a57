//! `GET /metrics`: the Prometheus exposition, with the figures actors own asked of them
//! at scrape time (live sessions, store occupancy), each within [`super::PROBE_TIMEOUT`].

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::Probes;
use crate::telemetry::prometheus::{self, Owned, RedisFigures};

/// Serves the exposition.
pub(super) async fn metrics(State(probes): State<Probes>) -> Response {
    let owned = owned(&probes).await;
    let mut response = prometheus::render(&owned).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    response
}

/// Asks the owners; a figure whose owner does not answer in time is left out of this
/// scrape rather than reported wrong.
pub(super) async fn owned(probes: &Probes) -> Owned {
    let timeout = super::PROBE_TIMEOUT;
    let sessions = tokio::time::timeout(timeout, probes.sessions.overview(0));
    let store = tokio::time::timeout(timeout, probes.store.occupancy());
    let (sessions, store) = tokio::join!(sessions, store);
    let sse = &probes.config.sse;
    Owned {
        sessions_live: match sessions {
            Ok(Ok((live, _))) => Some(live as u64),
            _ => None,
        },
        sessions_limit: probes.config.server.max_sessions.get() as u64,
        store: match store {
            Ok(Ok(Some(o))) => Some((o.events, o.bytes)),
            _ => None,
        },
        session_events_limit: sse.max_session_events.get() as u64,
        session_bytes_limit: sse.max_session_bytes as u64,
        total_events_limit: sse.max_total_events.get() as u64,
        total_bytes_limit: sse.max_total_bytes.get() as u64,
        redis: probes.redis.as_ref().map(|link| RedisFigures {
            breaker_open: !link.breaker.allows(),
        }),
    }
}
