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
use crate::telemetry::metrics::{STREAMS_OPEN, StreamKind, Tracked};

/// A stateless request being answered.
pub(super) struct Answering {
    work: Option<BoxFuture<'static, Outgoing>>,
    notes: mpsc::Receiver<Bytes>,
    /// The answer, once the handler has given it (sent after the notes before it).
    answer: Option<Outgoing>,
    /// A note taken while deciding between JSON and a stream: sent first.
    first_note: Option<Bytes>,
    every: Duration,
    /// Made when the body first waits: most answers are JSON and never need one.
    keepalive: Option<Interval>,
    /// Counts in `otpmcp_streams_open` once the answer streams.
    open: Option<Tracked>,
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
            first_note: None,
            every: keepalive,
            keepalive: None,
            open: None,
        }
    }

    /// The body as a stream: counted as open until it ends or is dropped.
    pub(super) fn counted(mut self) -> Self {
        self.open = Some(STREAMS_OPEN.track(StreamKind::Stateless));
        self
    }

    /// Runs the handler here until it answers, sends a note, or `grace` passes. Its
    /// answer, if it came first (the common case: a JSON body, no stream); otherwise the
    /// body streams, the note first.
    pub(super) async fn answer_within(&mut self, grace: Duration) -> Option<Outgoing> {
        let work = self.work.as_mut()?;
        // Most handlers answer on the first poll: no timer for them.
        if let Poll::Ready(answer) =
            std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
        {
            return self.answered(answer);
        }
        tokio::select! {
            biased;
            answer = work.as_mut() => self.answered(answer),
            note = self.notes.recv() => {
                self.first_note = note;
                None
            }
            () = tokio::time::sleep(grace) => None,
        }
    }

    fn answered(&mut self, answer: Outgoing) -> Option<Outgoing> {
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
        if let Some(note) = this.first_note.take() {
            return Poll::Ready(Some(Ok(Frame::data(sse::message(None, &note)))));
        }
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
        self.work.is_none()
            && self.answer.is_none()
            && self.first_note.is_none()
            && self.notes.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
