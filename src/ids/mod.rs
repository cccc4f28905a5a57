//! Identifiers shared by every layer: sessions, their streams, the events on them, and
//! tasks.
//!
//! The bottom of the module graph: this module imports nothing else of the crate, so the
//! store, the sessions, the streams and the transport can all name the same ids.

pub mod event_id;
pub mod hash;
pub mod session_id;
pub mod task_id;

pub use event_id::{EventId, EventIdError, STREAM_BITS, StreamKey, StreamNo};
pub use hash::IdMap;
pub use session_id::{SessionId, SessionIdError};
pub use task_id::{TaskId, TaskIdError};
