//! A raw-HTTP client of the stateless revision (2026-07-28): every request carries its
//! `_meta` and routing headers. Its answers are read whole, JSON or SSE.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use otpmcp::handler::{Tool, tool};
use otpmcp::protocol::client::Elicitation;
use otpmcp::protocol::methods::{CallToolResult, TaskSupport};
use serde_json::{Value, json};

use super::{eventually, within};

/// Sets its flag when dropped: a handler holding one was dropped (cancelled).
pub struct Dropped(pub Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// `confirm`: asks for a yes (may run as a task), answers `ok=<the answer's ok>`.
pub fn confirm_tool() -> Tool {
    tool("confirm", |(), ctx| async move {
        let form = json!({"type": "object", "properties": {"ok": {"type": "boolean"}}});
        let answer = ctx.elicit(Elicitation::form("Sure?", form)).await?;
        let ok = answer.content.and_then(|c| c.get("ok").cloned());
        Ok(CallToolResult::text(format!(
            "ok={}",
            ok.unwrap_or(Value::Null)
        )))
    })
    .description("Asks for a yes.")
    .task_support(TaskSupport::Optional)
}

/// `wait`: works until cancelled (may run as a task); sets `dropped` when stopped.
pub fn wait_tool(dropped: Arc<AtomicBool>) -> Tool {
    tool("wait", move |(), _| {
        let guard = Dropped(dropped.clone());
        async move {
            let _guard = guard;
            std::future::pending::<()>().await;
            Ok(CallToolResult::text("never"))
        }
    })
    .description("Works until cancelled.")
    .task_support(TaskSupport::Optional)
}

pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// What came back: the HTTP status, the answer, and the notifications before it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    pub message: Value,
    pub notes: Vec<Value>,
}

impl Answer {
    pub fn result(&self) -> &Value {
        &self.message["result"]
    }

    pub fn error_code(&self) -> Option<i64> {
        self.message["error"]["code"].as_i64()
    }
}

#[derive(Debug, Clone)]
pub struct Stateless {
    pub url: String,
    pub capabilities: Value,
    http: reqwest::Client,
    next: Arc<AtomicI64>,
}

impl Stateless {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_owned(),
            capabilities: json!({}),
            http: reqwest::Client::new(),
            next: Arc::new(AtomicI64::new(1)),
        }
    }

    /// Declares the tasks extension (and elicitation) on every request.
    pub fn with_tasks(mut self) -> Self {
        self.capabilities = json!({"elicitation": {}, "extensions": {TASKS: {}}});
        self
    }

    /// Opens `subscriptions/listen` for `notifications` and reads its acknowledgement:
    /// the stream, and the acknowledgement's `params`.
    pub async fn listen(&self, notifications: Value) -> (super::SseReader, Value) {
        let (_, req) = self.post(
            "subscriptions/listen",
            json!({ "notifications": notifications }),
        );
        let resp = within("listen", req.send())
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut stream = super::SseReader::new(resp);
        let ack = stream.next_json().await;
        assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
        (stream, ack["params"].clone())
    }

    /// The same client sending `Authorization: Bearer <token>`.
    pub fn with_token(mut self, token: &str) -> Self {
        self.http = super::bearer_client(token);
        self
    }

    /// The same client connecting from local address `ip` (a loopback address other than
    /// 127.0.0.1 stands for another client machine).
    pub fn bound_to(mut self, ip: std::net::IpAddr) -> Self {
        self.http = reqwest::Client::builder()
            .local_address(ip)
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        self
    }

    /// The same client talking to another server.
    pub fn at(&self, url: &str) -> Self {
        Self {
            url: url.to_owned(),
            ..self.clone()
        }
    }

    /// A request as the revision wants it: `_meta` and headers.
    pub fn post(&self, method: &str, params: Value) -> (i64, reqwest::RequestBuilder) {
        self.post_named(method, params, None)
    }

    /// [`Stateless::post`] with `Mcp-Name` set to `name` instead of the body's.
    pub fn post_named(
        &self,
        method: &str,
        params: Value,
        name: Option<&str>,
    ) -> (i64, reqwest::RequestBuilder) {
        self.build(method, params, name, true)
    }

    /// [`Stateless::post`] without an `Mcp-Name` header, as some clients send `tasks/*`.
    pub fn post_without_name(&self, method: &str, params: Value) -> (i64, reqwest::RequestBuilder) {
        self.build(method, params, None, false)
    }

    fn build(
        &self,
        method: &str,
        mut params: Value,
        name: Option<&str>,
        named: bool,
    ) -> (i64, reqwest::RequestBuilder) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        // The request's own `_meta` keys (progressToken, logLevel) are kept.
        let mut meta = params["_meta"].as_object().cloned().unwrap_or_default();
        meta.insert(
            "io.modelcontextprotocol/protocolVersion".into(),
            json!("2026-07-28"),
        );
        meta.insert(
            "io.modelcontextprotocol/clientCapabilities".into(),
            self.capabilities.clone(),
        );
        params["_meta"] = Value::Object(meta);
        let name = name.or(match method {
            _ if !named => None,
            "tools/call" | "prompts/get" => params["name"].as_str(),
            "resources/read" => params["uri"].as_str(),
            "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/stream" => {
                params["taskId"].as_str()
            }
            _ => None,
        });
        let mut req = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method);
        if let Some(name) = name {
            req = req.header("mcp-name", name);
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        (id, req.body(body.to_string()))
    }

    /// Sends a request and reads its whole answer.
    pub async fn ask(&self, method: &str, params: Value) -> Answer {
        self.answer(method, self.post(method, params)).await
    }

    /// Sends a request made by [`Stateless::post`] or its kin and reads its whole answer.
    pub async fn answer(&self, method: &str, (id, req): (i64, reqwest::RequestBuilder)) -> Answer {
        let resp = within("a stateless answer", req.send())
            .await
            .unwrap_or_else(|e| panic!("POST {method}: {e}"));
        Self::read(method, id, resp).await
    }

    /// Reads the whole answer to request `id` from `resp`.
    pub async fn read(method: &str, id: i64, resp: reqwest::Response) -> Answer {
        let status = resp.status().as_u16();
        let sse = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let text = within("the body", resp.text())
            .await
            .unwrap_or_else(|e| panic!("body: {e}"));
        let messages: Vec<Value> = if sse {
            text.lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str(d.trim()).ok())
                .collect()
        } else {
            vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))]
        };
        let (answer, notes): (Vec<Value>, Vec<Value>) =
            messages.into_iter().partition(|m| m["id"] == json!(id));
        let message = answer
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("no answer to {method} in {text}"));
        Answer {
            status,
            message,
            notes,
        }
    }

    /// Calls `tool`; its answer must be a task: returns the task's id.
    pub async fn start_task(&self, tool: &str, arguments: Value) -> String {
        let answer = self
            .ask("tools/call", json!({"name": tool, "arguments": arguments}))
            .await;
        let result = answer.result();
        assert_eq!(result["resultType"], "task", "{:?}", answer.message);
        result["taskId"]
            .as_str()
            .unwrap_or_else(|| panic!("no taskId: {result}"))
            .to_owned()
    }

    /// `tasks/get`.
    pub async fn task(&self, id: &str) -> Answer {
        self.ask("tasks/get", json!({"taskId": id})).await
    }

    /// Polls task `id` until its status is `status`; returns the task.
    pub async fn until_status(&self, id: &str, status: &str) -> Value {
        eventually(&format!("task {id} to be {status}"), || async {
            let task = self.task(id).await;
            (task.result()["status"] == status).then(|| task.result().clone())
        })
        .await
    }
}
