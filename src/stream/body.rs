//! The HTTP body of an SSE response: the reading end of the stream actor's bounded buffer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use ractor::ActorRef;
use tokio::sync::mpsc;

use super::StreamMsg;

/// Yields the frames the stream actor queued; ends when the actor drops its sender.
/// Dropped by hyper when the client goes away, which tells the actor at once instead of at
/// its next write.
#[derive(Debug)]
pub struct SseBody {
    rx: mpsc::Receiver<Bytes>,
    actor: Option<ActorRef<StreamMsg>>,
}

impl SseBody {
    /// A body reading `rx`, reporting its drop to `actor`.
    pub fn new(rx: mpsc::Receiver<Bytes>, actor: ActorRef<StreamMsg>) -> Self {
        Self {
            rx,
            actor: Some(actor),
        }
    }

    /// A body reading `rx` that tells nobody when it is dropped (its sender notices).
    pub fn detached(rx: mpsc::Receiver<Bytes>) -> Self {
        Self { rx, actor: None }
    }
}

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.rx
            .poll_recv(cx)
            .map(|frame| frame.map(|b| Ok(Frame::data(b))))
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        if let Some(actor) = self.actor.take() {
            // Fails harmlessly when the actor already stopped (stream completed).
            let _ = actor.send_message(StreamMsg::ClientGone);
        }
    }
}
