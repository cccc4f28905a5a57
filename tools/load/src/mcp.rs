//! The client side of MCP over Streamable HTTP, as far as the workloads need it:
//! initialize, tools/call, the standalone GET stream, resuming with `Last-Event-ID`, and
//! DELETE.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{ACCEPT, CONTENT_TYPE, HOST};
use hyper::{Method, Request, Response};
use serde_json::Value;

use crate::Result;
use crate::client::{Conn, Target};
use crate::sse::{Event, Parser};

/// The protocol version the load tool speaks (priming events and resumable POST streams
/// came with it).
pub(crate) const PROTOCOL_VERSION: &str = "2025-11-25";

/// How long draining the rest of a response body may take once its reply has arrived.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The revision a stateless client speaks.
pub(crate) const STATELESS_VERSION: &str = "2026-07-28";

/// An initialized session. `id` is `None` for servers that run without sessions; a
/// stateless client has no session at all.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) id: Option<String>,
    pub(crate) stateless: bool,
}

impl Session {
    /// No session: every request of the stateless revision stands alone.
    pub(crate) fn stateless() -> Self {
        Self {
            id: None,
            stateless: true,
        }
    }
}

fn request(
    method: Method,
    target: &Target,
    session: Option<&Session>,
    body: Option<String>,
) -> Result<Request<Full<Bytes>>> {
    let mut builder = Request::builder()
        .method(method)
        .uri(target.path.as_str())
        .header(HOST, target.authority.as_str());
    builder = match &body {
        Some(_) => builder
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream"),
        None => builder.header(ACCEPT, "text/event-stream"),
    };
    if let Some(session) = session {
        let version = if session.stateless {
            STATELESS_VERSION
        } else {
            PROTOCOL_VERSION
        };
        builder = builder.header("mcp-protocol-version", version);
        if let Some(id) = &session.id {
            builder = builder.header("mcp-session-id", id.as_str());
        }
    }
    let body = body.map(Bytes::from).unwrap_or_default();
    Ok(builder.body(Full::new(body))?)
}

/// Fails on a non-2xx status, with the start of the body in the message.
async fn check(resp: Response<Incoming>) -> Result<Response<Incoming>> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let body = tokio::time::timeout(DRAIN_TIMEOUT, resp.into_body().collect())
        .await
        .ok()
        .and_then(|r| r.ok())
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]).into_owned();
    Err(format!("HTTP {status}: {text}").into())
}

/// The messages of one response: one JSON body, or the events of an SSE body.
pub(crate) struct Messages {
    body: Incoming,
    /// `None` for a JSON body.
    sse: Option<Parser>,
    done: bool,
}

impl Messages {
    fn new(resp: Response<Incoming>) -> Messages {
        let sse = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        Messages {
            body: resp.into_body(),
            sse: sse.then(Parser::default),
            done: false,
        }
    }

    /// The next event (a JSON body comes as one event without id); `None` at the end.
    pub(crate) async fn next(&mut self) -> Result<Option<Event>> {
        if self.done {
            return Ok(None);
        }
        let Some(parser) = &mut self.sse else {
            self.done = true;
            let bytes = (&mut self.body).collect().await?.to_bytes();
            return Ok(Some(Event {
                id: None,
                data: String::from_utf8(bytes.to_vec())?,
            }));
        };
        loop {
            if let Some(event) = parser.next_event() {
                return Ok(Some(event));
            }
            match self.body.frame().await {
                None => {
                    self.done = true;
                    return Ok(None);
                }
                Some(frame) => {
                    if let Ok(data) = frame?.into_data() {
                        parser.feed(&data);
                    }
                }
            }
        }
    }

    /// Reads the body to its end, so that the connection can carry the next request.
    pub(crate) async fn drain(&mut self) -> Result<()> {
        tokio::time::timeout(DRAIN_TIMEOUT, async {
            while self.next().await?.is_some() {}
            Ok::<(), crate::Error>(())
        })
        .await
        .map_err(|_| "the response stayed open after its reply")?
    }
}

/// The response to request `id` (result or error), when `msg` is one.
pub(crate) fn is_reply_to(msg: &Value, id: u64) -> bool {
    msg.get("id").and_then(Value::as_u64) == Some(id)
        && (msg.get("result").is_some() || msg.get("error").is_some())
}

/// The result of a reply, or its JSON-RPC error as an `Err`.
pub(crate) fn result_of(msg: &Value) -> Result<&Value> {
    if let Some(error) = msg.get("error") {
        return Err(format!("JSON-RPC error: {error}").into());
    }
    msg.get("result")
        .ok_or_else(|| "reply without result".into())
}

/// The `progress` value of a `notifications/progress` for `token`.
pub(crate) fn progress_of(msg: &Value, token: &str) -> Option<u64> {
    if msg.get("method").and_then(Value::as_str) != Some("notifications/progress") {
        return None;
    }
    let params = msg.get("params")?;
    if params.get("progressToken").and_then(Value::as_str) != Some(token) {
        return None;
    }
    let progress = params.get("progress")?.as_f64()?;
    // Progress values are whole numbers here; anything else is reported as out of range.
    (progress >= 0.0 && progress.fract() == 0.0).then_some(progress as u64)
}

/// Reads messages until the reply to `id`, ignoring any other message, and returns it.
pub(crate) async fn await_reply(msgs: &mut Messages, id: u64) -> Result<Value> {
    while let Some(event) = msgs.next().await? {
        if event.data.is_empty() {
            continue;
        }
        let msg: Value = serde_json::from_str(&event.data)?;
        if is_reply_to(&msg, id) {
            return Ok(msg);
        }
    }
    Err(format!("the response ended without the reply to request {id}").into())
}

