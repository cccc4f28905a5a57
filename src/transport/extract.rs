//! Reading MCP's request headers: session id, Last-Event-ID, protocol version, Accept,
//! Content-Type. Pure functions over a header map.

use axum::http::{HeaderMap, HeaderName, header};

use super::rejection::Rejection;
use crate::event_store::{EventId, EventIdError};
use crate::protocol::version::ProtocolVersion;
use crate::session::SessionId;

// Header names, not strings: a lookup by name hashes it at once, where one by `&str`
// validates and lowercases the string first (on every request).
/// `Mcp-Session-Id`.
pub static SESSION_ID: HeaderName = HeaderName::from_static("mcp-session-id");
/// `MCP-Protocol-Version`.
pub static PROTOCOL_VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
/// `Last-Event-ID`.
pub static LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// The session named by the request, if any. A value that cannot be one of our ids is an
/// unknown session (404), like any other id we do not have.
pub fn session_id(headers: &HeaderMap) -> Result<Option<SessionId>, Rejection> {
    let Some(value) = headers.get(&SESSION_ID) else {
        return Ok(None);
    };
    let text = value.to_str().map_err(|_| Rejection::UnknownSession)?;
    text.parse()
        .map(Some)
        .map_err(|_| Rejection::UnknownSession)
}

/// The session, required.
pub fn required_session_id(headers: &HeaderMap) -> Result<SessionId, Rejection> {
    session_id(headers)?.ok_or(Rejection::MissingSession)
}

/// What the `Last-Event-ID` header holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LastEventId {
    /// No header.
    Absent,
    /// A well-formed id (not yet checked against the session).
    Valid(EventId),
    /// Present but not one of our ids; the text (truncated) and why.
    Malformed(String, EventIdError),
}

/// Reads `Last-Event-ID`.
pub fn last_event_id(headers: &HeaderMap) -> LastEventId {
    let Some(value) = headers.get(&LAST_EVENT_ID) else {
        return LastEventId::Absent;
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    match text.parse() {
        Ok(id) => LastEventId::Valid(id),
        Err(e) => LastEventId::Malformed(text.chars().take(64).collect(), e),
    }
}

/// `MCP-Protocol-Version`, if present; 400 if it names a revision we do not speak.
pub fn protocol_version(headers: &HeaderMap) -> Result<Option<ProtocolVersion>, Rejection> {
    let Some(value) = headers.get(&PROTOCOL_VERSION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| Rejection::UnsupportedVersion("MCP-Protocol-Version is not ASCII".into()))?;
    text.trim()
        .parse()
        .map(Some)
        .map_err(|e: crate::protocol::version::UnsupportedVersion| {
            Rejection::UnsupportedVersion(e.to_string())
        })
}

/// Which of our two response types `Accept` allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Accepts {
    /// `application/json`.
    pub json: bool,
    /// `text/event-stream`.
    pub sse: bool,
}

/// Reads `Accept` (all its values); wildcards count.
pub fn accepts(headers: &HeaderMap) -> Accepts {
    let mut out = Accepts::default();
    for value in headers.get_all(header::ACCEPT) {
        let Ok(text) = value.to_str() else { continue };
        for range in text.split(',') {
            let media = range.split(';').next().unwrap_or("").trim();
            let is = |name: &str| media.eq_ignore_ascii_case(name);
            if is("*/*") {
                out.json = true;
                out.sse = true;
            } else if is("application/json") || is("application/*") {
                out.json = true;
            } else if is("text/event-stream") || is("text/*") {
                out.sse = true;
            }
        }
    }
    out
}

/// True when `Content-Type` is `application/json` (parameters such as charset allowed).
pub fn is_json_content(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/json"))
}

/// A header map of `pairs`, for tests.
#[cfg(test)]
pub(crate) fn header_map(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(*k, axum::http::HeaderValue::from_static(v));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        header_map(pairs)
    }

    #[test]
    fn accept_ranges_and_wildcards() {
        let cases = [
            ("application/json, text/event-stream", true, true),
            ("application/json", true, false),
            ("text/event-stream;q=0.9", false, true),
            ("*/*", true, true),
            ("text/html", false, false),
            ("APPLICATION/JSON , TEXT/EVENT-STREAM", true, true),
        ];
        for (value, json, sse) in cases {
            let h = headers(&[("accept", value)]);
            assert_eq!(accepts(&h), Accepts { json, sse }, "{value}");
        }
        assert_eq!(accepts(&HeaderMap::new()), Accepts::default());
    }

    #[test]
    fn content_type_must_be_json() {
        assert!(is_json_content(&headers(&[(
            "content-type",
            "application/json; charset=utf-8"
        )])));
        assert!(!is_json_content(&headers(&[(
            "content-type",
            "text/plain"
        )])));
        assert!(!is_json_content(&HeaderMap::new()));
    }

    #[test]
    fn session_and_version_headers() {
        assert_eq!(session_id(&HeaderMap::new()), Ok(None));
        assert_eq!(
            session_id(&headers(&[("mcp-session-id", "nope")])),
            Err(Rejection::UnknownSession)
        );
        assert_eq!(
            protocol_version(&headers(&[("mcp-protocol-version", "2025-06-18")])),
            Ok(Some(ProtocolVersion::V2025_06_18))
        );
        assert!(protocol_version(&headers(&[("mcp-protocol-version", "1999-01-01")])).is_err());
    }

    #[test]
    fn last_event_id_forms() {
        assert_eq!(last_event_id(&HeaderMap::new()), LastEventId::Absent);
        assert!(matches!(
            last_event_id(&headers(&[("last-event-id", "invalid_xyz")])),
            LastEventId::Malformed(..)
        ));
        assert!(matches!(
            last_event_id(&headers(&[("last-event-id", "0000abcd-1-2")])),
            LastEventId::Valid(_)
        ));
    }
}
