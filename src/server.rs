//! The MCP method table: turns a parsed request into handler calls and a JSON-RPC answer.
//! Knows MCP and the handler API; knows nothing of HTTP or the event store (for
//! `initialize` it only describes the session to create; the transport creates it).

use serde_json::Value;

use crate::handler::builtin::{Echo, StreamEvents};
use crate::handler::{RequestContext, ToolError, ToolRegistry};
use crate::protocol::methods::{
    CallToolParams, CallToolResult, Implementation, InitializeParams, InitializeResult,
    ListToolsResult, LoggingLevel, Method, SetLevelParams,
};
use crate::protocol::version::ProtocolVersion;
use crate::protocol::{ErrorObject, Outgoing, Request};
use crate::session::NewSession;

/// Largest `capabilities` plus `clientInfo` (serialized) accepted at `initialize`.
pub const MAX_CLIENT_DESCRIPTION: usize = 64 * 1024;

/// An MCP server: identity plus the tools it offers.
#[derive(Debug, Clone)]
pub struct McpServer {
    info: Implementation,
    instructions: Option<String>,
    tools: ToolRegistry,
}

impl Default for McpServer {
    /// The default server: `echo` and `stream_events`.
    fn default() -> Self {
        let mut tools = ToolRegistry::default();
        tools.register(Echo).register(StreamEvents);
        Self::new(tools)
    }
}

impl McpServer {
    /// A server offering `tools`, named after this crate.
    pub fn new(tools: ToolRegistry) -> Self {
        Self {
            info: Implementation {
                name: env!("CARGO_PKG_NAME").into(),
                version: env!("CARGO_PKG_VERSION").into(),
            },
            instructions: None,
            tools,
        }
    }

    /// Answers `initialize`: the result to send and the session to create.
    pub fn initialize(
        &self,
        params: Option<Value>,
    ) -> Result<(InitializeResult, NewSession), ErrorObject> {
        let params: InitializeParams = parse_params(params)?;
        // Kept for the session's lifetime, so bounded well below the body limit.
        let kept = serde_json::to_vec(&params.capabilities).map_or(0, |v| v.len())
            + serde_json::to_vec(&params.client_info).map_or(0, |v| v.len());
        if kept > MAX_CLIENT_DESCRIPTION {
            return Err(ErrorObject::invalid_params(format!(
                "capabilities and clientInfo together exceed {MAX_CLIENT_DESCRIPTION} bytes"
            )));
        }
        let version = ProtocolVersion::negotiate(&params.protocol_version);
        let result = InitializeResult {
            protocol_version: version.as_str().into(),
            capabilities: serde_json::json!({ "tools": { "listChanged": false }, "logging": {} }),
            server_info: self.info.clone(),
            instructions: self.instructions.clone(),
        };
        let session = NewSession {
            protocol_version: version,
            client_capabilities: std::sync::Arc::new(params.capabilities),
            client_info: params.client_info,
        };
        Ok((result, session))
    }

    /// The `progressToken` of a request, if it is a `tools/call` carrying one.
    pub fn progress_token(request: &Request) -> Option<Value> {
        if Method::parse(&request.method) != Method::ToolsCall {
            return None;
        }
        let meta = request.params.as_ref()?.get("_meta")?;
        meta.get("progressToken")
            .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
            .cloned()
    }

    /// The level a `logging/setLevel` request asks for.
    pub fn set_level_params(params: Option<&Value>) -> Result<LoggingLevel, ErrorObject> {
        let params: SetLevelParams = parse_params(params.cloned())?;
        Ok(params.level)
    }

    /// Answers one request (other than `initialize`, which needs a session first).
    pub async fn handle(&self, request: Request, ctx: RequestContext) -> Outgoing {
        let id = request.id;
        let result = match Method::parse(&request.method) {
            Method::Ping => Ok(Value::Object(Default::default())),
            Method::ToolsList => to_value(&ListToolsResult {
                tools: self.tools.list(),
            }),
            Method::ToolsCall => self.call_tool(request.params, ctx).await,
            // The session's level was set by the transport before this call (it owns
            // session state); here only the answer is made.
            Method::SetLevel => Self::set_level_params(request.params.as_ref())
                .map(|_| Value::Object(Default::default())),
            Method::Initialize => Err(ErrorObject::new(
                ErrorObject::INVALID_REQUEST,
                "Invalid request: the session is already initialized",
            )),
            Method::Unknown => Err(ErrorObject::method_not_found(&request.method)),
        };
        match result {
            Ok(result) => Outgoing::Result { id, result },
            Err(error) => Outgoing::Error {
                id: Some(id),
                error,
            },
        }
    }

    async fn call_tool(
        &self,
        params: Option<Value>,
        ctx: RequestContext,
    ) -> Result<Value, ErrorObject> {
        let params: CallToolParams = parse_params(params)?;
        let tool = self
            .tools
            .get(&params.name)
            .ok_or_else(|| ErrorObject::invalid_params(format!("Unknown tool: {}", params.name)))?;
        match tool.call(params.arguments, ctx).await {
            Ok(result) => to_value(&result),
            Err(ToolError::InvalidArguments(why)) => Err(ErrorObject::invalid_params(format!(
                "Invalid arguments for tool {}: {why}",
                params.name
            ))),
            Err(ToolError::Failed(why)) => to_value(&CallToolResult::error(why)),
        }
    }
}

fn parse_params<T: serde::de::DeserializeOwned>(params: Option<Value>) -> Result<T, ErrorObject> {
    serde_json::from_value(params.unwrap_or(Value::Null))
        .map_err(|e| ErrorObject::invalid_params(format!("Invalid params: {e}")))
}

fn to_value<T: serde::Serialize>(value: &T) -> Result<Value, ErrorObject> {
    serde_json::to_value(value).map_err(|e| ErrorObject::internal(e.to_string()))
}
