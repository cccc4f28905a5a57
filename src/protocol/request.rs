//! A request and a notification as they arrive, and the typed readers of their params:
//! the one place below the edge where params are read. The layers above match on
//! [`Request::kind`], ask for a method's typed params ([`Request::params_as`]) or for one
//! named field, and never look into the JSON themselves.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::method::{Method, NameParam, NotificationKind};
use super::{ErrorObject, RequestId, request_state};

/// A request: expects a response with the same id.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The id to answer with.
    pub id: RequestId,
    /// Method name.
    pub method: String,
    /// The method, classified once when the request is made ([`Request::new`]): the
    /// layers above match on it and never parse the name again.
    pub kind: Method,
    /// Parameters, if any.
    pub params: Option<Value>,
}

impl Request {
    /// A request of `method`, classified here (the one place a method name is parsed).
    pub fn new(id: RequestId, method: impl Into<String>, params: Option<Value>) -> Self {
        let method = method.into();
        Self {
            kind: Method::parse(&method),
            id,
            method,
            params,
        }
    }

    /// `params[key]`, when present. The named readers below are the ones the layers above
    /// use; what a method's params mean whole is read by its typed params.
    pub(crate) fn param(&self, key: &str) -> Option<&Value> {
        self.params.as_ref()?.get(key)
    }

    fn param_str(&self, key: &str) -> Option<&str> {
        self.param(key)?.as_str()
    }

    /// `params.name`: the tool (`tools/call`) or prompt (`prompts/get`) asked for.
    pub fn name(&self) -> Option<&str> {
        self.param_str("name")
    }

    /// `params.uri`: the resource asked for.
    pub fn uri(&self) -> Option<&str> {
        self.param_str("uri")
    }

    /// `params.taskId` (`tasks/*`).
    pub fn task_id(&self) -> Option<&str> {
        self.param_str("taskId")
    }

    /// The param that names what the request is about, as its method's spec says
    /// ([`super::method::Routing`]): `params.name`, `params.uri` or `params.taskId`.
    pub fn named(&self, param: NameParam) -> Option<&str> {
        self.param_str(param.key())
    }

    /// `params.arguments` (`tools/call`).
    pub fn arguments(&self) -> Option<&Value> {
        self.param("arguments")
    }

    /// `params.ref` (`completion/complete`): the prompt or resource completed.
    pub fn completion_ref(&self) -> Option<&Value> {
        self.param("ref")
    }

    /// `params.inputResponses` (a 2026-07-28 round's answers, `tasks/update`), as sent.
    pub fn input_responses(&self) -> Option<&Value> {
        self.param("inputResponses")
    }

    /// `params.requestState` (a 2026-07-28 round's signed state), as sent.
    pub fn request_state(&self) -> Option<&Value> {
        self.param("requestState")
    }

    /// `params.notifications` (`subscriptions/listen`), as sent.
    pub fn listen_filter(&self) -> Option<&Value> {
        self.param("notifications")
    }

    /// `params._meta`, when it is an object.
    pub fn meta(&self) -> Option<&serde_json::Map<String, Value>> {
        meta_of(self.params.as_ref())
    }

    /// `params._meta.progressToken`, when it is a string or an integer (anything else is
    /// no token).
    pub fn progress_token(&self) -> Option<&Value> {
        self.meta()?
            .get("progressToken")
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
    }

    /// The method's params as `T` (absent params read as `null`); -32602 naming what is
    /// wrong when they do not fit.
    pub fn params_as<T: DeserializeOwned>(&self) -> Result<T, ErrorObject> {
        T::deserialize(self.params.as_ref().unwrap_or(&Value::Null)).map_err(invalid_params)
    }

    /// [`Request::params_as`], taking the params rather than copying them.
    pub fn into_params<T: DeserializeOwned>(self) -> Result<T, ErrorObject> {
        serde_json::from_value(self.params.unwrap_or(Value::Null)).map_err(invalid_params)
    }

    /// The cursor of a list method's page (none: the first page).
    pub fn cursor(&self) -> Result<Option<String>, ErrorObject> {
        match &self.params {
            None | Some(Value::Null) => Ok(None),
            Some(_) => Ok(self.params_as::<ListParams>()?.cursor),
        }
    }

    /// What the request is about, for the scopes it needs: its tool, prompt or resource,
    /// and for `completion/complete` the prompt or resource its `ref` names.
    pub fn target(&self) -> Option<Target<'_>> {
        match self.kind {
            Method::ToolsCall => self.name().map(Target::Tool),
            Method::PromptsGet => self.name().map(Target::Prompt),
            Method::ResourcesRead | Method::ResourcesSubscribe => self.uri().map(Target::Resource),
            Method::Complete => {
                let reference = self.completion_ref()?;
                let text = |key| reference.get(key).and_then(Value::as_str);
                match text("type")? {
                    "ref/prompt" => text("name").map(Target::Prompt),
                    "ref/resource" => text("uri").map(Target::Resource),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    /// The digest a 2026-07-28 `requestState` is bound to: the params without what
    /// changes from round to round.
    pub fn params_digest(&self) -> String {
        request_state::params_digest(self.params.as_ref())
    }

    /// The params a task needs to run its call again: all but `_meta` and what belongs
    /// to one round (`inputResponses`, `requestState`, `task`).
    pub fn rerun_params(&self) -> Value {
        let mut params = self
            .params
            .clone()
            .unwrap_or_else(|| Value::Object(Map::new()));
        if let Some(object) = params.as_object_mut() {
            for key in ["_meta", "inputResponses", "requestState", "task"] {
                object.remove(key);
            }
        }
        params
    }
}

/// What a request is about: the tool, prompt or resource it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target<'a> {
    /// A tool, by name.
    Tool(&'a str),
    /// A prompt, by name.
    Prompt(&'a str),
    /// A resource, by URI.
    Resource(&'a str),
}

/// `list` params: the cursor of the page wanted.
#[derive(Default, Deserialize)]
struct ListParams {
    cursor: Option<String>,
}

fn invalid_params(e: serde_json::Error) -> ErrorObject {
    ErrorObject::invalid_params(format!("Invalid params: {e}"))
}

/// A notification: no response.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Notification {
    /// Method name.
    pub method: String,
    /// Parameters, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<Value>,
}

impl Notification {
    /// The notification, when it is one we know by name.
    pub fn kind(&self) -> Option<NotificationKind> {
        NotificationKind::parse(&self.method)
    }

    /// `params._meta`, when it is an object.
    pub fn meta(&self) -> Option<&serde_json::Map<String, Value>> {
        meta_of(self.params.as_ref())
    }

    /// `params.requestId` of `notifications/cancelled`: the request cancelled, when it is
    /// a valid id.
    pub fn cancelled_request(&self) -> Option<RequestId> {
        let id = self.params.as_ref()?.get("requestId")?;
        serde_json::from_value(id.clone()).ok()
    }
}

fn meta_of(params: Option<&Value>) -> Option<&serde_json::Map<String, Value>> {
    params?.get("_meta")?.as_object()
}

/// The W3C trace context a message carries in its `_meta` (`traceparent`, and with it
/// `tracestate` and `baggage` when they are strings); `None` without a `traceparent`.
pub fn trace_carrier(
    meta: Option<&serde_json::Map<String, Value>>,
) -> Option<std::collections::HashMap<String, String>> {
    let meta = meta?;
    meta.get("traceparent")?;
    Some(
        ["traceparent", "tracestate", "baggage"]
            .into_iter()
            .filter_map(|key| Some((key.to_owned(), meta.get(key)?.as_str()?.to_owned())))
            .collect(),
    )
}
