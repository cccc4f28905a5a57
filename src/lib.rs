//! # otpmcp
//!
//! An MCP (Model Context Protocol) server runtime built the Erlang/OTP way: supervised
//! actors that talk only by messages, and SSE streams that survive disconnects. A client
//! that reconnects with `Last-Event-ID` gets exactly the events it missed — no gaps, no
//! duplicates — within the retention windows set in `sys.toml`.
//!
//! ## A server in one screen
//!
//! ```
//! use otpmcp::prelude::*;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = ToolRegistry::default();
//! tools.register(tool("hello", |(), _ctx| async { Ok("Hello!") }).description("Says hello."));
//!
//! let mut config = Config::default(); // what sys.toml would say, all defaults
//! config.server.bind = "127.0.0.1:0".parse()?; // any free port
//! let app = start_with(config, McpServer::new(tools)).await?;
//! println!("serving MCP at {}", app.url());
//! app.shutdown().await; // or `app.wait().await` until the tree stops
//! # Ok(())
//! # }
//! ```
//!
//! The public API is what a server author needs: [`McpServer`] and the [`handler`] API
//! ([`tool`](handler::tool), [`RequestContext`](handler::RequestContext),
//! [`ToolError`](handler::ToolError), prompts and resources, [`Json`](handler::Json)),
//! the [`protocol`] types they answer with, [`Config`] and its [`config`] sections,
//! [`start`], [`start_with`] and the running [`App`], and [`prelude`] to import them in
//! one line. The runtime's internals (actors, slots, the store, sessions, streams, the
//! transport, the cluster, the supervisor) are private to the crate; the `testing`
//! feature, which only the crate's own tests turn on, shows them to tests/, benches/ and
//! examples/.
//!
//! ## Supervision tree
//!
//! ```text
//! RootSupervisor            one_for_one, restart intensity from [supervisor]; escalates past it;
//! │                         lends each child its data and publishes it in a slot for the handles
//! ├── EventStoreActor × N   one per shard (`store.shards`), each restarted alone; owns its
//! │                         shard's tables (lent by the root, so they survive a crash);
//! │                         sweep timer; feeds each stored event to the connection
//! │                         following its stream
//! ├── SessionManager        owns the session table (lent likewise); idle expiry; DELETE
//! ├── LeaseKeeper           Redis only, a task: renews this replica's lease and answers the
//! │                         requests of replicas whose lease lapsed
//! └── HttpListener          axum on the root's socket; parent of the stream actors
//!     └── StreamActor ...   one per open SSE connection; temporary (never restarted:
//!                           the client resumes with Last-Event-ID)
//! ```
//!
//! Handlers are not actors: each request's handler runs on its connection's task, or in a
//! task of its own once it has to wait, and reaches the actors through their handles.
//!
//! ## Flows in brief
//! - **Request**: POST → session manager (validate, hold the session, number a new stream)
//!   → the handler is polled once. If it answers at once, its response is stored and sent,
//!   after the priming event (2025-11-25 clients), as the whole body. Otherwise a stream
//!   actor subscribes to the stream and writes the priming event, and the handler goes on
//!   in its own task; each notification and the final response is appended to the store,
//!   which gives it its id and forwards it to the stream actor, which writes it.
//! - **Disconnect**: the body is dropped, the stream actor stops and unsubscribes; the
//!   handler keeps running and its events keep being stored.
//! - **Resume**: GET with `Last-Event-ID` → a new stream actor subscribes with the id's
//!   position; the store replays what came after it and then forwards live events, in one
//!   message, so nothing falls between.
//!
//! docs/architecture.md has the code map and the actors' guarantees; docs/flows.md every
//! flow message by message, across replicas too.
//!
//! ## Module map
//! Bottom layer first: a module names only modules listed before it (tests/layering.rs
//! checks that, and that this map names every module).
//! - `ids`: session ids, stream numbers and keys, event ids (the `Last-Event-ID` format).
//! - `rt`: data lent by a supervisor, slots that reach an actor's current incarnation,
//!   the restart-intensity window.
//! - [`config`]: `sys.toml`, overlays, environment overrides, duration parsing.
//! - [`protocol`]: JSON-RPC envelopes, the typed `Request` (its method classified once),
//!   MCP method types, `_meta`, version negotiation, `requestState`.
//! - `telemetry`: logs, metrics, MCP operation spans, OpenTelemetry export.
//! - `server_news`: the `NewsHub`, what changed on the server for listen streams.
//! - `auth`: bearer tokens, the `Principal` a valid one names, and its `Owner`.
//! - `event_store`: the backend contract, the memory and Redis backends, the store actor
//!   and its handle, the feed to subscribers, task and execution records.
//! - `session`: the session manager actor and its handle, holds, the session table, the
//!   shared directory and the news replicas exchange about sessions.
//! - `stream`: stream actor, SSE framing, the response body, byte budgets.
//! - [`handler`]: the API handlers implement (request context, notes, outbox); tools,
//!   resources, prompts and their registry; built-in tools.
//! - `exec`: supervised execution of configured programs (`[exec]`).
//! - `tasks`: durable tasks: the handle, the registry, one runner per task, event logs.
//! - `server`: the MCP method table between protocol and handlers, for both eras.
//! - `transport`: Streamable HTTP (POST, GET, DELETE) for both eras, the request path,
//!   header checks, rejections, the listener actor.
//! - `cluster`: replicas on one Redis: the pub/sub router, leases, relays.
//! - `supervisor`: the root supervisor: start order, restarts, escalation, stop order.
//! - `admin`: the admin listener (`/healthz`, `/readyz`, `/metrics`, `/dashboard`).
//! - `app`: `start(Config)` and the running [`App`]; the stop order.
//! - [`client`]: the MCP client for a server author's tests (both eras, stdio), and
//!   `otpmcp tasks watch`'s follower.
//! - [`proxy`]: `otpmcp proxy`, which records and replays any MCP server's sessions.
//! - `fuzzing`: the fuzz targets' bodies (hidden from the docs).
//! - [`prelude`]: the names a server author imports; part of the crate root, in no layer.

