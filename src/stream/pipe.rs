//! The bounded buffer between a stream actor and its HTTP body, counted in frames and in
//! bytes. One frame larger than the byte budget still passes when the buffer is empty, so
//! a large event is never stuck; otherwise a frame that does not fit is refused and the
//! actor waits for room, holding what is to come within its own budget (past that the
//! client is too slow: it is disconnected and resumes from the store).
//!
//! When the actor waits for room, the body tells it ([`StreamMsg::Drained`]) once half of
//! the byte budget is free again.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use tokio::sync::mpsc;

use super::sse::Framed;

/// The writing end, kept by the stream actor.
#[derive(Debug)]
pub struct PipeTx {
    tx: mpsc::Sender<Bytes>,
    room: Arc<Room>,
}

/// The reading end, polled by the HTTP body.
#[derive(Debug)]
pub struct PipeRx {
    rx: mpsc::Receiver<Bytes>,
    room: Arc<Room>,
}

#[derive(Debug)]
struct Room {
    /// Bytes queued and not yet taken by the body.
    queued: AtomicUsize,
    /// The byte budget.
    limit: usize,
    /// The actor waits to be told that there is room again.
    waiting: AtomicBool,
}

/// Why a frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipeError {
    /// Over the frame or byte budget.
    Full,
    /// The body is gone.
    Closed,
}

/// A pipe holding at most `frames` frames and `bytes` bytes. A frame whose payload is
/// shared takes three places (head, payload, tail), and always fits in an empty pipe.
pub fn pipe(frames: usize, bytes: usize) -> (PipeTx, PipeRx) {
    let (tx, rx) = mpsc::channel(frames.max(Framed::MOST_PARTS));
    let room = Arc::new(Room {
        queued: AtomicUsize::new(0),
        limit: bytes.max(1),
        waiting: AtomicBool::new(false),
    });
    (
        PipeTx {
            tx,
            room: room.clone(),
        },
        PipeRx { rx, room },
    )
}

impl PipeTx {
    /// Whether a frame of `len` bytes would be taken now.
    pub fn fits(&self, len: usize) -> bool {
        self.fits_parts(len, 1)
    }

    /// Whether `parts` buffers of `len` bytes in all would be taken now.
    pub fn fits_parts(&self, len: usize, parts: usize) -> bool {
        let queued = self.room.queued.load(Ordering::Acquire);
        (queued == 0 || queued.saturating_add(len) <= self.room.limit)
            && self.tx.capacity() >= parts
    }

    /// Queues a message frame whole, its shared payload included, or refuses it at once.
    pub fn try_send_framed(&self, framed: Framed) -> Result<(), PipeError> {
        let (head, data) = match framed {
            Framed::Whole(frame) => return self.try_send(frame),
            Framed::Around { head, data } => (head, data),
        };
        if self.tx.is_closed() {
            return Err(PipeError::Closed);
        }
        let tail = Bytes::from_static(Framed::TAIL);
        if !self.fits_parts(head.len() + data.len() + tail.len(), Framed::MOST_PARTS) {
            return Err(PipeError::Full);
        }
        // This actor is the only sender, so the room checked is still there.
        for part in [head, data, tail] {
            self.send_counted(part)?;
        }
        Ok(())
    }

    /// Queues `frame`, or refuses it at once.
    pub fn try_send(&self, frame: Bytes) -> Result<(), PipeError> {
        if self.tx.is_closed() {
            return Err(PipeError::Closed);
        }
        if !self.fits(frame.len()) {
            return Err(PipeError::Full);
        }
        self.send_counted(frame)
    }

    fn send_counted(&self, frame: Bytes) -> Result<(), PipeError> {
        let len = frame.len();
        // Counted before it can be taken, so the body never subtracts what was not added.
        self.room.queued.fetch_add(len, Ordering::AcqRel);
        self.tx.try_send(frame).map_err(|e| {
            self.room.queued.fetch_sub(len, Ordering::AcqRel);
            match e {
                mpsc::error::TrySendError::Full(_) => PipeError::Full,
                mpsc::error::TrySendError::Closed(_) => PipeError::Closed,
            }
        })
    }

    /// Asks the body to send [`super::StreamMsg::Drained`] when it takes a frame with
    /// half the byte budget free. Returns true instead when `parts` buffers of `len`
    /// bytes fit already, and then no message comes. (Checking `len`, not half the
    /// budget: a frame larger than half waits for an empty pipe, and a writer told "room"
    /// it cannot use would spin, starving the body on a single-threaded runtime.)
    pub fn wait_for_room(&self, len: usize, parts: usize) -> bool {
        self.room.waiting.store(true, Ordering::SeqCst);
        // The body may have emptied the pipe before it could see the flag: take the flag
        // back; if the body took it first, its message is on the way.
        self.fits_parts(len, parts) && self.room.waiting.swap(false, Ordering::SeqCst)
    }
}

