//! # otpmcp
//!
//! An MCP (Model Context Protocol) server runtime built the Erlang/OTP way: supervised
//! actors that talk only by messages, and SSE streams that survive disconnects. A client
//! that reconnects with `Last-Event-ID` gets exactly the events it missed — no gaps, no
//! duplicates — within the retention windows set in `sys.toml`.
//!
//! ## Supervision tree
//!
//! ```text
//! RootSupervisor            one_for_one, restart intensity from [supervisor]; escalates past it
//! ├── EventStoreActor       owns the event tables (lent by the root, so they survive a crash);
//! │                         sweep timer; forwards each stored event to its stream's subscriber
//! ├── SessionManager        owns the session table (lent likewise); idle expiry; DELETE
//! └── HttpListener          axum on the root's socket; parent of the stream actors
//!     └── StreamActor ...   one per open SSE connection; temporary (never restarted:
//!                           the client resumes with Last-Event-ID)
//! ```
//!
//! ## Flows in brief
//! - **Request**: POST → session manager (validate, number a new stream) → a stream actor
//!   subscribes to that stream in the store and writes the priming event (2025-11-25 clients) → the handler runs
//!   in its own task; each notification and the final response are appended to the store,
//!   which gives them ids and forwards them to the stream actor, which writes them.
//! - **Disconnect**: the body is dropped, the stream actor stops and unsubscribes; the
//!   handler keeps running and its events keep being stored.
//! - **Resume**: GET with `Last-Event-ID` → a new stream actor subscribes with the id's
//!   position; the store replays what came after it and then forwards live events.
//!
//! ## Embedding
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), otpmcp::StartError> {
//! let mut config = otpmcp::Config::default();
//! config.server.bind = "127.0.0.1:0".parse().unwrap(); // any free port
//! let app = otpmcp::start(config).await?;
//! println!("serving at {}", app.url());
//! app.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! ## Module map
//! - [`app`]: `start(Config)`, stop order; the only place that wires actors together.
//! - [`config`]: `sys.toml`, overlays, environment overrides, duration parsing.
//! - [`supervisor`]: root supervisor, restart intensity, slots, lent data.
//! - [`session`]: session manager actor, session ids and records, the shared directory.
//! - [`stream`]: stream actor, SSE framing, the response body.
//! - [`event_store`]: the backend trait and its contract, event ids, the memory and Redis
//!   backends, actor.
//! - [`cluster`]: Redis shared by replicas: connections, key layout, the pub/sub bus,
//!   leases on running requests.
//! - [`transport`]: Streamable HTTP (POST, GET, DELETE), header checks, rejections.
//! - [`protocol`]: JSON-RPC envelopes, MCP method types, version negotiation.
//! - [`handler`]: the tool API handlers implement; built-in tools.
//! - [`server`]: the MCP method table between protocol and handlers.
//! - [`telemetry`]: logs and OpenTelemetry export.

pub mod app;
pub mod cluster;
pub mod config;
pub mod event_store;
pub mod handler;
pub mod ids;
pub mod protocol;
pub mod rt;
pub mod server;
pub mod session;
pub mod stream;
pub mod supervisor;
pub mod telemetry;
pub mod transport;

pub use app::{App, StartError, start, start_with};
pub use config::Config;
pub use server::McpServer;