/// Declares the runtime's internal modules: private to the crate, or, with the `testing`
/// feature (turned on only by the crate's own dev-dependency on itself), public and
/// hidden from the docs, so tests/, benches/ and examples/ reach an actor, a table or a
/// backend directly. Their items are `pub` for that build; in the ordinary one they are
/// reachable from nowhere outside, hence the allowed `unreachable_pub`, and an item only
/// a test uses is not dead code.
macro_rules! internal {
    ($(mod $module:ident;)*) => {$(
        #[cfg(feature = "testing")]
        #[doc(hidden)]
        pub mod $module;
        #[cfg(not(feature = "testing"))]
        #[allow(unreachable_pub)]
        pub(crate) mod $module;
    )*};
}

internal! {
    mod admin;
    mod app;
    mod auth;
    mod cluster;
    mod event_store;
    mod exec;
    mod ids;
    mod rt;
    mod server;
    mod server_news;
    mod session;
    mod stream;
    mod supervisor;
    mod tasks;
    mod telemetry;
    mod transport;
}

pub mod client;
pub mod config;
#[doc(hidden)]
pub mod fuzzing;
pub mod handler;
pub mod protocol;
pub mod proxy;

pub use app::{App, StartError, serve_io, serve_stdio, serve_stdio_until, start, start_with};
pub use auth::verifier::SetupError;
pub use auth::{HandedPrincipal, Principal};
/// `otpmcp tasks watch`: follows a task's events (`tasks/stream`) from a terminal.
pub use client::watch;
pub use event_store::redis::ConnectError;
pub use ids::{SessionId, SessionIdError};
pub use session::{SessionError, SessionInfo};
pub use supervisor::Exit;
pub use telemetry::{TelemetryError, TelemetryGuard, init as init_telemetry};

/// Everything a server author names, in one import: `use otpmcp::prelude::*;`.
///
/// ```no_run
/// use otpmcp::prelude::*;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let mut tools = ToolRegistry::default();
/// tools.register(tool("hello", |(), _ctx| async { Ok("Hello!") }).description("Says hello."));
/// let app = start_with(Config::default(), McpServer::new(tools)).await?;
/// app.shutdown().await;
/// # Ok(())
/// # }
/// ```
pub mod prelude {
    pub use crate::app::{App, serve_stdio, start, start_with};
    pub use crate::config::Config;
    pub use crate::handler::{
        ClientRequestError, IntoToolResult, Json, PromptError, PromptRegistry, RequestContext,
        ResourceError, ResourceRegistry, Tool, ToolError, ToolRegistry, tool,
    };
    pub use crate::protocol::client::{
        ElicitAction, ElicitResult, Elicitation, ListRoots, Root, Sampling, SamplingResult,
    };
    pub use crate::protocol::methods::{
        CallToolResult, Content, GetPromptResult, ListKind, LoggingLevel, PromptArgument,
        PromptDefinition, PromptMessage, ResourceContents, ResourceDefinition,
        ResourceTemplateDefinition, Role, TaskSupport, ToolAnnotations,
    };
    pub use crate::server::McpServer;
    pub use schemars::JsonSchema;
}
pub use config::Config;
pub use server::McpServer;
