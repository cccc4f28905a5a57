//! The SSE body of a stateless reply that streams: each step of the server's
//! [`Streaming`] as SSE events, comments that keep the connection alive between them, the
//! answer as the last event, or a `retry:` hint for a stream cut short. Nothing is stored;
//! dropping the body (the client closed the stream) drops the reply and whatever runs in
//! it.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::time::Interval;

use crate::server::{Step, Streaming};
use crate::stream::sse;
use crate::telemetry::metrics::{STREAMS_OPEN, Tracked};

/// One message as an SSE event (how the server frames a message for HTTP).
pub(super) fn frame(out: &mut Vec<u8>, message: &mut dyn FnMut(&mut Vec<u8>)) {
    sse::push_message(out, |data| message(data));
}

/// A stateless reply on its way out.
pub(super) struct Streamed {
    streaming: Streaming,
    every: Duration,
    /// Made when the body first waits.
    keepalive: Option<Interval>,
    /// `sse.retry_timeout`: the hint of a stream cut short.
    retry: Duration,
    done: bool,
    /// Counts in `otpmcp_streams_open`.
    _open: Tracked,
}

impl Streamed {
    pub(super) fn new(streaming: Streaming, keepalive: Duration, retry: Duration) -> Self {
        Self {
            _open: STREAMS_OPEN.track(streaming.kind()),
            streaming,
            every: keepalive,
            keepalive: None,
            retry,
            done: false,
        }
    }
}

impl Body for Streamed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        let bytes = match this.streaming.poll_step(cx) {
            // The reservation drops here: hyper holds the frame from now on.
            Poll::Ready(Some(Step::Frames(bytes, _held))) => bytes,
            Poll::Ready(Some(Step::Answer(answer))) => {
                this.done = true;
                sse::message(None, &answer.to_bytes())
            }
            Poll::Ready(Some(Step::Cut(_))) => {
                this.done = true;
                sse::retry(this.retry)
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => {
                let every = this.every;
                let keepalive = this.keepalive.get_or_insert_with(|| ticks(every));
                if keepalive.poll_tick(cx).is_pending() {
                    return Poll::Pending;
                }
                sse::comment("keepalive")
            }
        };
        Poll::Ready(Some(Ok(Frame::data(bytes))))
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

/// Ticks every `every`, first after one `every`: SSE comments that keep a stateless
/// stream's connection (and any proxy on its way) from idling out.
fn ticks(every: Duration) -> Interval {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks
}