/// POSTs a JSON-RPC message and returns its response's messages (after a status check).
pub(crate) async fn post(
    conn: &mut Conn,
    target: &Target,
    session: Option<&Session>,
    body: String,
) -> Result<Messages> {
    let resp = conn
        .send(request(Method::POST, target, session, Some(body))?)
        .await?;
    Ok(Messages::new(check(resp).await?))
}

/// Opens a GET stream: the standalone stream, or with `last_event_id` the resumption of
/// whichever stream that id belongs to.
pub(crate) async fn get(
    conn: &mut Conn,
    target: &Target,
    session: &Session,
    last_event_id: Option<&str>,
) -> Result<Messages> {
    let mut req = request(Method::GET, target, Some(session), None)?;
    if let Some(id) = last_event_id {
        req.headers_mut().insert("last-event-id", id.parse()?);
    }
    let resp = conn.send(req).await?;
    Ok(Messages::new(check(resp).await?))
}

/// Initializes a session: `initialize`, then `notifications/initialized`.
pub(crate) async fn initialize(conn: &mut Conn, target: &Target) -> Result<Session> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{PROTOCOL_VERSION}","capabilities":{{}},"clientInfo":{{"name":"otpmcp-load","version":"{}"}}}}}}"#,
        env!("CARGO_PKG_VERSION")
    );
    let resp = conn
        .send(request(Method::POST, target, None, Some(body))?)
        .await?;
    let resp = check(resp).await?;
    let id = resp
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut msgs = Messages::new(resp);
    let reply = await_reply(&mut msgs, 0).await?;
    result_of(&reply)?;
    msgs.drain().await?;
    let session = Session {
        id,
        stateless: false,
    };
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    post(conn, target, Some(&session), initialized.to_owned())
        .await?
        .drain()
        .await?;
    Ok(session)
}

/// Ends a session with DELETE. A server that does not allow DELETE (405) or already
/// forgot the session (404) is not an error.
pub(crate) async fn delete(conn: &mut Conn, target: &Target, session: &Session) -> Result<()> {
    if session.id.is_none() {
        return Ok(());
    }
    let resp = conn
        .send(request(Method::DELETE, target, Some(session), None)?)
        .await?;
    let status = resp.status().as_u16();
    if status != 404 && status != 405 {
        let mut msgs = Messages::new(check(resp).await?);
        msgs.drain().await?;
    } else {
        resp.into_body().collect().await?;
    }
    Ok(())
}

/// POSTs request `id` of the stateless revision (2026-07-28): `params` are the members
/// of its params object but `_meta` (e.g. `"taskId":"…"`), JSON text; the `_meta` and the
/// headers a proxy routes on (`Mcp-Method`, `Mcp-Name` = `name`) are added here. With
/// `tasks`, the request declares the tasks extension, so a tool that may run as a task
/// does, and `tasks/*` are allowed.
pub(crate) async fn post_stateless(
    conn: &mut Conn,
    target: &Target,
    id: u64,
    method: &str,
    name: &str,
    params: &str,
    tasks: bool,
) -> Result<Messages> {
    let capabilities = if tasks {
        r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#
    } else {
        "{}"
    };
    let comma = if params.is_empty() { "" } else { "," };
    // Everything the request needs is in it: `_meta`, and headers a proxy routes on.
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{params}{comma}"_meta":{{"io.modelcontextprotocol/protocolVersion":"{STATELESS_VERSION}","io.modelcontextprotocol/clientCapabilities":{capabilities}}}}}}}"#
    );
    let mut req = request(
        Method::POST,
        target,
        Some(&Session::stateless()),
        Some(body),
    )?;
    let headers = req.headers_mut();
    headers.insert("mcp-method", method.parse()?);
    headers.insert("mcp-name", name.parse()?);
    Ok(Messages::new(check(conn.send(req).await?).await?))
}

/// Calls `echo` and checks that the text comes back.
pub(crate) async fn echo(
    conn: &mut Conn,
    target: &Target,
    session: &Session,
    id: u64,
) -> Result<()> {
    let mut msgs = if session.stateless {
        let params = format!(r#""name":"echo","arguments":{{"text":"hello {id}"}}"#);
        post_stateless(conn, target, id, "tools/call", "echo", &params, false).await?
    } else {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hello {id}"}}}}}}"#
        );
        post(conn, target, Some(session), body).await?
    };
    let reply = await_reply(&mut msgs, id).await?;
    msgs.drain().await?;
    let result = result_of(&reply)?;
    let text = result
        .get("content")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str);
    if result.get("isError").and_then(Value::as_bool) == Some(true)
        || text.and_then(|t| t.strip_prefix("hello ")) != Some(id.to_string().as_str())
    {
        return Err(format!("echo {id}: unexpected result {result}").into());
    }
    Ok(())
}

/// Starts `stream_events(count, interval_ms)` with `token` as its progress token and
/// returns the response's messages, to be read by the caller.
pub(crate) async fn start_stream(
    conn: &mut Conn,
    target: &Target,
    session: &Session,
    id: u64,
    count: u64,
    interval_ms: u64,
    token: &str,
) -> Result<Messages> {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"stream_events","arguments":{{"count":{count},"interval_ms":{interval_ms}}},"_meta":{{"progressToken":"{token}"}}}}}}"#
    );
    post(conn, target, Some(session), body).await
}
