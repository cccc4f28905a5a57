//! What a server may ask of the client, typed: elicitation, sampling and roots. The same
//! values travel as server→client requests on a session, as `inputRequests` of a stateless
//! `input_required` result, and as a task's input requests.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::methods::{Content, Role};

/// A request to the client: its method, the capability the client must have declared,
/// and the type of its answer.
pub trait ClientRequest: Serialize {
    /// The JSON-RPC method.
    const METHOD: &'static str;
    /// The answer.
    type Answer: DeserializeOwned;

    /// What the client must have declared, as a capabilities object (`{"sampling": {}}`).
    fn required_capability(&self) -> Value;
}

/// True when `capabilities` (the client's) include everything `required` names: each key
/// of `required` present in `capabilities`, recursively. `elicitation: {}` means form mode,
/// as clients older than the `form`/`url` split declare it.
pub fn satisfies(capabilities: &Value, required: &Value) -> bool {
    let Some(required) = required.as_object() else {
        return true;
    };
    required
        .iter()
        .all(|(key, inner)| match capabilities.get(key) {
            None | Some(Value::Null) => false,
            Some(have) => satisfies(have, inner) || implied(key, have, inner),
        })
}

/// `elicitation: {}` (no modes named) implies form mode.
fn implied(key: &str, have: &Value, inner: &Value) -> bool {
    key == "elicitation"
        && have.as_object().is_some_and(Map::is_empty)
        && inner
            .as_object()
            .is_some_and(|m| m.len() == 1 && m.contains_key("form"))
}

/// `elicitation/create`: asks the user to fill a form (or visit a URL).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Elicitation {
    /// `form` or `url`.
    pub mode: String,
    /// What to tell the user.
    pub message: String,
    /// Form mode: the JSON Schema (flat object of primitives) of the answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_schema: Option<Value>,
    /// URL mode: where to send the user.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
}

impl Elicitation {
    /// A form: `message` and the schema of the answer.
    pub fn form(message: impl Into<String>, requested_schema: Value) -> Self {
        Self {
            mode: "form".into(),
            message: message.into(),
            requested_schema: Some(requested_schema),
            url: None,
        }
    }
}

impl ClientRequest for Elicitation {
    const METHOD: &'static str = "elicitation/create";
    type Answer = ElicitResult;

    fn required_capability(&self) -> Value {
        json!({ "elicitation": { self.mode.clone(): {} } })
    }
}

/// What the user did with an elicitation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ElicitAction {
    /// Filled it in.
    Accept,
    /// Said no.
    Decline,
    /// Dismissed it.
    Cancel,
}

/// The answer to an [`Elicitation`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitResult {
    /// What the user did.
    pub action: ElicitAction,
    /// The form's values, when accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Map<String, Value>>,
}

/// One message of a sampling conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingMessage {
    /// Who says it.
    pub role: Role,
    /// What is said.
    pub content: Content,
}

/// `sampling/createMessage`: asks the client's model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Sampling {
    /// The conversation so far.
    pub messages: Vec<SamplingMessage>,
    /// Most tokens to generate.
    pub max_tokens: u32,
    /// A system prompt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
}

impl Sampling {
    /// One user message, answered in at most `max_tokens`.
    pub fn prompt(text: impl Into<String>, max_tokens: u32) -> Self {
        Self {
            messages: vec![SamplingMessage {
                role: Role::User,
                content: Content::text(text),
            }],
            max_tokens,
            system_prompt: None,
        }
    }
}

impl ClientRequest for Sampling {
    const METHOD: &'static str = "sampling/createMessage";
    type Answer = SamplingResult;

    fn required_capability(&self) -> Value {
        json!({ "sampling": {} })
    }
}

/// The model's answer to [`Sampling`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SamplingResult {
    /// Usually `assistant`.
    pub role: Role,
    /// What the model said.
    pub content: Content,
    /// Which model said it.
    #[serde(default)]
    pub model: String,
    /// Why it stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
}

impl SamplingResult {
    /// The answer's text, if it is text.
    pub fn text(&self) -> Option<&str> {
        match &self.content {
            Content::Text { text } => Some(text),
            _ => None,
        }
    }
}

/// `roots/list`: asks which directories the client exposes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRoots {}

impl ClientRequest for ListRoots {
    const METHOD: &'static str = "roots/list";
    type Answer = ListRootsResult;

    fn required_capability(&self) -> Value {
        json!({ "roots": {} })
    }
}

/// One root the client exposes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// A `file://` URI.
    pub uri: String,
    /// A display name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The answer to [`ListRoots`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRootsResult {
    /// The roots.
    pub roots: Vec<Root>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_checks_follow_the_declared_object() {
        let form = Elicitation::form("?", json!({"type": "object"})).required_capability();
        assert!(satisfies(&json!({"elicitation": {}}), &form));
        assert!(satisfies(&json!({"elicitation": {"form": {}}}), &form));
        assert!(!satisfies(&json!({"elicitation": {"url": {}}}), &form));
        assert!(!satisfies(&json!({"sampling": {}}), &form));
        let sampling = Sampling::prompt("?", 10).required_capability();
        assert!(satisfies(&json!({"sampling": {}}), &sampling));
        assert!(!satisfies(&json!({}), &sampling));
        assert!(!satisfies(&json!({"sampling": null}), &sampling));
        assert!(satisfies(
            &json!({"roots": {"listChanged": true}}),
            &ListRoots {}.required_capability()
        ));
    }
}
