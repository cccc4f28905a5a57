//! An MCP client for a server author's tests, and `otpmcp tasks watch`'s follower.
//!
//! [`Client`] speaks to a running server over loopback HTTP in either revision
//! (2025-11-25 sessions: `initialize` and `Mcp-Session-Id`; 2026-07-28 stateless:
//! `_meta` and the `Mcp-Method`/`Mcp-Name` headers on every request), or over stdio to a
//! server it runs in the test's process on pipes ([`serve_io`](crate::serve_io)), or to
//! any reader and writer (a child process's stdout and stdin). Answers may be JSON or
//! SSE; the notifications that come before a result (progress, logs) are collected with
//! it. Failures are [`ClientError`]s, never panics.
//!
//! ```no_run
//! use otpmcp::client::Client;
//! use otpmcp::prelude::*;
//! use serde_json::json;
//!
//! # async fn test(server: McpServer) -> Result<(), Box<dyn std::error::Error>> {
//! let mut config = Config::default();
//! config.server.bind = ([127, 0, 0, 1], 0).into(); // a free port
//! let app = start_with(config, server).await?;
//! let client = Client::http(app.url()).connect().await?; // a 2025-11-25 session
//! let counted = client.call_tool_with_progress("count", json!({"to": 2})).await?;
//! assert_eq!(counted.text(), "counted to 2");
//! assert_eq!(counted.progress.len(), 2);
//! client.close().await?;
//! app.shutdown().await;
//! # Ok(())
//! # }
//! ```
//!
//! The pieces: `http.rs` and `stdio.rs` (the two links), `tasks.rs` (the tasks
//! extension), `results.rs` (what calls return), `wire.rs` (the HTTP client and the
//! JSON-or-SSE reader, shared with `watch.rs`, the operator's `otpmcp tasks watch`).

mod calls;
mod error;
mod http;
mod results;
mod stdio;
mod tasks;
pub mod watch;
mod wire;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::config::Config;
use crate::protocol::meta::{CLIENT_CAPABILITIES, HeaderParam, LOG_LEVEL, PROTOCOL_VERSION};
use crate::protocol::methods::LoggingLevel;
use crate::server::McpServer;
use crate::supervisor::Exit;
pub use error::ClientError;
pub use results::{
    ListedArgument, ListedPrompt, ListedResource, ListedTemplate, ListedTool, LogMessage, Message,
    Progress, Prompt, Response, Task, TaskEvents, ToolResult,
};
pub use watch::Ending;
pub use wire::Unreachable;

/// Which revision of the protocol the client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2025-11-25: `initialize` opens a session; later requests carry `Mcp-Session-Id`.
    Sessions,
    /// 2026-07-28: no session; each request carries its revision and the client's
    /// capabilities in `_meta` (and, over HTTP, its method and target in headers).
    Stateless,
}

impl Era {
    /// The revision's name.
    pub fn version(self) -> &'static str {
        match self {
            Self::Sessions => "2025-11-25",
            Self::Stateless => "2026-07-28",
        }
    }
}

/// Where a [`ClientBuilder`] connects.
enum Target {
    Http(String),
    Server(Box<(Config, McpServer)>),
    Io(stdio::Pipes),
}

/// How to connect: made by [`Client::http`], [`Client::stdio`] or [`Client::io`].
pub struct ClientBuilder {
    target: Target,
    era: Era,
    capabilities: Value,
    token: Option<String>,
    timeout: Duration,
    log_level: Option<LoggingLevel>,
}

impl std::fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("era", &self.era)
            .field("capabilities", &self.capabilities)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl ClientBuilder {
    fn new(target: Target) -> Self {
        Self {
            target,
            era: Era::Sessions,
            capabilities: json!({}),
            token: None,
            timeout: Duration::from_secs(30),
            log_level: None,
        }
    }

    /// Asks for handlers' log messages from `level` up: `logging/setLevel` after
    /// `initialize` (2025-11-25), `logLevel` in each request's `_meta` (2026-07-28,
    /// which sends none without it).
    pub fn log_level(mut self, level: LoggingLevel) -> Self {
        self.log_level = Some(level);
        self
    }

    /// Speaks 2026-07-28 (stateless) instead of 2025-11-25 (sessions).
    pub fn stateless(self) -> Self {
        self.era(Era::Stateless)
    }

    /// Speaks revision `era`.
    pub fn era(mut self, era: Era) -> Self {
        self.era = era;
        self
    }

    /// The capabilities the client declares (`{}` by default: it answers no questions,
    /// so a handler's `ctx.elicit` gets -32021).
    pub fn capabilities(mut self, capabilities: Value) -> Self {
        self.capabilities = capabilities;
        self
    }

    /// Sends `Authorization: Bearer <token>` (HTTP only; over https, or http to loopback).
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The longest any one request may take, and the longest [`Client::wait_task`]
    /// waits (30 s by default).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Connects: over HTTP in 2025-11-25, `initialize` and `notifications/initialized`;
    /// over stdio, the same on the pipes (and, for [`Client::stdio`], the server is
    /// started first).
    pub async fn connect(self) -> Result<Client, ClientError> {
        let link = match self.target {
            Target::Http(url) => Link::Http(http::HttpLink::new(url, self.token, self.timeout)?),
            Target::Server(parts) => {
                let (config, server) = *parts;
                Link::Stdio(stdio::StdioLink::serve(config, server, self.timeout))
            }
            Target::Io(pipes) => Link::Stdio(stdio::StdioLink::new(pipes, None, self.timeout)),
        };
        let mut client = Client {
            link,
            era: self.era,
            capabilities: self.capabilities,
            timeout: self.timeout,
            next_id: AtomicI64::new(1),
            header_params: Mutex::new(HashMap::new()),
            initialized: None,
            log_level: self.log_level,
        };
        if client.era == Era::Sessions {
            client.initialize().await?;
            if let Some(level) = self.log_level {
                client
                    .request("logging/setLevel", json!({ "level": level }))
                    .await?;
            }
        }
        Ok(client)
    }
}

