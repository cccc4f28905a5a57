//! `subscriptions/listen` (2026-07-28), whatever carries it: the filter a request asks
//! for and the server honours, the acknowledgement, each change as a tagged notification,
//! and the result that ends it. The transport frames them and decides when it ends
//! (shutdown, a closed connection).

use std::collections::HashSet;

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use super::McpServer;
use crate::auth::Principal;
use crate::protocol::meta::{RequestMeta, SERVER_INFO, SUBSCRIPTION_ID, TASKS_EXTENSION};
use crate::protocol::methods::{ListKind, notifications};
use crate::protocol::{ErrorObject, Notification, Outgoing, Request, RequestId};
use crate::server_news::{Heard, ServerNews};

/// A listen request the server accepted: subscribed to the server's news before the
/// client can learn it listens, so nothing after can be missed.
pub(crate) struct Listen {
    filter: Filter,
    /// The server's news, from the moment the request was accepted, until taken.
    news: Option<broadcast::Receiver<Heard>>,
    tag: Value,
    id: RequestId,
    server_info: Value,
}

impl McpServer {
    /// Accepts `subscriptions/listen` from `principal`, or says why not.
    pub(crate) fn listen(
        &self,
        request: &Request,
        meta: &RequestMeta,
        principal: Option<&Principal>,
    ) -> Result<Listen, ErrorObject> {
        let filter = Filter::read(self, request, meta, principal)?;
        Ok(Listen {
            filter,
            news: Some(self.news().subscribe()),
            tag: serde_json::to_value(&request.id).unwrap_or(Value::Null),
            id: request.id.clone(),
            server_info: self.info_json(),
        })
    }
}

impl Listen {
    /// The server's news since the request was accepted, for whoever waits on it (once).
    pub(crate) fn take_news(&mut self) -> Option<broadcast::Receiver<Heard>> {
        self.news.take()
    }

    /// The acknowledgement, the stream's first message.
    pub(crate) fn acknowledgement(&self) -> Bytes {
        self.filter.acknowledgement(&self.tag)
    }

    /// The message `news` makes for this listener, if it asked for it.
    pub(crate) fn message(&self, news: &ServerNews) -> Option<Bytes> {
        self.filter.message(news, &self.tag)
    }

    /// The request's result, its graceful end.
    pub(crate) fn result(&self) -> Outgoing {
        Outgoing::Result {
            id: self.id.clone(),
            result: listen_result(&self.tag, &self.server_info),
        }
    }

    /// The request's id.
    pub(crate) fn id(&self) -> &RequestId {
        &self.id
    }
}

/// Most resource URIs and task ids one listen request may name.
pub(crate) const MAX_LISTEN_ITEMS: usize = 256;

/// What a listen stream sends: the part of the request's filter the server honours (the
/// same over HTTP and stdio).
#[derive(Debug, Default)]
pub(crate) struct Filter {
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
    fn read(
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
    pub(crate) fn acknowledgement(&self, tag: &Value) -> Bytes {
        let mut params = Map::new();
        params.insert("notifications".into(), self.acknowledged());
        tagged_message(notifications::SUBSCRIPTIONS_ACKNOWLEDGED, params, tag)
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
    pub(crate) fn message(&self, news: &ServerNews, tag: &Value) -> Option<Bytes> {
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
                (notifications::RESOURCE_UPDATED, params)
            }),
            // Another principal's task is never told, even to a listener that knows its id.
            ServerNews::Task {
                task_id,
                task,
                owner,
            } => (self.tasks.contains(task_id.as_str()) && *owner == self.owner).then(|| {
                let params = task.as_object().cloned().unwrap_or_default();
                (notifications::TASKS, params)
            }),
        }
    }
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
fn listen_result(tag: &Value, server_info: &Value) -> Value {
    json!({
        "resultType": "complete",
        "_meta": { SUBSCRIPTION_ID: tag, SERVER_INFO: server_info },
    })
}
