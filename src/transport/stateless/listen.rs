//! `subscriptions/listen` (2026-07-28): one long-lived SSE stream per listen request. It
//! opens with the acknowledgement naming what the server will send of what was asked,
//! then carries each change the request asked for, tagged with the request's id, from
//! this replica or (through the cluster) any other; comments keep it alive. When the
//! server shuts down it ends with the request's result; when the listener falls too far
//! behind it ends without one, and the client listens again.

use crate::telemetry::metrics::{STREAMS_OPEN, StreamKind, Tracked};
use std::collections::HashSet;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Frame, SizeHint};
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use tokio::time::Interval;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::{AppState, error_response};
use crate::auth::Principal;
use crate::handler::BoxFuture;
use crate::protocol::meta::{RequestMeta, SERVER_INFO, SUBSCRIPTION_ID, TASKS_EXTENSION};
use crate::protocol::methods::ListKind;
use crate::protocol::{ErrorObject, Notification, Outgoing, Request, RequestId};
use crate::server::McpServer;
use crate::server_news::{Heard, ServerNews};
use crate::stream::sse;

/// Most resource URIs and task ids one listen request may name.
pub(super) const MAX_LISTEN_ITEMS: usize = 256;

/// What a listen stream sends: the part of the request's filter the server honours (the
/// same over HTTP and stdio).
#[derive(Debug, Default)]
pub(in crate::transport) struct Filter {
    tools: bool,
    prompts: bool,
    resources: bool,
    uris: HashSet<String>,
    tasks: HashSet<String>,
    /// The listener's principal (`[auth]`), as task records name it.
    owner: Option<String>,
}

impl Filter {
    /// The honoured part of `params.notifications`, or why the request is refused.
    pub(in crate::transport) fn read(
        server: &McpServer,
        request: &Request,
        meta: &RequestMeta,
        principal: Option<&Principal>,
    ) -> Result<Self, ErrorObject> {
        let Some(asked) = request.listen_filter().and_then(Value::as_object) else {
            return Err(ErrorObject::invalid_params(
                "Invalid params: subscriptions/listen needs a notifications object",
            ));
        };
        let flag = |key: &str| asked.get(key).and_then(Value::as_bool).unwrap_or(false);
        let list = |key: &str| -> Result<Vec<String>, ErrorObject> {
            match asked.get(key) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(items)) if items.len() <= MAX_LISTEN_ITEMS => items
                    .iter()
                    .map(|i| {
                        i.as_str().map(str::to_owned).ok_or_else(|| {
                            ErrorObject::invalid_params(format!(
                                "Invalid params: {key} must list strings"
                            ))
                        })
                    })
                    .collect(),
                Some(_) => Err(ErrorObject::invalid_params(format!(
                    "Invalid params: {key} must be an array of at most {MAX_LISTEN_ITEMS} strings"
                ))),
            }
        };
        let task_ids = list("taskIds")?;
        if !task_ids.is_empty() && !meta.declares_tasks() {
            return Err(ErrorObject::missing_capability(
                json!({ "extensions": { TASKS_EXTENSION: {} } }),
            ));
        }
        let has_resources = server.offers(ListKind::Resources);
        // A URI is honoured when `resources/subscribe` to it would be, its scopes
        // included; one the caller may not watch is left out of the acknowledgement, as
        // an unknown one is, so the answer does not tell a protected URI from a missing
        // one.
        let may_watch = |uri: &String| {
            has_resources
                && server.accepts_subscription(uri)
                && principal.is_none_or(|p| p.has_scopes(&server.resource_scopes(uri)))
        };
        Ok(Self {
            tools: flag("toolsListChanged"),
            prompts: flag("promptsListChanged") && server.offers(ListKind::Prompts),
            resources: flag("resourcesListChanged") && has_resources,
            uris: list("resourceSubscriptions")?
                .into_iter()
                .filter(may_watch)
                .collect(),
            tasks: task_ids.into_iter().collect(),
            owner: principal.map(|p| p.owner().to_string()),
        })
    }

    /// The acknowledgement: `notifications/subscriptions/acknowledged` naming the honoured
    /// filter, tagged with the listen request's id (`tag`), as a JSON-RPC message.
    pub(in crate::transport) fn acknowledgement(&self, tag: &Value) -> Bytes {
        let mut params = Map::new();
        params.insert("notifications".into(), self.acknowledged());
        tagged_message("notifications/subscriptions/acknowledged", params, tag)
    }

    /// The acknowledged filter, as the acknowledgement lists it.
    fn acknowledged(&self) -> Value {
        let mut out = Map::new();
        for (key, on) in [
            ("toolsListChanged", self.tools),
            ("promptsListChanged", self.prompts),
            ("resourcesListChanged", self.resources),
        ] {
            if on {
                out.insert(key.into(), Value::Bool(true));
            }
        }
        if !self.uris.is_empty() {
            out.insert("resourceSubscriptions".into(), json!(self.uris));
        }
        if !self.tasks.is_empty() {
            out.insert("taskIds".into(), json!(self.tasks));
        }
        Value::Object(out)
    }

    /// The tagged notification for `news` as a JSON-RPC message, if this stream asked
    /// for it.
    pub(in crate::transport) fn message(&self, news: &ServerNews, tag: &Value) -> Option<Bytes> {
        self.notification(news)
            .map(|(method, params)| tagged_message(method, params, tag))
    }

    /// The notification for `news`, if this stream asked for it.
    fn notification(&self, news: &ServerNews) -> Option<(&'static str, Map<String, Value>)> {
        match news {
            ServerNews::ListChanged { list } => {
                let wanted = match list {
                    ListKind::Tools => self.tools,
                    ListKind::Prompts => self.prompts,
                    ListKind::Resources => self.resources,
                };
                wanted.then(|| (list.notification(), Map::new()))
            }
            ServerNews::ResourceUpdated { uri } => self.uris.contains(uri).then(|| {
                let mut params = Map::new();
                params.insert("uri".into(), Value::String(uri.clone()));
                ("notifications/resources/updated", params)
            }),
            // Another principal's task is never told, even to a listener that knows its id.
            ServerNews::Task {
                task_id,
                task,
                owner,
            } => (self.tasks.contains(task_id.as_str()) && *owner == self.owner).then(|| {
                let params = task.as_object().cloned().unwrap_or_default();
                ("notifications/tasks", params)
            }),
        }
    }
}

