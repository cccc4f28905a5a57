//! Resources: definitions, templates, `resources/read` and its params.

use serde::{Deserialize, Serialize};

use super::content::ResourceContents;

/// A resource as listed by `resources/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceDefinition {
    /// Its URI.
    pub uri: String,
    /// Short name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// A family of resources as listed by `resources/templates/list` (RFC 6570 template).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceTemplateDefinition {
    /// e.g. `test://template/{id}/data`.
    pub uri_template: String,
    /// Short name.
    pub name: String,
    /// What it is.
    pub description: String,
    /// The MIME type of its resources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
}

/// `resources/read`, `resources/subscribe` and `resources/unsubscribe` params.
#[derive(Debug, Clone, Deserialize)]
pub struct ResourceParams {
    /// The resource.
    pub uri: String,
}

/// `resources/read` result.
#[derive(Debug, Clone, Serialize)]
pub struct ReadResourceResult {
    /// The contents (one resource may have several parts).
    pub contents: Vec<ResourceContents>,
}
