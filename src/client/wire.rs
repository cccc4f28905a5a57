//! The HTTP side shared by the clients here ([`super::Client`] and `otpmcp tasks
//! watch`): a hyper client with rustls, and the JSON-RPC messages of one answer, JSON or
//! SSE, read as they arrive.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The HTTP(S) client.
pub(crate) type HttpClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The most bytes of one SSE event (or of a JSON answer) held while it arrives.
pub(crate) const MAX_EVENT: usize = 16 << 20;

/// Why an answer could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WireError {
    /// No answer, or nothing more of it, within the idle time.
    #[error("nothing came for {0:?}")]
    Idle(Duration),
    /// The connection could not be made.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The stream broke.
    #[error("the stream broke: {0}")]
    Broken(String),
    /// One event was larger than [`MAX_EVENT`].
    #[error("an event larger than {MAX_EVENT} bytes")]
    TooLarge,
}

/// Why a client cannot speak to an endpoint at all: found before anything is sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreachable {
    /// Not an absolute http(s) URL.
    #[error("bad URL {0:?}")]
    Url(String),
    /// A token would go in clear text to another machine.
    #[error("{0}: a token is sent only over https, or over http to a loopback host")]
    Insecure(String),
    /// The TLS client could not be set up.
    #[error("TLS: {0}")]
    Tls(String),
}

/// Checks that `url` is an absolute http(s) URL, and, when a bearer token goes with it,
/// that the token cannot leak: https, or http to a loopback host.
pub(crate) fn check_url(url: &str, with_token: bool) -> Result<(), Unreachable> {
    let bad = || Unreachable::Url(url.to_owned());
    let uri: http::Uri = url.parse().map_err(|_| bad())?;
    let https = match uri.scheme_str() {
        Some(s) if s.eq_ignore_ascii_case("https") => true,
        Some(s) if s.eq_ignore_ascii_case("http") => false,
        _ => return Err(bad()),
    };
    let host = uri.host().ok_or_else(bad)?;
    if with_token && !https && !crate::config::is_loopback_host(host) {
        return Err(Unreachable::Insecure(url.to_owned()));
    }
    Ok(())
}

/// An http and https client (the system's root certificates, or none if it has none:
/// then http still works and https fails with a clear error).
pub(crate) fn http_client() -> Result<HttpClient, Unreachable> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(provider.clone())
    {
        Ok(builder) => builder,
        Err(_) => {
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| Unreachable::Tls(e.to_string()))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    let connector = builder.https_or_http().enable_http1().build();
    Ok(Client::builder(TokioExecutor::new()).build(connector))
}

/// The JSON-RPC messages of one answer, JSON or SSE, as they arrive.
pub(crate) struct Messages {
    status: http::StatusCode,
    headers: http::HeaderMap,
    /// The body while it streams (SSE on a success status).
    body: Option<hyper::body::Incoming>,
    /// Bytes of an event not yet whole.
    pending: BytesMut,
    /// A JSON answer, or the events already split off.
    ready: VecDeque<Value>,
    /// A body read whole, as text (what an error status said).
    text: String,
    idle: Duration,
}

impl Messages {
    /// Sends `request`. A success with `text/event-stream` is read as it comes; any other
    /// answer is read whole (bounded), and its JSON, if it is JSON, is the one message.
    pub(crate) async fn open(
        client: &HttpClient,
        request: http::Request<Full<Bytes>>,
        idle: Duration,
    ) -> Result<Self, WireError> {
        let response = tokio::time::timeout(idle, client.request(request))
            .await
            .map_err(|_| WireError::Idle(idle))?
            .map_err(|e| WireError::Connect(error_chain(&e)))?;
        let (parts, body) = response.into_parts();
        let mut messages = Self {
            status: parts.status,
            headers: parts.headers,
            body: Some(body),
            pending: BytesMut::new(),
            ready: VecDeque::new(),
            text: String::new(),
            idle,
        };
        if messages.is_stream() {
            return Ok(messages);
        }
        // Read whole, bounded; a body that breaks off reads as empty, and the status
        // speaks for the answer.
        let bytes = match messages.body.take() {
            Some(body) => {
                let limited = http_body_util::Limited::new(body, MAX_EVENT).collect();
                tokio::time::timeout(idle, limited)
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .map(|b| b.to_bytes())
                    .unwrap_or_default()
            }
            None => Bytes::new(),
        };
        if let Ok(message) = serde_json::from_slice(&bytes) {
            messages.ready.push_back(message);
        }
        messages.text = String::from_utf8_lossy(&bytes).into_owned();
        Ok(messages)
    }

    /// The HTTP status.
    pub(crate) fn status(&self) -> http::StatusCode {
        self.status
    }

    /// A response header, if it is text.
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A successful SSE answer, read as it comes.
    pub(crate) fn is_stream(&self) -> bool {
        self.status.is_success()
            && self
                .header(http::header::CONTENT_TYPE.as_str())
                .is_some_and(|v| v.starts_with("text/event-stream"))
    }

    /// The first message, if one is ready (a JSON answer's).
    pub(crate) fn first(&self) -> Option<&Value> {
        self.ready.front()
    }

    /// A body read whole, as text (empty for a stream).
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The next message; `None` when the answer ended.
    pub(crate) async fn next(&mut self) -> Result<Option<Value>, WireError> {
        loop {
            if let Some(message) = self.ready.pop_front() {
                return Ok(Some(message));
            }
            let Some(body) = self.body.as_mut() else {
                return Ok(None);
            };
            let frame = match tokio::time::timeout(self.idle, body.frame()).await {
                Err(_) => return Err(WireError::Idle(self.idle)),
                Ok(None) => {
                    self.body = None;
                    continue;
                }
                Ok(Some(Err(e))) => return Err(WireError::Broken(error_chain(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            if let Ok(data) = frame.into_data() {
                self.pending.extend_from_slice(&data);
                self.split()?;
            }
        }
    }

    /// Moves each whole SSE event in `pending` to `ready` (its `data:` lines, as JSON).
    fn split(&mut self) -> Result<(), WireError> {
        while let Some(end) = event_end(&self.pending) {
            let block = self.pending.split_to(end);
            let text = String::from_utf8_lossy(&block);
            let data: Vec<&str> = text
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            if data.is_empty() {
                continue;
            }
            if let Ok(message) = serde_json::from_str(&data.join("\n")) {
                self.ready.push_back(message);
            }
        }
        if self.pending.len() > MAX_EVENT {
            return Err(WireError::TooLarge);
        }
        Ok(())
    }
}

/// Where the first SSE event of `bytes` ends (past its blank line), if it is whole.
fn event_end(bytes: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 1 < bytes.len() {
        match (bytes[i], bytes[i + 1]) {
            (b'\n', b'\n') => return Some(i + 2),
            (b'\r', b'\n') if bytes.get(i + 2..i + 4) == Some(b"\r\n") => return Some(i + 4),
            _ => i += 1,
        }
    }
    None
}

/// An error with its causes, which hyper keeps apart ("client error (Connect)" alone
/// says little).
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_on_blank_lines_of_either_ending() {
        assert_eq!(event_end(b"data: 1\n\ndata: 2"), Some(9));
        assert_eq!(event_end(b"data: 1\r\n\r\n"), Some(11));
        assert_eq!(event_end(b"data: 1\n"), None);
    }
}