/// Serves `subscriptions/listen`.
pub(super) fn serve(
    state: &AppState,
    request: Request,
    meta: RequestMeta,
    principal: Option<&Principal>,
) -> Response {
    let filter = match Filter::read(&state.inner.server, &request, &meta, principal) {
        Ok(filter) => filter,
        Err(error) => {
            let status = if error.code == ErrorObject::MISSING_CAPABILITY {
                StatusCode::BAD_REQUEST
            } else {
                StatusCode::OK
            };
            return error_response(Some(request.id), error, status);
        }
    };
    let inner = &state.inner;
    let Some(counted) = Counted::admit(
        &inner.listening,
        inner.config.stateless.max_listen_streams.get(),
    ) else {
        let error = ErrorObject::internal(
            "too many listen streams are open on this server (stateless.max_listen_streams); try again later",
        );
        return error_response(Some(request.id), error, StatusCode::SERVICE_UNAVAILABLE);
    };
    // Subscribed before the acknowledgement is built: nothing that happens after the
    // client learns it is listening can be missed.
    let news = inner.server.news().subscribe();
    let tag = serde_json::to_value(&request.id).unwrap_or(Value::Null);
    let ack = sse::message(None, &filter.acknowledgement(&tag));
    let ticks = super::keepalive(inner.config.sse.keepalive_interval.get());
    let listening = Listening {
        pending: Some(ack),
        next: Some(recv(news)),
        filter,
        tag,
        id: request.id,
        server_info: inner.server.info_json(),
        shutdown: Box::pin(inner.shutdown.clone().cancelled_owned()),
        keepalive: ticks,
        done: false,
        _counted: counted,
        _open: STREAMS_OPEN.track(StreamKind::Listen),
    };
    super::super::sse_response(Body::new(listening))
}

type Recv = BoxFuture<
    'static,
    (
        Result<Heard, broadcast::error::RecvError>,
        broadcast::Receiver<Heard>,
    ),
>;

fn recv(mut rx: broadcast::Receiver<Heard>) -> Recv {
    Box::pin(async move { (rx.recv().await, rx) })
}

/// A notification with the listen request's id in `_meta`, as a JSON-RPC message.
fn tagged_message(method: &str, mut params: Map<String, Value>, tag: &Value) -> Bytes {
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(SUBSCRIPTION_ID.into(), tag.clone());
    }
    Outgoing::Notification(Notification {
        method: method.into(),
        params: Some(Value::Object(params)),
    })
    .to_bytes()
}

/// A listen request's result, its graceful end: `tag` is its id, `server_info` this
/// server's name and version.
pub(in crate::transport) fn listen_result(tag: &Value, server_info: &Value) -> Value {
    json!({
        "resultType": "complete",
        "_meta": { SUBSCRIPTION_ID: tag, SERVER_INFO: server_info },
    })
}

struct Listening {
    /// A frame to send before anything else (the acknowledgement).
    pending: Option<Bytes>,
    next: Option<Recv>,
    filter: Filter,
    tag: Value,
    id: RequestId,
    server_info: Value,
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    keepalive: Interval,
    done: bool,
    _counted: Counted,
    /// Counts in `otpmcp_streams_open`.
    _open: Tracked,
}

/// One open listen stream, counted while it lives.
struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more stream, unless `max` are open.
    fn admit(open: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        let before = open.fetch_add(1, Ordering::AcqRel);
        if before >= max {
            open.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(open.clone()))
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Listening {
    /// The listen request's result: the graceful end.
    fn result(&self) -> Bytes {
        let answer = Outgoing::Result {
            id: self.id.clone(),
            result: listen_result(&self.tag, &self.server_info),
        };
        sse::message(None, &answer.to_bytes())
    }
}

impl http_body::Body for Listening {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Some(frame) = this.pending.take() {
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if this.done {
            return Poll::Ready(None);
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.done = true;
            return Poll::Ready(Some(Ok(Frame::data(this.result()))));
        }
        while let Some(next) = this.next.as_mut() {
            let Poll::Ready((heard, rx)) = next.as_mut().poll(cx) else {
                break;
            };
            this.next = Some(recv(rx));
            match heard {
                Ok(heard) => {
                    if let Some(message) = this.filter.message(&heard.news, &this.tag) {
                        return Poll::Ready(Some(Ok(Frame::data(sse::message(None, &message)))));
                    }
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    // Changes were lost: end without a result, so the client listens
                    // again and re-reads what it cares about.
                    tracing::info!(missed, "a listen stream fell behind; closing it");
                    return Poll::Ready(None);
                }
                Err(broadcast::error::RecvError::Closed) => {
                    this.done = true;
                    return Poll::Ready(Some(Ok(Frame::data(this.result()))));
                }
            }
        }
        if this.keepalive.poll_tick(cx).is_ready() {
            return Poll::Ready(Some(Ok(Frame::data(sse::comment("keepalive")))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.pending.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
