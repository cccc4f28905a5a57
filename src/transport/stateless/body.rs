//! The response body of a stateless request that streams: the handler runs inside it,
//! its notes are sent as they come, then its answer, then the stream ends. Nothing is
//! stored; dropping the body (the client closed the stream) drops the handler.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::sync::mpsc;
use tokio::time::Interval;

use crate::handler::BoxFuture;
use crate::protocol::Outgoing;
use crate::stream::sse;

/// A stateless request being answered.
pub(super) struct Answering {
    work: Option<BoxFuture<'static, Outgoing>>,
    notes: mpsc::Receiver<Bytes>,
    /// The answer, once the handler has given it (sent after the notes before it).
    answer: Option<Outgoing>,
    every: Duration,
    /// Made when the body first waits: most answers are JSON and never need one.
    keepalive: Option<Interval>,
}

impl Answering {
    pub(super) fn new(
        work: BoxFuture<'static, Outgoing>,
        notes: mpsc::Receiver<Bytes>,
        keepalive: Duration,
    ) -> Self {
        Self {
            work: Some(work),
            notes,
            answer: None,
            every: keepalive,
            keepalive: None,
        }
    }

    /// Polls the handler once, here. Its answer, if it gave one without a note before it
    /// (the common case: a JSON body, no stream).
    pub(super) async fn try_at_once(&mut self) -> Option<Outgoing> {
        let work = self.work.as_mut()?;
        let ready = std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await;
        let Poll::Ready(answer) = ready else {
            return None;
        };
        self.work = None;
        if self.notes.is_empty() {
            Some(answer)
        } else {
            self.answer = Some(answer);
            None
        }
    }
}

impl Body for Answering {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        // Notes first: everything the handler sent before its answer precedes it.
        if let Poll::Ready(Some(note)) = this.notes.poll_recv(cx) {
            return Poll::Ready(Some(Ok(Frame::data(sse::message(None, &note)))));
        }
        if let Some(work) = &mut this.work
            && let Poll::Ready(answer) = work.as_mut().poll(cx)
        {
            this.work = None;
            this.answer = Some(answer);
        }
        if this.work.is_none() {
            // The handler is done: what it sent is queued; drain it, then answer.
            if let Ok(note) = this.notes.try_recv() {
                return Poll::Ready(Some(Ok(Frame::data(sse::message(None, &note)))));
            }
            return Poll::Ready(
                this.answer
                    .take()
                    .map(|answer| Ok(Frame::data(sse::message(None, &answer.to_bytes())))),
            );
        }
        let every = this.every;
        let keepalive = this
            .keepalive
            .get_or_insert_with(|| super::keepalive(every));
        if keepalive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Frame::data(sse::comment("keepalive")))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.work.is_none() && self.answer.is_none() && self.notes.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