/// The client's link to the server.
enum Link {
    Http(http::HttpLink),
    Stdio(stdio::StdioLink),
}

/// One request's answer: the response message and the notifications before it.
struct Exchange {
    message: Value,
    notes: Vec<Value>,
}

/// An MCP client for tests: over loopback HTTP in either revision, or over stdio.
/// Requests over HTTP may run at once from many tasks (`&self`); over stdio they run one
/// at a time.
pub struct Client {
    link: Link,
    era: Era,
    capabilities: Value,
    timeout: Duration,
    next_id: AtomicI64,
    /// The `x-mcp-header` arguments of each tool seen in `tools/list` (2026-07-28
    /// mirrors them in `Mcp-Param-*` headers).
    header_params: Mutex<HashMap<String, Vec<HeaderParam>>>,
    /// The result of `initialize` (2025-11-25).
    initialized: Option<Value>,
    /// Sent in each request's `_meta` (2026-07-28).
    log_level: Option<LoggingLevel>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("era", &self.era)
            .field("session", &self.session_id())
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A client of the Streamable HTTP endpoint at `url` (`App::url()`).
    pub fn http(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Target::Http(url.into()))
    }

    /// A client of `server` served over stdio in this process, on pipes, with the whole
    /// runtime behind it ([`serve_io`](crate::serve_io)); [`Client::close`] ends its
    /// input and waits for it to stop.
    pub fn stdio(config: Config, server: McpServer) -> ClientBuilder {
        ClientBuilder::new(Target::Server(Box::new((config, server))))
    }

    /// A client that writes newline-delimited JSON-RPC to `writer` and reads it from
    /// `reader`: a server's stdin and stdout (a child process's, say).
    pub fn io(
        reader: impl tokio::io::AsyncRead + Unpin + Send + 'static,
        writer: impl tokio::io::AsyncWrite + Unpin + Send + 'static,
    ) -> ClientBuilder {
        ClientBuilder::new(Target::Io(stdio::Pipes::new(reader, writer)))
    }

    /// The revision the client speaks.
    pub fn era(&self) -> Era {
        self.era
    }

    /// The session's id (2025-11-25 over HTTP).
    pub fn session_id(&self) -> Option<&str> {
        match &self.link {
            Link::Http(link) => link.session(),
            Link::Stdio(_) => None,
        }
    }

    /// The server's answer to `initialize` (2025-11-25): its `serverInfo`,
    /// `capabilities`, `instructions`.
    pub fn server_info(&self) -> Option<&Value> {
        self.initialized.as_ref()
    }

    async fn initialize(&mut self) -> Result<(), ClientError> {
        let params = json!({
            "protocolVersion": self.era.version(),
            "capabilities": self.capabilities,
            "clientInfo": {"name": "otpmcp-client", "version": env!("CARGO_PKG_VERSION")},
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": params});
        let exchange = match &mut self.link {
            Link::Http(link) => link.initialize(id, &body).await?,
            Link::Stdio(link) => link.exchange(id, "initialize", &body).await?,
        };
        self.initialized = Some(answer("initialize", exchange)?.result);
        self.notify("notifications/initialized", json!({})).await
    }

    /// Sends request `method` with `params` and waits for its result; JSON-RPC errors
    /// are [`ClientError::Rpc`].
    pub async fn request(&self, method: &str, params: Value) -> Result<Response, ClientError> {
        self.request_with(method, params, None).await
    }

    /// [`Client::request`], with the client's capabilities replaced for this request
    /// (2026-07-28 sends them with each request).
    async fn request_with(
        &self,
        method: &str,
        mut params: Value,
        capabilities: Option<&Value>,
    ) -> Result<Response, ClientError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.era == Era::Stateless {
            let capabilities = capabilities.unwrap_or(&self.capabilities);
            let mut meta = params["_meta"].as_object().cloned().unwrap_or_default();
            meta.insert(PROTOCOL_VERSION.into(), json!(self.era.version()));
            meta.insert(CLIENT_CAPABILITIES.into(), capabilities.clone());
            if let Some(level) = self.log_level {
                meta.insert(LOG_LEVEL.into(), json!(level));
            }
            params["_meta"] = Value::Object(meta);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let exchange = match &self.link {
            Link::Http(link) => {
                let headers = self.routing_headers(method, &params);
                link.exchange(id, method, &body, self.era, &headers).await?
            }
            Link::Stdio(link) => link.exchange(id, method, &body).await?,
        };
        answer(method, exchange)
    }

    /// Sends notification `method`.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), ClientError> {
        let body = json!({"jsonrpc": "2.0", "method": method, "params": params});
        match &self.link {
            Link::Http(link) => link.notify(method, &body, self.era).await,
            Link::Stdio(link) => link.send(method, &body).await,
        }
    }

    /// The `Mcp-Name` and `Mcp-Param-*` headers of a 2026-07-28 request.
    fn routing_headers(&self, method: &str, params: &Value) -> Vec<(String, String)> {
        if self.era != Era::Stateless {
            return Vec::new();
        }
        let field = match method {
            "tools/call" | "prompts/get" => "name",
            "resources/read" => "uri",
            "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/stream" => "taskId",
            _ => return Vec::new(),
        };
        let mut headers = Vec::new();
        if let Some(name) = params[field].as_str() {
            headers.push(("mcp-name".to_owned(), header_text(name)));
        }
        if method == "tools/call" {
            let known = self
                .header_params
                .lock()
                .ok()
                .and_then(|m| params["name"].as_str().and_then(|n| m.get(n).cloned()));
            for HeaderParam { path, header } in known.unwrap_or_default() {
                let mut value = Some(&params["arguments"]);
                for step in &path {
                    value = value.and_then(|v| v.get(step));
                }
                let text = match value {
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Bool(b)) => b.to_string(),
                    Some(Value::Number(n)) => n.to_string(),
                    _ => continue,
                };
                headers.push((format!("mcp-param-{header}"), header_text(&text)));
            }
        }
        headers
    }

    /// Ends the client: over HTTP in 2025-11-25, DELETEs the session; over stdio, closes
    /// the server's input and, for a server [`Client::stdio`] started, waits for it to
    /// stop and says how it ended.
    pub async fn close(self) -> Result<Option<Exit>, ClientError> {
        match self.link {
            Link::Http(link) => {
                link.delete().await?;
                Ok(None)
            }
            Link::Stdio(link) => link.close().await,
        }
    }
}

