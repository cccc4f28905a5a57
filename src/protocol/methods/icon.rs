//! [`Icon`]: a picture a host may show beside a tool or a server (MCP 2025-11-25).

use serde::{Deserialize, Serialize};

/// An icon of a tool or of the server (`icons` on a tool, on `serverInfo`). Hosts choose
/// among several by size and theme; none is required to show any.
///
/// `src` is an `https:` URL or a `data:` URI (hosts are told to refuse other schemes, and
/// to fetch an icon without credentials); a `data:` URI keeps it offline.
///
/// ```
/// use otpmcp::protocol::methods::{Icon, IconTheme};
///
/// let icon = Icon::new("https://example.com/search-48.png")
///     .mime_type("image/png")
///     .size("48x48")
///     .theme(IconTheme::Light);
/// assert_eq!(icon.sizes, ["48x48"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Icon {
    /// Where the picture is: an `https:` URL or a `data:` URI.
    pub src: String,
    /// Its media type (`image/png`, `image/svg+xml`), when the host cannot tell from `src`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The sizes it comes in, as `WIDTHxHEIGHT` or `any` (for a vector image).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sizes: Vec<String>,
    /// The background it is drawn for, when it suits only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub theme: Option<IconTheme>,
}

/// The background an icon is drawn for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IconTheme {
    /// For a light background.
    Light,
    /// For a dark background.
    Dark,
}

impl Icon {
    /// An icon at `src`, nothing else said about it.
    pub fn new(src: impl Into<String>) -> Self {
        Self {
            src: src.into(),
            mime_type: None,
            sizes: Vec::new(),
            theme: None,
        }
    }

    /// Its media type.
    pub fn mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// One more size it comes in (`48x48`, or `any`).
    pub fn size(mut self, size: impl Into<String>) -> Self {
        self.sizes.push(size.into());
        self
    }

    /// The background it is drawn for.
    pub fn theme(mut self, theme: IconTheme) -> Self {
        self.theme = Some(theme);
        self
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_icon_sends_only_what_was_said() {
        let bare = serde_json::to_value(Icon::new("data:image/svg+xml;base64,PHN2Zy8+"))
            .unwrap_or_default();
        assert_eq!(bare, json!({"src": "data:image/svg+xml;base64,PHN2Zy8+"}));
        let full = Icon::new("https://example.com/a.png")
            .mime_type("image/png")
            .size("48x48")
            .size("96x96")
            .theme(IconTheme::Dark);
        assert_eq!(
            serde_json::to_value(full).unwrap_or_default(),
            json!({
                "src": "https://example.com/a.png",
                "mimeType": "image/png",
                "sizes": ["48x48", "96x96"],
                "theme": "dark"
            })
        );
    }
}
