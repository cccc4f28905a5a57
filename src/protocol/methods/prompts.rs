//! Prompts: definitions, arguments, messages and `prompts/get`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::content::Content;

/// An argument a prompt takes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptArgument {
    /// Name.
    pub name: String,
    /// What it is for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Whether it must be given.
    pub required: bool,
}

/// A prompt as listed by `prompts/list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptDefinition {
    /// Unique name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its arguments.
    pub arguments: Vec<PromptArgument>,
}

/// Who a prompt message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// The assistant.
    Assistant,
}

/// One message of a prompt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PromptMessage {
    /// Sender.
    pub role: Role,
    /// Content.
    pub content: Content,
}

/// `prompts/get` params.
#[derive(Debug, Clone, Deserialize)]
pub struct GetPromptParams {
    /// The prompt.
    pub name: String,
    /// Its arguments (string values).
    #[serde(default)]
    pub arguments: Map<String, Value>,
}

/// `prompts/get` result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GetPromptResult {
    /// Optional description of this instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The messages.
    pub messages: Vec<PromptMessage>,
}
