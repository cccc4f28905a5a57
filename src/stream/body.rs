//! The HTTP body of an SSE response: the reading end of a stream's bounded buffer.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Frame;
use ractor::ActorRef;
use tokio::sync::mpsc;

use super::StreamMsg;
use super::pipe::PipeRx;

/// Yields the frames queued for it; ends when the writer drops its end. Dropped by hyper
/// when the client goes away, which tells the stream actor at once instead of at its next
/// write.
#[derive(Debug)]
pub struct SseBody {
    source: Source,
    actor: Option<ActorRef<StreamMsg>>,
}

#[derive(Debug)]
enum Source {
    /// A stream actor's pipe, bounded in frames and bytes.
    Pipe(PipeRx),
    /// A plain channel, bounded in frames, whose writer waits for room.
    Channel(mpsc::Receiver<Bytes>),
}

impl SseBody {
    /// The body of a stream actor's connection: reports its drop, and room in the pipe
    /// when the actor waits for it, to `actor`.
    pub fn new(rx: PipeRx, actor: ActorRef<StreamMsg>) -> Self {
        Self {
            source: Source::Pipe(rx),
            actor: Some(actor),
        }
    }

    /// A body reading `rx` that tells nobody when it is dropped (its sender notices).
    pub fn detached(rx: mpsc::Receiver<Bytes>) -> Self {
        Self {
            source: Source::Channel(rx),
            actor: None,
        }
    }
}

impl http_body::Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = &mut *self;
        let frame = match &mut this.source {
            Source::Channel(rx) => rx.poll_recv(cx),
            Source::Pipe(rx) => rx.poll_recv(cx).map(|next| {
                next.map(|(frame, wake)| {
                    if wake && let Some(actor) = &this.actor {
                        // Fails harmlessly when the actor already stopped.
                        let _ = actor.send_message(StreamMsg::Drained);
                    }
                    frame
                })
            }),
        };
        frame.map(|frame| frame.map(|b| Ok(Frame::data(b))))
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
