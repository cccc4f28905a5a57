//! `completion/complete`: what is completed, and the argument.

use serde::Deserialize;

/// What `completion/complete` completes an argument of.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(tag = "type")]
pub enum CompletionRef {
    /// A prompt's argument.
    #[serde(rename = "ref/prompt")]
    Prompt {
        /// The prompt.
        name: String,
    },
    /// A resource template's variable.
    #[serde(rename = "ref/resource")]
    Resource {
        /// The template.
        uri: String,
    },
}

/// The argument being completed.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CompletionArgument {
    /// Its name.
    pub name: String,
    /// What the user typed so far.
    pub value: String,
}

/// `completion/complete` params.
#[derive(Debug, Clone, Deserialize)]
pub struct CompleteParams {
    /// What is completed.
    #[serde(rename = "ref")]
    pub reference: CompletionRef,
    /// The argument and its partial value.
    pub argument: CompletionArgument,
}