impl PipeRx {
    /// Takes the next frame. Returns it with whether the writer waits for room and should
    /// be told that there is some now.
    pub(super) fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Bytes, bool)>> {
        Pin::new(&mut self.rx).poll_recv(cx).map(|frame| {
            frame.map(|frame| {
                let before = self.room.queued.fetch_sub(frame.len(), Ordering::SeqCst);
                let now = before.saturating_sub(frame.len());
                let wake = now <= self.room.limit / 2
                    && self.room.waiting.load(Ordering::SeqCst)
                    && self.room.waiting.swap(false, Ordering::SeqCst);
                (frame, wake)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(n: usize) -> Bytes {
        Bytes::from(vec![b'x'; n])
    }

    /// A frame around a shared payload of `data` bytes.
    fn around(head: usize, data: usize) -> Framed {
        Framed::Around {
            head: frame(head),
            data: frame(data),
        }
    }

    fn recv(rx: &mut PipeRx) -> Option<(Bytes, bool)> {
        let waker = std::task::Waker::noop();
        match rx.poll_recv(&mut Context::from_waker(waker)) {
            Poll::Ready(v) => v,
            Poll::Pending => None,
        }
    }

    #[test]
    fn the_byte_budget_refuses_what_does_not_fit_but_never_an_empty_pipe() {
        let (tx, mut rx) = pipe(16, 100);
        assert_eq!(tx.try_send(frame(60)), Ok(()));
        assert_eq!(tx.try_send(frame(60)), Err(PipeError::Full));
        assert_eq!(tx.try_send(frame(40)), Ok(()));
        assert!(recv(&mut rx).is_some());
        assert!(recv(&mut rx).is_some());
        assert_eq!(
            tx.try_send(frame(500)),
            Ok(()),
            "alone, a large frame passes"
        );
        assert_eq!(tx.try_send(frame(1)), Err(PipeError::Full));
    }

    #[test]
    fn a_waiting_writer_is_told_once_half_the_budget_is_free() {
        let (tx, mut rx) = pipe(16, 100);
        for _ in 0..4 {
            assert_eq!(tx.try_send(frame(25)), Ok(()));
        }
        assert!(!tx.wait_for_room(25, 1), "full: wait for the message");
        assert_eq!(
            recv(&mut rx).map(|(_, wake)| wake),
            Some(false),
            "75 queued"
        );
        assert_eq!(recv(&mut rx).map(|(_, wake)| wake), Some(true), "50 queued");
        assert_eq!(
            recv(&mut rx).map(|(_, wake)| wake),
            Some(false),
            "told once"
        );
        assert!(
            tx.wait_for_room(25, 1),
            "room already: no message will come"
        );
    }

    #[test]
    fn a_frame_larger_than_half_the_budget_waits_for_an_empty_pipe() {
        let (tx, mut rx) = pipe(16, 100);
        assert_eq!(tx.try_send(frame(10)), Ok(()));
        // 10 queued is under half the budget, but 95 more do not fit: no room yet.
        assert!(!tx.wait_for_room(95, 1), "wait for the message");
        assert_eq!(
            recv(&mut rx).map(|(_, wake)| wake),
            Some(true),
            "told once empty"
        );
        assert!(tx.wait_for_room(95, 1), "fits now");
    }

    #[test]
    fn a_framed_message_goes_whole_or_not_at_all() {
        let (tx, mut rx) = pipe(4, 100);
        let framed = around(10, 50);
        assert_eq!(tx.try_send_framed(framed.clone()), Ok(()));
        assert_eq!(tx.try_send(frame(1)), Ok(()), "a fourth frame fits");
        assert_eq!(tx.try_send_framed(framed), Err(PipeError::Full));
        let lens: Vec<usize> = std::iter::from_fn(|| recv(&mut rx).map(|(b, _)| b.len())).collect();
        assert_eq!(lens, vec![10, 50, 2, 1]);
    }

    #[test]
    fn a_shared_frame_fits_an_empty_pipe_of_one_frame() {
        let (tx, mut rx) = pipe(1, 100);
        let framed = around(10, 50);
        let (len, parts) = (framed.len(), framed.parts());
        assert!(tx.fits_parts(len, parts), "an empty pipe takes it");
        assert_eq!(tx.try_send_framed(framed), Ok(()));
        assert!(!tx.wait_for_room(len, parts), "full: wait for the message");
        let woken: Vec<bool> = std::iter::from_fn(|| recv(&mut rx).map(|(_, w)| w)).collect();
        assert_eq!(
            woken,
            vec![false, true, false],
            "told once half the budget is free"
        );
        assert!(tx.wait_for_room(len, parts), "empty again");
    }

    #[test]
    fn a_closed_body_is_reported() {
        let (tx, rx) = pipe(4, 100);
        drop(rx);
        assert_eq!(tx.try_send(frame(1)), Err(PipeError::Closed));
    }
}
