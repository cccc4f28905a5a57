//! `subscriptions/listen` (2026-07-28): one long-lived SSE stream per listen request. It
//! opens with the acknowledgement naming what the server will send of what was asked,
//! then carries each change the request asked for, tagged with the request's id, from
//! this replica or (through the cluster) any other; comments keep it alive. When the
//! server shuts down it ends with the request's result; when the listener falls too far
//! behind it ends without one, and the client listens again.

use crate::telemetry::metrics::{STREAMS_OPEN, StreamKind, Tracked};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use tokio::sync::broadcast;
use tokio::time::Interval;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{AppState, error_response};
use crate::auth::Principal;
use crate::handler::BoxFuture;
use crate::protocol::meta::RequestMeta;
use crate::protocol::{ErrorObject, Request};
use crate::server::Listen;
use crate::server_news::Heard;
use crate::stream::sse;

/// Serves `subscriptions/listen`.
pub(super) fn serve(
    state: &AppState,
    request: Request,
    meta: RequestMeta,
    principal: Option<&Principal>,
) -> Response {
    let inner = &state.inner;
    let mut listen = match inner.server.listen(&request, &meta, principal) {
        Ok(listen) => listen,
        Err(error) => return super::refused(request.id, error),
    };
    let Some(counted) = Counted::admit(
        &inner.listening,
        inner.config.stateless.max_listen_streams.get(),
    ) else {
        let error = ErrorObject::internal(
            "too many listen streams are open on this server (stateless.max_listen_streams); try again later",
        );
        return error_response(Some(request.id), error, StatusCode::SERVICE_UNAVAILABLE);
    };
    let ack = sse::message(None, &listen.acknowledgement());
    let ticks = super::keepalive(inner.config.sse.keepalive_interval.get());
    let listening = Listening {
        pending: Some(ack),
        next: listen.take_news().map(recv),
        listen,
        shutdown: Box::pin(inner.shutdown.clone().cancelled_owned()),
        keepalive: ticks,
        done: false,
        _counted: counted,
        _open: STREAMS_OPEN.track(StreamKind::Listen),
    };
    super::super::sse_response(Body::new(listening))
}

type Recv = BoxFuture<
    'static,
    (
        Result<Heard, broadcast::error::RecvError>,
        broadcast::Receiver<Heard>,
    ),
>;

fn recv(mut rx: broadcast::Receiver<Heard>) -> Recv {
    Box::pin(async move { (rx.recv().await, rx) })
}

struct Listening {
    /// A frame to send before anything else (the acknowledgement).
    pending: Option<Bytes>,
    next: Option<Recv>,
    listen: Listen,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    keepalive: Interval,
    done: bool,
    _counted: Counted,
    /// Counts in `otpmcp_streams_open`.
    _open: Tracked,
}

/// One open listen stream, counted while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more stream, unless `max` are open.
    fn admit(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let before = open.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(open.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Listening {
    /// The listen request's result: the graceful end.
    fn result(&self) -> Bytes {
        sse::message(None, &self.listen.result().to_bytes())
    }
}

impl http_body::Body for Listening {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.pending.take() {
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.done = true;
            return Poll::Ready(Some(Ok(Frame::data(this.result()))));
        }
        while let Some(next) = this.next.as_mut() {
            let Poll::Ready((heard, rx)) = next.as_mut().poll(cx) else {
                break;
            };
            this.next = Some(recv(rx));
            match heard {
                Ok(heard) => {
                    if let Some(message) = this.listen.message(&heard.news) {
                        return Poll::Ready(Some(Ok(Frame::data(sse::message(None, &message)))));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Changes were lost: end without a result, so the client listens
                    // again and re-reads what it cares about.
                    tracing::info!(missed, "a listen stream fell behind; closing it");
                    return Poll::Ready(None);
                }
                Err(broadcast::error::RecvError::Closed) => {
                    this.done = true;
                    return Poll::Ready(Some(Ok(Frame::data(this.result()))));
                }
            }
        }
        if this.keepalive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Frame::data(sse::comment("keepalive")))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
