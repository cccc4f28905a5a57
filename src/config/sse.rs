//! `[sse]`: SSE streams, the in-memory event store's budgets and resumption.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{NonZeroDuration, human_duration, nz};

/// `[sse]`: the keys of the erlmcp design's SSE table, plus the per-connection buffer.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SseConfig {
    /// Answer requests with SSE streams and serve GET streams. When false, every request
    /// is answered with a single JSON body and GET gets 405.
    pub enabled: bool,
    /// The MCP endpoint path.
    pub path: String,
    /// Interval between `: ping` comments on an open stream.
    pub keepalive_interval: NonZeroDuration,
    /// A stream with no event for this long is closed after a `retry:` hint, so the client
    /// polls back. POST streams of clients older than 2025-11-25 are not closed for
    /// idleness before their response: those clients do not poll back.
    pub stream_timeout: NonZeroDuration,
    /// The `retry:` value sent to clients: how long they wait before reconnecting.
    #[serde(with = "human_duration")]
    pub retry_timeout: Duration,
    /// Events older than this are dropped from the store.
    pub event_ttl: NonZeroDuration,
    /// A `Last-Event-ID` issued longer ago than this is not honoured (no replay).
    pub replay_window: NonZeroDuration,
    /// Most events kept per session across its streams; the oldest go first.
    pub max_session_events: NonZeroUsize,
    /// Most payload bytes kept per session across its streams; the oldest go first (the
    /// newest event always stays). Without it, large tool outputs times
    /// `max_session_events` can reach gigabytes per session.
    pub max_session_bytes: usize,
    /// Most events the in-memory store keeps across all sessions; past it the oldest of
    /// any session go first, down to nine tenths.
    pub max_total_events: NonZeroUsize,
    /// Most payload bytes the in-memory store keeps across all sessions, likewise: with
    /// the per-session caps alone, 10,000 sessions could keep 160 GiB.
    pub max_total_bytes: NonZeroUsize,
    /// Interval of the store's sweep of expired events.
    pub cleanup_interval: NonZeroDuration,
    /// Store events and honour `Last-Event-ID`. When false, frames carry no `id:` line,
    /// nothing is stored and `Last-Event-ID` is ignored.
    pub enable_replay: bool,
    /// Frames buffered per connection. Past it, what comes next waits within
    /// `stream_buffer_bytes`.
    pub stream_buffer: NonZeroUsize,
    /// Bytes buffered per connection, within `stream_buffer` frames. A replay is written
    /// as the client reads it, within this budget; live events that do not fit wait
    /// behind, within as much again, and past that the client is too slow: the
    /// connection is closed and the client resumes from the store. One event larger than
    /// the budget still goes out alone. Without it, a resume of a 16 MiB stream that the
    /// client does not read held all 16 MiB in frames. Also the budget of a
    /// `tasks/stream` connection, from the task's log to the socket.
    pub stream_buffer_bytes: NonZeroUsize,
    /// Most connections following one request stream on a replica. A newer connection
    /// becomes the active one; older ones are parked and get only the stream's last event
    /// (the response). Past this many, the oldest parked one is closed with a `retry:`
    /// hint. With 1, a newer connection closes the older at once, which makes clients
    /// that reconnect in the background while resuming close each other in turn. Also
    /// the most `tasks/stream` connections following one task on a replica: past it the
    /// oldest is closed with a `retry:` hint.
    pub max_connections_per_stream: NonZeroUsize,
}

impl Default for SseConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            path: "/mcp".into(),
            keepalive_interval: NonZeroDuration::from_secs(30),
            stream_timeout: NonZeroDuration::from_secs(300),
            retry_timeout: Duration::from_secs(5),
            event_ttl: NonZeroDuration::from_secs(3600),
            replay_window: NonZeroDuration::from_secs(86_400),
            max_session_events: nz!(10_000),
            max_session_bytes: 16 * 1024 * 1024,
            max_total_events: nz!(1_000_000),
            max_total_bytes: nz!(256 * 1024 * 1024),
            cleanup_interval: NonZeroDuration::from_secs(300),
            enable_replay: true,
            stream_buffer: nz!(256),
            stream_buffer_bytes: nz!(256 * 1024),
            max_connections_per_stream: nz!(4),
        }
    }
}
