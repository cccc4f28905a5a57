//! `[sse]`: SSE streams, the in-memory event store's budgets and resumption.

use std::num::NonZeroUsize;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::duration::{HumanDuration, NonZeroDuration, human_duration, nz};

/// SSE streams, the event store that lets a client resume one
/// ([resumability.md](resumability.md)), and the in-memory store's budgets.
///
/// Worst-case memory: what clients can make the in-memory store hold is bounded:
/// `max_total_bytes` of payload plus about 80 bytes per event up to `max_total_events`;
/// about 3 KB per session up to `server.max_sessions`; and per connection, up to
/// `server.max_connections`, about twice `stream_buffer_bytes` plus 200 KB. With Redis,
/// events and sessions live there, bounded by its `maxmemory`.
#[derive(Debug, Clone, Deserialize, Serialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SseConfig {
    /// Answer requests with SSE streams and serve GET streams. Off: every request gets one
    /// JSON body, GET gets 405, progress and log notifications are dropped and requests to
    /// the client fail (`ClientRequestError::Unavailable`).
    pub enabled: bool,
    /// The MCP endpoint; must start with `/`.
    pub path: String,
    /// Interval between `: ping` comments on an open stream, so proxies and clients do not
    /// cut quiet streams.
    pub keepalive_interval: NonZeroDuration,
    /// A stream with no event for this long (pings do not count) is closed after a `retry:`
    /// hint, and the client reconnects with `Last-Event-ID`. A POST stream of a session
    /// older than 2025-11-25 is not closed before its response: those clients do not poll
    /// back.
    pub stream_timeout: NonZeroDuration,
    /// The `retry:` value sent to clients, how long they wait before reconnecting: in the
    /// priming frame (2025-11-25 sessions) and before every close the server starts.
    #[serde(with = "human_duration")]
    #[schemars(with = "HumanDuration")]
    pub retry_timeout: Duration,
    /// Events older than this are dropped from the store (and never replayed).
    pub event_ttl: NonZeroDuration,
    /// A `Last-Event-ID` issued longer ago than this gets no replay, only live events
    /// ([resumability.md](resumability.md#retention)).
    pub replay_window: NonZeroDuration,
    /// Most events kept per session across its streams; the oldest go first.
    pub max_session_events: NonZeroUsize,
    /// Most payload bytes kept per session across its streams; the oldest go first, but the
    /// newest event always stays, so a stream's end can be replayed. A resume that misses
    /// evicted events is reported truncated. 0 keeps only the newest event.
    pub max_session_bytes: usize,
    /// Most events the in-memory store keeps across all sessions; past it, or past
    /// `max_total_bytes`, the oldest of any session go, down to nine tenths of both
    /// (`otpmcp_events_evicted_total{reason="total"}`). One principal's task logs hold at
    /// most `tasks.principal_event_percent` of it. Redis: use its `maxmemory`.
    pub max_total_events: NonZeroUsize,
    /// Most payload bytes the in-memory store keeps across all sessions, as
    /// `max_total_events`: with the per-session caps alone, the defaults would allow 160
    /// GiB.
    pub max_total_bytes: NonZeroUsize,
    /// Period of the store's sweep of expired events, and the longest interval of the
    /// session-expiry check. With Redis each replica sweeps the sessions it used.
    pub cleanup_interval: NonZeroDuration,
    /// Store events and honour `Last-Event-ID`. Off: frames carry no `id:`, nothing is
    /// stored, and a client that disconnects loses what it missed, a response in progress
    /// included.
    pub enable_replay: bool,
    /// Frames buffered per connection (a replay goes out in chunks of about 64 KiB, one
    /// frame each; pings count too). Past it, what comes next waits within
    /// `stream_buffer_bytes`.
    pub stream_buffer: NonZeroUsize,
    /// Bytes buffered per connection. A replay is read from the store a page at a time and
    /// written as the client reads it; live events that do not fit wait behind, within as
    /// much again, and past that the client is too slow: its connection is closed and it
    /// resumes from the store. One event larger than the budget still goes out alone,
    /// shared with the store. Also the budget of a `tasks/stream` connection.
    pub stream_buffer_bytes: NonZeroUsize,
    /// Most connections following one request stream on a replica (and one task's
    /// `tasks/stream`). A newer connection becomes the active one; older ones are parked
    /// and get only the stream's response. Past the cap the oldest parked one is closed
    /// with a `retry:` hint. With 1, a newer connection closes the older at once, and
    /// clients that reconnect in the background while resuming (the Python SDK) close each
    /// other in turn.
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
