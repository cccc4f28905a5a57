//! The rmcp peer of `scripts/bench-peers` and `scripts/bench-stdio`: serves the two tools
//! every benchmarked server offers, `echo(text)` and `stream_events(count, interval_ms)`,
//! either at `/mcp` over Streamable HTTP, in rmcp's default stateful mode (its
//! `LocalSessionManager`), or over stdio (newline-delimited JSON-RPC on stdin and stdout,
//! one client) with the same handler.
//!
//! Usage: `otpmcp-peer-rmcp [--bind ADDR:PORT | --stdio | --stdio-pipes]`. Without a flag
//! it listens on 127.0.0.1:8080. `--stdio` serves on `rmcp::transport::stdio()`, the
//! transport rmcp's README and examples use (tokio's stdin and stdout, whose every read
//! and write runs on tokio's blocking thread pool); `--stdio-pipes` on
//! `rmcp::transport::stdio_pipes()`, which rmcp's docs recommend when both streams are
//! pipes (non-blocking reads and writes on the IO reactor). Either ends when stdin does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::serve::ListenerExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, JsonObject,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};

/// Same limits as otpmcp's `stream_events`, so that both servers accept the same calls.
const MAX_STREAM_EVENTS: u64 = 100_000;
const MAX_INTERVAL_MS: u64 = 60_000;
const MAX_DURATION_MS: u64 = 10 * 60_000;

/// The tool server; stateless itself, one per session as rmcp's factory wants.
#[derive(Clone, Copy)]
struct Peer;

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "echo",
            "Returns the text it is given.",
            schema(json!({
                "type": "object",
                "properties": { "text": { "type": "string" } },
                "required": ["text"]
            })),
        ),
        Tool::new(
            "stream_events",
            "Sends `count` progress notifications `interval_ms` apart, then returns.",
            schema(json!({
                "type": "object",
                "properties": {
                    "count": { "type": "integer", "minimum": 0, "maximum": MAX_STREAM_EVENTS, "default": 10 },
                    "interval_ms": { "type": "integer", "minimum": 0, "maximum": MAX_INTERVAL_MS, "default": 100 }
                }
            })),
        ),
    ]
}

/// Reads an optional non-negative integer argument, as otpmcp's tool does.
fn optional_u64(args: &JsonObject, key: &str, default: u64, max: u64) -> Result<u64, ErrorData> {
    match args.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(n),
            _ => Err(ErrorData::invalid_params(
                format!("{key} must be an integer from 0 to {max}"),
                None,
            )),
        },
    }
}

async fn stream_events(
    args: &JsonObject,
    ctx: &RequestContext<RoleServer>,
) -> Result<CallToolResult, ErrorData> {
    let count = optional_u64(args, "count", 10, MAX_STREAM_EVENTS)?;
    let interval = optional_u64(args, "interval_ms", 100, MAX_INTERVAL_MS)?;
    if count.saturating_mul(interval) > MAX_DURATION_MS {
        return Err(ErrorData::invalid_params(
            "count × interval_ms must be at most 600000",
            None,
        ));
    }
    let token = ctx.meta.get_progress_token();
    for i in 1..=count {
        if let Some(token) = &token {
            let param =
                ProgressNotificationParam::new(token.clone(), i as f64).with_total(count as f64);
            ctx.peer
                .notify_progress(param)
                .await
                .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        }
        if interval > 0 && i < count {
            tokio::time::sleep(Duration::from_millis(interval)).await;
        }
    }
    Ok(CallToolResult::success(vec![ContentBlock::text(format!(
        "streamed {count} events"
    ))]))
}

impl ServerHandler for Peer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _ctx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        ctx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "echo" => match args.get("text").and_then(Value::as_str) {
                Some(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
                None => return Err(ErrorData::invalid_params("text must be a string", None)),
            },
            "stream_events" => stream_events(&args, &ctx).await?,
            other => {
                return Err(ErrorData::invalid_params(
                    format!("unknown tool {other:?}"),
                    None,
                ));
            }
        };
        Ok(result.into())
    }
}

/// Where to serve.
enum Mode {
    Http(SocketAddr),
    /// `rmcp::transport::stdio()`.
    Stdio,
    /// `rmcp::transport::stdio_pipes()`.
    StdioPipes,
}

fn parse_args() -> Result<Mode, String> {
    let mut bind = "127.0.0.1:8080".to_owned();
    let mut mode = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = args.next().ok_or("--bind needs ADDR:PORT")?,
            "--stdio" => mode = Some(Mode::Stdio),
            "--stdio-pipes" => mode = Some(Mode::StdioPipes),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    match mode {
        Some(mode) => Ok(mode),
        None => bind
            .parse()
            .map(Mode::Http)
            .map_err(|_| format!("--bind: {bind:?} is not ADDR:PORT")),
    }
}

/// Serves one client on stdin and stdout until stdin ends. Nothing else may write to
/// stdout: messages go to stderr.
async fn serve_stdio<T, E, A>(transport: T) -> std::process::ExitCode
where
    T: rmcp::transport::IntoTransport<RoleServer, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let running = match Peer.serve(transport).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("stdio: initialization failed: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match running.waiting().await {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("stdio: the service failed: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let bind = match parse_args() {
        Ok(Mode::Http(bind)) => bind,
        Ok(Mode::Stdio) => return serve_stdio(rmcp::transport::stdio()).await,
        Ok(Mode::StdioPipes) => return serve_stdio(rmcp::transport::stdio_pipes()).await,
        Err(msg) => {
            eprintln!(
                "{msg}\nusage: otpmcp-peer-rmcp [--bind ADDR:PORT | --stdio | --stdio-pipes]"
            );
            return std::process::ExitCode::from(2);
        }
    };
    let service: StreamableHttpService<Peer, LocalSessionManager> = StreamableHttpService::new(
        || Ok(Peer),
        Default::default(),
        StreamableHttpServerConfig::default(),
    );
    let router = axum::Router::new().nest_service("/mcp", service);
    let listener = match tokio::net::TcpListener::bind(bind).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {bind}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // axum::serve leaves Nagle on; otpmcp sets TCP_NODELAY, so do the same here or
    // small SSE frames would wait for ACKs and the comparison would measure Nagle.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    eprintln!("rmcp peer listening on http://{bind}/mcp");
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
    {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("server error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
