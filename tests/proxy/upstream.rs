//! A stand-in upstream for the proxy's security tests, on a free loopback port: it logs
//! every request that reaches it (so a test can tell that nothing was forwarded) and
//! answers just enough MCP. `initialize` gets a session id of its own (`live-…`, what a
//! recording must not hold); a request for method `flood` gets an SSE stream of
//! [`FLOOD`] bare line feeds and then one event, as a hostile upstream might send; any
//! other POST gets an empty result.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Value, json};

/// Bytes of bare line feeds in a `flood` answer.
pub(crate) const FLOOD: usize = 4 << 20;
/// What ends a `flood` answer.
pub(crate) const FLOOD_END: &str = "data: done\n\n";

/// A request that reached the stand-in.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// Path and query, as received.
    pub(crate) uri: String,
    /// Its headers.
    pub(crate) headers: http::HeaderMap,
}

/// The running stand-in.
pub(crate) struct Upstream {
    /// Its MCP endpoint.
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Upstream {
    pub(crate) async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local_addr: {e}"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let router = axum::Router::new()
            .fallback(answer)
            .with_state(seen.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router).await;
        });
        Self {
            url: format!("http://{addr}/mcp"),
            seen,
            task,
        }
    }

    /// Every request received so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

async fn answer(State(seen): State<Arc<Mutex<Vec<Seen>>>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    if let Ok(mut seen) = seen.lock() {
        seen.push(Seen {
            uri: parts.uri.to_string(),
            headers: parts.headers.clone(),
        });
    }
    let body = axum::body::to_bytes(body, 1 << 20)
        .await
        .unwrap_or_default();
    let request: Value = serde_json::from_slice(&body).unwrap_or_default();
    let response = Response::builder().status(200);
    match request["method"].as_str() {
        Some("flood") => {
            let chunk = bytes::Bytes::from(vec![b'\n'; 64 << 10]);
            let chunks = std::iter::repeat_n(chunk, FLOOD / (64 << 10))
                .chain([bytes::Bytes::from_static(FLOOD_END.as_bytes())])
                .map(Ok::<_, std::convert::Infallible>);
            response
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(futures_util::stream::iter(chunks)))
        }
        Some(method) => {
            let result =
                json!({"jsonrpc": "2.0", "id": request["id"], "result": {"method": method}});
            let mut response = response.header("content-type", "application/json");
            if method == "initialize" {
                let live = format!("live-{}", uuid::Uuid::new_v4().simple());
                response = response.header("mcp-session-id", live);
            }
            response.body(Body::from(result.to_string()))
        }
        None => response.status(202).body(Body::empty()),
    }
    .unwrap_or_else(|e| panic!("a response: {e}"))
}
