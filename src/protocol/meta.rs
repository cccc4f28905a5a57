//! What a stateless (2026-07-28) request says about itself in `params._meta`: its
//! revision, the client's capabilities, an optional log level and trace context. There is
//! no session to remember any of it, so every request carries all of it.

use serde_json::Value;

use super::methods::LoggingLevel;
use super::{ErrorObject, Request};

/// `_meta` key: the revision the request speaks.
pub const PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: what the client supports, for this request.
pub const CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the least severe log level the request wants (no key: no log messages).
pub const LOG_LEVEL: &str = "io.modelcontextprotocol/logLevel";
/// Result `_meta` key: who the server is.
pub const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// Notification `_meta` key: the `subscriptions/listen` request a notification belongs to.
pub const SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";
/// The tasks extension's identifier (capability key under `extensions`).
pub const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The per-request `_meta` of a stateless request.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    /// `io.modelcontextprotocol/protocolVersion`, as sent.
    pub protocol_version: String,
    /// `io.modelcontextprotocol/clientCapabilities` (an object), shared with the request's
    /// context rather than copied.
    pub client_capabilities: std::sync::Arc<Value>,
    /// `io.modelcontextprotocol/logLevel`, when the request opts in to log messages.
    pub log_level: Option<LoggingLevel>,
    /// `progressToken`, when the request wants progress.
    pub progress_token: Option<Value>,
}

/// True when `params._meta` names a protocol revision: the request means to be stateless.
pub fn names_version(request: &Request) -> bool {
    request
        .meta()
        .is_some_and(|m| m.contains_key(PROTOCOL_VERSION))
}

impl RequestMeta {
    /// Refuses a revision this server does not serve statelessly (-32022).
    pub fn check_revision(&self) -> Result<(), ErrorObject> {
        if self
            .protocol_version
            .parse::<crate::protocol::version::ProtocolVersion>()
            .is_ok_and(crate::protocol::version::ProtocolVersion::is_stateless)
        {
            return Ok(());
        }
        Err(ErrorObject::unsupported_version(&self.protocol_version))
    }

    /// Reads `params._meta`. A missing `_meta`, revision or capabilities object, or a log
    /// level we do not know, is -32602.
    pub fn read(request: &Request) -> Result<Self, ErrorObject> {
        let missing = |what: &str| {
            ErrorObject::invalid_params(format!(
                "Invalid params: every request must carry {what} in params._meta"
            ))
        };
        let meta = request.meta().ok_or_else(|| missing("an object"))?;
        let protocol_version = meta
            .get(PROTOCOL_VERSION)
            .and_then(Value::as_str)
            .ok_or_else(|| missing(PROTOCOL_VERSION))?
            .to_owned();
        let client_capabilities = meta
            .get(CLIENT_CAPABILITIES)
            .filter(|c| c.is_object())
            .cloned()
            .map(std::sync::Arc::new)
            .ok_or_else(|| missing(CLIENT_CAPABILITIES))?;
        let log_level = match meta.get(LOG_LEVEL) {
            None | Some(Value::Null) => None,
            Some(level) => Some(serde_json::from_value(level.clone()).map_err(|_| {
                ErrorObject::invalid_params(format!("Invalid params: unknown {LOG_LEVEL} {level}"))
            })?),
        };
        let progress_token = meta
            .get("progressToken")
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned();
        // Its trace context (`traceparent`, `tracestate`, `baggage`) is read by the
        // transport, for every request of either era (`transport/trace.rs`).
        Ok(Self {
            protocol_version,
            client_capabilities,
            log_level,
            progress_token,
        })
    }

    /// True when the request declared the tasks extension.
    pub fn declares_tasks(&self) -> bool {
        declares_extension(&self.client_capabilities, TASKS_EXTENSION)
    }
}

/// A tool argument a `Mcp-Param-*` header mirrors (`x-mcp-header` in the input schema).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderParam {
    /// Its path from the arguments object, through `properties` only.
    pub path: Vec<String>,
    /// The header's suffix: `Mcp-Param-<header>`.
    pub header: String,
}

/// The `x-mcp-header` properties of a tool's input schema: reachable from its root
/// through `properties` alone (the spec's rule).
pub fn header_params(schema: &Value) -> Vec<HeaderParam> {
    fn walk(schema: &Value, path: &mut Vec<String>, out: &mut Vec<HeaderParam>) {
        let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
            return;
        };
        for (name, property) in properties {
            path.push(name.clone());
            if let Some(header) = property.get("x-mcp-header").and_then(Value::as_str) {
                out.push(HeaderParam {
                    path: path.clone(),
                    header: header.to_owned(),
                });
            }
            walk(property, path, out);
            path.pop();
        }
    }
    let mut out = Vec::new();
    walk(schema, &mut Vec::new(), &mut out);
    out
}

/// True when `capabilities.extensions` has `id`.
pub fn declares_extension(capabilities: &Value, id: &str) -> bool {
    capabilities
        .get("extensions")
        .and_then(|e| e.get(id))
        .is_some_and(|c| !c.is_null())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::RequestId;
    use serde_json::json;

    fn call(params: Option<Value>) -> Request {
        Request::new(RequestId::Number(1), "tools/call", params)
    }

    #[test]
    fn reads_the_required_keys_and_refuses_without_them() {
        let params = json!({"_meta": {
            PROTOCOL_VERSION: "2026-07-28",
            CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
            LOG_LEVEL: "warning",
            "progressToken": 7,
            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01"
        }});
        let meta = RequestMeta::read(&call(Some(params.clone()))).map_err(|e| e.message);
        let Ok(meta) = meta else {
            panic!("{meta:?}");
        };
        assert_eq!(meta.protocol_version, "2026-07-28");
        assert_eq!(meta.log_level, Some(LoggingLevel::Warning));
        assert_eq!(meta.progress_token, Some(json!(7)));
        assert!(meta.declares_tasks());
        assert!(names_version(&call(Some(params))));

        for bad in [
            json!({}),
            json!({"_meta": {PROTOCOL_VERSION: "2026-07-28"}}),
            json!({"_meta": {CLIENT_CAPABILITIES: {}}}),
            json!({"_meta": {PROTOCOL_VERSION: "2026-07-28", CLIENT_CAPABILITIES: {}, LOG_LEVEL: "loud"}}),
        ] {
            let err = RequestMeta::read(&call(Some(bad.clone())))
                .err()
                .map(|e| e.code);
            assert_eq!(err, Some(ErrorObject::INVALID_PARAMS), "{bad}");
        }
        assert!(RequestMeta::read(&call(None)).is_err());
    }
}
