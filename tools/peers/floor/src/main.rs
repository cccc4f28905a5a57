//! The floor of `scripts/bench-peers`: the least an MCP server on axum must do to serve
//! the benchmark's workloads. It parses each JSON-RPC message and answers: `initialize`
//! with a session id it never checks, notifications with 202, `tools/call` of `echo` as
//! JSON and of `stream_events` as an SSE stream of progress notifications and then the
//! result, DELETE with 200, GET with an SSE stream that stays open. No sessions, no
//! store, no resume, no validation beyond the JSON: what otpmcp does on top of this is
//! its cost, and the floor is what no server on the same stack can go below.
//!
//! Usage: `otpmcp-peer-floor [--bind ADDR:PORT]` (default 127.0.0.1:8080).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::ListenerExt;
use bytes::Bytes;
use http_body::Frame;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Same limits as otpmcp's `stream_events`.
const MAX_STREAM_EVENTS: u64 = 100_000;
const MAX_INTERVAL_MS: u64 = 60_000;

static SESSIONS: AtomicU64 = AtomicU64::new(1);

fn json_response(message: Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        message.to_string(),
    )
        .into_response()
}

fn error(id: Value, code: i64, message: &str) -> Response {
    json_response(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}))
}

fn tools() -> Value {
    json!({"tools": [
        {"name": "echo", "description": "Returns the text it is given.",
         "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
        {"name": "stream_events", "description": "Sends `count` progress notifications `interval_ms` apart, then returns.",
         "inputSchema": {"type": "object", "properties": {
            "count": {"type": "integer", "minimum": 0, "maximum": MAX_STREAM_EVENTS},
            "interval_ms": {"type": "integer", "minimum": 0, "maximum": MAX_INTERVAL_MS}}}}
    ]})
}

async fn on_post(body: Bytes) -> Response {
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return error(Value::Null, -32700, "Parse error");
    };
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let Some(id) = message.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response();
    };
    let params = message.get("params");
    let result = match method {
        "initialize" => {
            let session = format!("{:032x}", SESSIONS.fetch_add(1, Ordering::Relaxed));
            let mut response = json_response(json!({"jsonrpc": "2.0", "id": id, "result": {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "otpmcp-peer-floor", "version": env!("CARGO_PKG_VERSION")},
            }}));
            if let Ok(value) = HeaderValue::from_str(&session) {
                response.headers_mut().insert("mcp-session-id", value);
            }
            return response;
        }
        "tools/list" => tools(),
        "tools/call" => {
            let name = params.and_then(|p| p.get("name")).and_then(Value::as_str);
            let args = params.and_then(|p| p.get("arguments"));
            match name {
                Some("echo") => match args.and_then(|a| a.get("text")).and_then(Value::as_str) {
                    Some(text) => json!({"content": [{"type": "text", "text": text}]}),
                    None => return error(id, -32602, "text must be a string"),
                },
                Some("stream_events") => {
                    let number = |key, default, max| {
                        args.and_then(|a| a.get(key))
                            .and_then(Value::as_u64)
                            .unwrap_or(default)
                            .min(max)
                    };
                    let count = number("count", 10, MAX_STREAM_EVENTS);
                    let interval = number("interval_ms", 100, MAX_INTERVAL_MS);
                    let token = params
                        .and_then(|p| p.get("_meta"))
                        .and_then(|m| m.get("progressToken"))
                        .cloned();
                    return stream_events(id, token, count, interval);
                }
                _ => return error(id, -32602, "unknown tool"),
            }
        }
        "ping" => json!({}),
        _ => return error(id, -32601, "Method not found"),
    };
    json_response(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

/// An SSE frame of one JSON-RPC message.
fn frame(message: &Value) -> Bytes {
    Bytes::from(format!("event: message\ndata: {message}\n\n"))
}

/// `count` progress notifications, one frame each, then the result.
fn stream_events(id: Value, token: Option<Value>, count: u64, interval: u64) -> Response {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        for i in 1..=count {
            if let Some(token) = &token {
                let note = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                    "params": {"progressToken": token, "progress": i, "total": count}});
                if tx.send(frame(&note)).await.is_err() {
                    return;
                }
            }
            if interval > 0 && i < count {
                tokio::time::sleep(Duration::from_millis(interval)).await;
            }
        }
        let result = json!({"jsonrpc": "2.0", "id": id, "result": {
            "content": [{"type": "text", "text": format!("streamed {count} events")}]}});
        let _ = tx.send(frame(&result)).await;
    });
    sse(Body::new(Frames(Some(rx))))
}

fn sse(body: Body) -> Response {
    let mut response = Response::new(body);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// An SSE body fed by a channel; `None`: one that never ends (an idle GET stream).
struct Frames(Option<mpsc::Receiver<Bytes>>);

impl http_body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.0.as_mut() {
            Some(rx) => rx
                .poll_recv(cx)
                .map(|next| next.map(|b| Ok(Frame::data(b)))),
            None => Poll::Pending,
        }
    }
}

async fn on_get() -> Response {
    sse(Body::new(Frames(None)))
}

async fn on_delete() -> StatusCode {
    StatusCode::OK
}

fn parse_bind() -> Result<SocketAddr, String> {
    let mut bind = "127.0.0.1:8080".to_owned();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--bind" => bind = args.next().ok_or("--bind needs ADDR:PORT")?,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    bind.parse()
        .map_err(|_| format!("--bind: {bind:?} is not ADDR:PORT"))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let bind = match parse_bind() {
        Ok(bind) => bind,
        Err(msg) => {
            eprintln!("{msg}\nusage: otpmcp-peer-floor [--bind ADDR:PORT]");
            return std::process::ExitCode::from(2);
        }
    };
    let router = axum::Router::new().route("/mcp", post(on_post).get(on_get).delete(on_delete));
    let listener = match tokio::net::TcpListener::bind(bind).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("cannot listen on {bind}: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    // As otpmcp and the rmcp peer: no Nagle delay on small SSE frames.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    eprintln!("floor listening on http://{bind}/mcp");
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
