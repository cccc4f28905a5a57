//! A loopback stand-in of the OpenAI Responses API (`POST …/responses`, streamed as SSE),
//! the model behind Codex and Copilot CLI's BYOK mode in the host tests: the only fake
//! there. What it answers is the test's script (a function of the request); every
//! request is kept, so a test reads what the host sent: the tools it offered, and the
//! output of each function call.

use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri, header};
use axum::response::Response;
use serde_json::{Value, json};

/// One turn of the model: call a function, or say something and stop.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A function call: `namespace` for a tool Codex groups under its server
    /// (`mcp__NAME`), `None` for a flat one (Copilot's `NAME-tool`).
    Call {
        name: String,
        namespace: Option<String>,
        arguments: Value,
    },
    /// A final message: the host's turn ends.
    Say(String),
}

type Script = dyn Fn(&Value) -> Reply + Send + Sync;

struct Shared {
    script: Box<Script>,
    /// Every request body, in order of arrival.
    seen: tokio::sync::watch::Sender<Vec<Value>>,
}

/// The running stand-in; `url` is its base (`…/v1`), as the hosts' settings take it.
pub struct Responses {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Responses {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Responses {
    /// Serves `script` on a free loopback port.
    pub async fn start(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let shared = Arc::new(Shared {
            script: Box::new(script),
            seen: tokio::sync::watch::Sender::new(Vec::new()),
        });
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url: format!("http://{addr}/v1"),
            shared,
            task,
        }
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.seen.borrow().clone()
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    body: Bytes,
) -> Response {
    if method != Method::POST || !uri.path().ends_with("/responses") {
        return status(StatusCode::NOT_FOUND);
    }
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let reply = (shared.script)(&request);
    let mut n = 0;
    shared.seen.send_modify(|seen| {
        seen.push(request);
        n = seen.len();
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from(events(n, &reply)))
        .unwrap_or_else(|_| status(StatusCode::INTERNAL_SERVER_ERROR))
}

fn status(code: StatusCode) -> Response {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = code;
    resp
}

/// The SSE body of response `n`: created, the one output item added and done, completed.
fn events(n: usize, reply: &Reply) -> String {
    let item = match reply {
        Reply::Call {
            name,
            namespace,
            arguments,
        } => {
            let mut item = json!({
                "type": "function_call", "id": format!("fc_{n}"), "call_id": format!("call_{n}"),
                "name": name, "arguments": arguments.to_string(), "status": "completed",
            });
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            item
        }
        Reply::Say(text) => json!({
            "type": "message", "id": format!("msg_{n}"), "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }),
    };
    let id = format!("resp_{n}");
    let usage = json!({
        "input_tokens": 1, "output_tokens": 1, "total_tokens": 2,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    });
    let frames = [
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": id, "object": "response", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "sequence_number": 1, "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "sequence_number": 2, "output_index": 0, "item": item}),
        json!({"type": "response.completed", "sequence_number": 3,
               "response": {"id": id, "object": "response", "status": "completed", "output": [item], "usage": usage}}),
    ];
    frames
        .iter()
        .map(|f| format!("event: {}\ndata: {f}\n\n", f["type"].as_str().unwrap_or("")))
        .collect()
}

/// The call of tool `tool` of MCP server `server` as the host offered it in `request`:
/// Codex nests a server's tools in a namespace `mcp__SERVER`, Copilot names them
/// `SERVER-TOOL`. `None` when the host did not offer it.
pub fn offered_call(request: &Value, server: &str, tool: &str, arguments: Value) -> Option<Reply> {
    let tools = request["tools"].as_array()?;
    let flat = format!("{server}-{tool}");
    let namespace = format!("mcp__{server}");
    tools.iter().find_map(|t| {
        if t["type"] == "namespace" && t["name"] == namespace.as_str() {
            let inner = t["tools"].as_array()?;
            inner
                .iter()
                .any(|f| f["name"] == tool)
                .then(|| Reply::Call {
                    name: tool.to_owned(),
                    namespace: Some(namespace.clone()),
                    arguments: arguments.clone(),
                })
        } else if t["name"] == flat.as_str() {
            Some(Reply::Call {
                name: flat.clone(),
                namespace: None,
                arguments: arguments.clone(),
            })
        } else {
            None
        }
    })
}

/// The tools of `server` the host offered in `request`, by their MCP names.
pub fn offered_tools(request: &Value, server: &str) -> Vec<String> {
    let flat = format!("{server}-");
    let namespace = format!("mcp__{server}");
    let mut names = Vec::new();
    for t in request["tools"].as_array().into_iter().flatten() {
        if t["type"] == "namespace" && t["name"] == namespace.as_str() {
            for f in t["tools"].as_array().into_iter().flatten() {
                names.extend(f["name"].as_str().map(str::to_owned));
            }
        } else if let Some(tool) = t["name"].as_str().and_then(|n| n.strip_prefix(&flat)) {
            names.push(tool.to_owned());
        }
    }
    names
}

/// The text of every function output in `request`'s input, in order: a string, or the
/// texts of its parts.
pub fn outputs(request: &Value) -> Vec<String> {
    let items = request["input"].as_array().into_iter().flatten();
    items
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| match &i["output"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n"),
            other => other.to_string(),
        })
        .collect()
}

/// The usual script: the first request (no function output yet) calls `tool` of
/// `server` with `arguments` if the host offered it, and says so and stops if not; once
/// an output has come back, a final message.
pub fn call_then_finish(
    server: &str,
    tool: &str,
    arguments: Value,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let (server, tool) = (server.to_owned(), tool.to_owned());
    move |request| {
        if outputs(request).is_empty() {
            offered_call(request, &server, &tool, arguments.clone())
                .unwrap_or_else(|| Reply::Say(format!("{server}/{tool} was not offered")))
        } else {
            Reply::Say("done".into())
        }
    }
}
