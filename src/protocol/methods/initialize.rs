//! `initialize`: what the client offers and what the server answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Icon;

/// `initialize` params.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// Revision the client asks for.
    pub protocol_version: String,
    /// Client capabilities.
    #[serde(default)]
    pub capabilities: Value,
    /// Client name and version.
    #[serde(default)]
    pub client_info: Value,
}

/// Name and version of an implementation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Implementation {
    /// Name.
    pub name: String,
    /// The name a host shows people, when it differs from `name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Version.
    pub version: String,
    /// Pictures a host may show beside the server.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub icons: Vec<Icon>,
}

/// `initialize` result.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    /// The negotiated revision.
    pub protocol_version: String,
    /// What this server offers.
    pub capabilities: Value,
    /// Who we are.
    pub server_info: Implementation,
    /// Optional hints for the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
}
