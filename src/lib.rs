//! # otpmcp
//!
//! An MCP (Model Context Protocol) server runtime. You write tools, resources and
//! prompts as plain async functions; otpmcp serves them on Streamable HTTP (both
//! protocol eras: sessions with resumable SSE streams, and stateless requests with
//! durable tasks) or on stdio, under a supervision tree.
//!
//! ## Start here
//!
//! - **The guide**, `docs/guide.md` in the repository and in this crate's package: from
//!   `cargo new` to a tested server, then tools, the request context, asking the client,
//!   tasks, resources, prompts and completion, one section each.
//! - **[`prelude`]**: every name the guide uses, in one `use otpmcp::prelude::*;`.
//! - **`Cargo.toml`**: besides `otpmcp`, a server's crate names these (schemars because
//!   `#[derive(JsonSchema)]` writes `::schemars` paths into your code):
//!
//!   ```toml
//!   tokio = { version = "1", features = ["macros", "rt-multi-thread", "signal"] }
//!   serde = { version = "1", features = ["derive"] }
//!   schemars = "1"
//!   ```
//! - **A working server**: one tool with typed arguments, served on a free port.
//!
//! ```
//! use otpmcp::prelude::*;
//!
//! /// Adds two integers: the doc comment is the tool's description, the fields its schema.
//! #[derive(serde::Deserialize, JsonSchema)]
//! struct Add {
//!     a: i64,
//!     b: i64,
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut tools = ToolRegistry::default();
//! tools
//!     .register(tool("add", |args: Add, _ctx| async move { Ok((args.a + args.b).to_string()) }))
//!     .register(tool("hello", |(), _ctx| async { Ok("Hello!") }).description("Says hello."));
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
//! ## The API
//!
//! What a server author needs: [`McpServer`] and the [`handler`] API
//! ([`tool`](handler::tool), [`RequestContext`](handler::RequestContext),
//! [`ToolError`](handler::ToolError), prompts and resources, [`Json`](handler::Json)),
//! the [`protocol`] types they answer with, [`Config`] and its [`config`] sections,
//! [`start_with`] (HTTP) or [`serve_stdio`] and the running [`App`], and [`prelude`] to
//! import them in one line. [`proxy`] is `otpmcp proxy`, the record/replay proxy.
//!
//! The rest of this page is about the inside: the runtime's internals (actors, slots,
//! the store, sessions, streams, the transport, the cluster, the supervisor) are private
//! to the crate; the `testing` feature, which only the crate's own tests turn on, shows
//! them to tests/, benches/ and examples/.
//!
//! ## Inside: the runtime built the Erlang/OTP way
//!
//! Supervised actors that talk only by messages, and SSE streams that survive
//! disconnects: a client that reconnects with `Last-Event-ID` gets exactly the events it
//! missed (no gaps, no duplicates) within the retention windows set in `sys.toml`.
//!
//! ### Supervision tree
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
//! ### Flows in brief
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
//!   the restart-intensity window, the count of running requests a drain waits for.
//! - [`config`]: `sys.toml`, overlays, environment overrides, duration parsing.
//! - [`protocol`]: JSON-RPC envelopes, the typed `Request` (its method classified once),
//!   MCP method types, `_meta`, version negotiation, `requestState`.
//! - `telemetry`: logs, metrics, MCP operation spans, OpenTelemetry export.
//! - `server_news`: the `NewsHub`, what changed on the server for listen streams.
//! - `auth`: bearer tokens, the `Principal` a valid one names, and its `Owner`; the gate
//!   every MCP request passes.
//! - `net`: the HTTP edge all listeners share: the accept loop, the write-stall guard,
//!   the client's address behind trusted proxies, the DNS-rebinding guard.
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
    mod net;
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
/// Every name docs/guide.md uses is here, each shown below with its summary: the
/// server and how to start it, the handler API (tools, resources, prompts, the request
/// context, errors), the MCP types handlers answer with, and the questions a handler
/// asks the client. Besides otpmcp, a crate that uses it names `tokio` (with the
/// `macros`, `rt-multi-thread` features), `serde` (with `derive`) and `schemars = "1"`:
/// `#[derive(JsonSchema)]` writes `::schemars` paths, which resolve only in a crate that
/// depends on schemars itself.
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
    // Inlined, so that this page lists each item with its summary rather than bare
    // `pub use` lines.
    #[doc(inline)]
    pub use crate::app::{App, StartError, serve_stdio, serve_stdio_until, start, start_with};
    #[doc(inline)]
    pub use crate::config::Config;
    #[doc(inline)]
    pub use crate::handler::{
        ClientRequestError, IntoToolResult, Json, NotifyError, PromptError, PromptRegistry,
        RequestContext, ResourceError, ResourceRegistry, SkillsDirectory, SkillsError, Tool,
        ToolError, ToolRegistry, prompt, tool,
    };
    #[doc(inline)]
    pub use crate::protocol::client::{
        ClientRequest, ElicitAction, ElicitResult, Elicitation, ListRoots, Root, Sampling,
        SamplingResult,
    };
    #[doc(inline)]
    pub use crate::protocol::methods::{
        CallToolResult, CompletionArgument, CompletionRef, Content, GetPromptResult, Icon,
        IconTheme, ListKind, LoggingLevel, PromptArgument, PromptDefinition, PromptMessage,
        ResourceContents, ResourceDefinition, ResourceTemplateDefinition, Role, TaskSupport,
        ToolAnnotations,
    };
    #[doc(inline)]
    pub use crate::server::McpServer;
    #[doc(inline)]
    pub use crate::supervisor::Exit;
    #[doc(inline)]
    pub use schemars::JsonSchema;
}
pub use config::Config;
pub use server::McpServer;
