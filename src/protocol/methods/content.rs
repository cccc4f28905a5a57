//! Content blocks, which tool results and prompt messages carry, and resource contents.

use serde::{Deserialize, Serialize};

/// One piece of tool output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Content {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, base64-encoded.
    Image {
        /// Base64 data.
        data: String,
        /// e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// Audio, base64-encoded.
    Audio {
        /// Base64 data.
        data: String,
        /// e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A resource's contents, embedded.
    Resource {
        /// The contents.
        resource: ResourceContents,
    },
}

/// The contents of a resource: text or base64 binary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceContents {
    /// The resource's URI.
    pub uri: String,
    /// Its MIME type.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// Text contents.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Binary contents, base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl Content {
    /// An embedded binary resource (`blob` is base64).
    pub fn blob_resource(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        blob: impl Into<String>,
    ) -> Self {
        Self::Resource {
            resource: ResourceContents {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: None,
                blob: Some(blob.into()),
            },
        }
    }

    /// Text content.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Text { text: text.into() }
    }

    /// An image from base64 `data`.
    pub fn image(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Image {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// Audio from base64 `data`.
    pub fn audio(data: impl Into<String>, mime_type: impl Into<String>) -> Self {
        Self::Audio {
            data: data.into(),
            mime_type: mime_type.into(),
        }
    }

    /// An embedded text resource.
    pub fn text_resource(
        uri: impl Into<String>,
        mime_type: impl Into<String>,
        text: impl Into<String>,
    ) -> Self {
        Self::Resource {
            resource: ResourceContents {
                uri: uri.into(),
                mime_type: Some(mime_type.into()),
                text: Some(text.into()),
                blob: None,
            },
        }
    }
}