/// The result of `exchange`'s response, or its error.
fn answer(method: &str, exchange: Exchange) -> Result<Response, ClientError> {
    let Exchange { mut message, notes } = exchange;
    if let Some(error) = message.get("error") {
        return Err(ClientError::Rpc {
            method: method.to_owned(),
            code: error["code"].as_i64().unwrap_or_default(),
            message: error["message"].as_str().unwrap_or_default().to_owned(),
            data: error.get("data").cloned(),
        });
    }
    match message.get_mut("result") {
        Some(result) => Ok(Response {
            result: result.take(),
            notifications: notes,
        }),
        None => Err(ClientError::Malformed {
            method: method.to_owned(),
            detail: format!("neither result nor error: {message}"),
        }),
    }
}

/// `value` as a `T`, or why not.
fn parse<T: DeserializeOwned>(method: &str, value: Value) -> Result<T, ClientError> {
    serde_json::from_value(value).map_err(|e| ClientError::Malformed {
        method: method.to_owned(),
        detail: e.to_string(),
    })
}

/// A header value for `text`: itself when it is plain visible ASCII, else the base64
/// sentinel form `=?base64?…?=` the revision defines.
fn header_text(text: &str) -> String {
    use base64::Engine;
    let plain = !text.is_empty()
        && text.bytes().all(|b| (0x20..0x7f).contains(&b))
        && !text.starts_with([' ', '\t'])
        && !text.ends_with([' ', '\t'])
        && !text.starts_with("=?base64?");
    if plain {
        text.to_owned()
    } else {
        format!(
            "=?base64?{}?=",
            base64::engine::general_purpose::STANDARD.encode(text)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_plain_or_base64() {
        assert_eq!(header_text("echo"), "echo");
        assert_eq!(header_text("héllo"), "=?base64?aMOpbGxv?=");
        assert_eq!(header_text(" x"), "=?base64?IHg=?=");
    }
}
