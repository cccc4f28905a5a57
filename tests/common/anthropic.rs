//! A loopback stand-in of the Anthropic Messages API (`POST /v1/messages`), the model a
//! host such as Claude Code talks to, so that the host really calls an MCP tool without a
//! model account. It is the only fake in the host tests: the host and otpmcp are real.
//!
//! Its whole script: while the host's request lists the tool it was told to call and no
//! earlier turn called it, it answers with a `tool_use` of that tool; while the tool is not
//! listed yet (the host still connecting its MCP servers) it asks the host's own
//! `WaitForMcpServers` tool to wait for that server; otherwise it ends the turn with a
//! text. It answers in SSE when the request asks for `stream: true`, else in JSON, and
//! keeps every request body so the test can see what the host sent.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::sync::watch;

/// The `tool_use` id of the call the stand-in asks for, so its `tool_result` can be found.
pub const CALL_ID: &str = "toolu_otpmcp_call";
/// Claude Code's tool that waits for MCP servers still connecting (interactive mode).
const WAIT_FOR_SERVERS: &str = "WaitForMcpServers";

/// A stand-in on a free loopback port, running until dropped.
pub struct StandIn {
    /// Its base URL, for `ANTHROPIC_BASE_URL`.
    pub url: String,
    requests: watch::Receiver<Vec<Value>>,
    open: watch::Sender<bool>,
    served: tokio::task::JoinHandle<()>,
}

/// What one handler needs: the tool to call and with what, the requests seen, the gate.
#[derive(Clone)]
struct Script {
    tool: String,
    input: Value,
    seen: watch::Sender<Vec<Value>>,
    open: watch::Receiver<bool>,
}

impl StandIn {
    /// Starts a stand-in that has the host call `tool` (as the host names it, e.g.
    /// `mcp__otpmcp__echo`) with `input`.
    pub async fn start(tool: &str, input: Value) -> Self {
        let (seen, requests) = watch::channel(Vec::new());
        let (open, gate) = watch::channel(true);
        let script = Script {
            tool: tool.to_owned(),
            input,
            seen,
            open: gate,
        };
        let count_tokens = post(|| async { json_response(&json!({"input_tokens": 1})) });
        let app = axum::Router::new()
            .route(
                "/v1/messages",
                post(move |body: Bytes| answer(script.clone(), body)),
            )
            .route("/v1/messages/count_tokens", count_tokens);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("stand-in bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("stand-in addr: {e}"));
        let served = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}"),
            requests,
            open,
            served,
        }
    }

    /// Holds every answer that would end the turn after the tool's result came back,
    /// until [`StandIn::release`]: the host then keeps its MCP servers running, so the
    /// test can look at a stdio server's side before the host stops it.
    pub fn hold_final_answer(&self) {
        self.open.send_replace(false);
    }

    pub fn release(&self) {
        self.open.send_replace(true);
    }

    /// Every request body received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.requests.borrow().clone()
    }

    /// Waits up to `limit` for a request for which `found` gives something; returns it,
    /// or `None` at the limit.
    pub async fn wait_for<T>(
        &self,
        limit: Duration,
        found: impl Fn(&Value) -> Option<T>,
    ) -> Option<T> {
        let mut requests = self.requests.clone();
        let waited = tokio::time::timeout(limit, async {
            let mut seen = 0;
            loop {
                let hit = {
                    let all = requests.borrow_and_update();
                    let hit = all[seen..].iter().find_map(&found);
                    seen = all.len();
                    hit
                };
                if let Some(hit) = hit {
                    return Some(hit);
                }
                if requests.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await;
        waited.ok().flatten()
    }

    /// Waits for the request that carries the result of the call it asked for; returns
    /// that result's text.
    pub async fn tool_result(&self, limit: Duration) -> Option<String> {
        self.wait_for(limit, |body| tool_result(body, CALL_ID))
            .await
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.served.abort();
    }
}

/// The text of the `tool_result` for `id` in the last message of `body`, if there is one.
pub fn tool_result(body: &Value, id: &str) -> Option<String> {
    let last = body["messages"].as_array()?.last()?;
    let block = last["content"]
        .as_array()?
        .iter()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)?;
    Some(text_of(&block["content"]))
}

/// The text of every text block of the last message of `body`, joined.
pub fn last_texts(body: &Value) -> String {
    let Some(last) = body["messages"].as_array().and_then(|m| m.last()) else {
        return String::new();
    };
    text_of(&last["content"])
}

/// A content value as text: a string, or the text of each text block.
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Whether an assistant turn of `body` already called `tool`.
fn called(body: &Value, tool: &str) -> bool {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .any(|b| b["type"] == "tool_use" && b["name"] == tool)
}

fn lists(body: &Value, tool: &str) -> bool {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|t| t["name"] == tool)
}

async fn answer(script: Script, body: Bytes) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        return error(StatusCode::BAD_REQUEST, "the body is not JSON");
    };
    script.seen.send_modify(|all| all.push(body.clone()));
    // `mcp__SERVER__TOOL`: the server's name, for WaitForMcpServers.
    let server = script.tool.split("__").nth(1).unwrap_or_default();
    let block = if lists(&body, &script.tool) && !called(&body, &script.tool) {
        Some(json!({"type": "tool_use", "id": CALL_ID, "name": script.tool, "input": script.input}))
    } else if !lists(&body, &script.tool)
        && lists(&body, WAIT_FOR_SERVERS)
        && !called(&body, WAIT_FOR_SERVERS)
    {
        Some(
            json!({"type": "tool_use", "id": "toolu_wait", "name": WAIT_FOR_SERVERS,
            "input": {"servers": [server]}}),
        )
    } else {
        None
    };
    if block.is_none() && tool_result(&body, CALL_ID).is_some() {
        let mut open = script.open.clone();
        // Dropped only with the stand-in, and then nobody reads the answer.
        let _ = open.wait_for(|open| *open).await;
    }
    let (block, stop) = match block {
        Some(call) => (call, "tool_use"),
        None => (json!({"type": "text", "text": "done"}), "end_turn"),
    };
    let model = body["model"].as_str().unwrap_or("stand-in").to_owned();
    if body["stream"] == true {
        sse_response(&model, &block, stop)
    } else {
        json_response(&json!({
            "id": "msg_standin", "type": "message", "role": "assistant", "model": model,
            "content": [block], "stop_reason": stop, "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}
        }))
    }
}

/// The message as the streaming API sends it: start, one content block (its input or
/// text in one delta), the stop reason, stop.
fn sse_response(model: &str, block: &Value, stop: &str) -> Response {
    let (start, delta) = if block["type"] == "tool_use" {
        let mut start = block.clone();
        start["input"] = json!({});
        let partial = block["input"].to_string();
        (
            start,
            json!({"type": "input_json_delta", "partial_json": partial}),
        )
    } else {
        (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        )
    };
    let events = [
        (
            "message_start",
            json!({"type": "message_start", "message": {
            "id": "msg_standin", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": 1, "output_tokens": 1}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": start}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 1}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ];
    let text: String = events
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect();
    respond(StatusCode::OK, "text/event-stream", text)
}

fn json_response(body: &Value) -> Response {
    respond(StatusCode::OK, "application/json", body.to_string())
}

fn error(status: StatusCode, message: &str) -> Response {
    let body =
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}});
    respond(status, "application/json", body.to_string())
}

fn respond(status: StatusCode, content_type: &str, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    if let Ok(value) = header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}
