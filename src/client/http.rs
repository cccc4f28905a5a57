//! The client's Streamable HTTP link: one POST per message, its answer read as JSON or
//! SSE; the session's id after `initialize` (2025-11-25), the routing headers of
//! 2026-07-28.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use super::wire::{HttpClient, Messages, WireError, check_url, http_client};
use super::{ClientError, Era, Exchange};

/// A server's MCP endpoint over HTTP.
pub(super) struct HttpLink {
    client: HttpClient,
    url: String,
    token: Option<String>,
    session: Option<String>,
    timeout: Duration,
}

impl HttpLink {
    pub(super) fn new(
        url: String,
        token: Option<String>,
        timeout: Duration,
    ) -> Result<Self, ClientError> {
        check_url(&url, token.is_some())?;
        Ok(Self {
            client: http_client()?,
            url,
            token,
            session: None,
            timeout,
        })
    }

    pub(super) fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// The endpoint, and the bearer token if any (for `tasks/stream`'s follower).
    pub(super) fn endpoint(&self) -> (&str, Option<&str>) {
        (&self.url, self.token.as_deref())
    }

    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// A request to the endpoint with the headers every message carries.
    fn builder(&self, method: http::Method, era: Era) -> http::request::Builder {
        let mut request = http::Request::builder()
            .method(method)
            .uri(&self.url)
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if let Some(session) = &self.session {
            request = request.header("mcp-session-id", session);
        }
        // 2025-11-25 names its revision once the session is open; 2026-07-28 always.
        if self.session.is_some() || era == Era::Stateless {
            request = request.header("mcp-protocol-version", era.version());
        }
        request
    }

    /// POSTs `body` (JSON-RPC `method`) with `headers`, and opens its answer.
    async fn post(
        &self,
        method: &str,
        body: &Value,
        era: Era,
        headers: &[(String, String)],
    ) -> Result<Messages, ClientError> {
        let mut request = self
            .builder(http::Method::POST, era)
            .header(http::header::CONTENT_TYPE, "application/json");
        if era == Era::Stateless {
            request = request.header("mcp-method", method);
        }
        for (name, value) in headers {
            request = request.header(name.as_str(), value.as_str());
        }
        let request = request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| transport(method, e.to_string()))?;
        Messages::open(&self.client, request, self.timeout)
            .await
            .map_err(|e| wire(method, self.timeout, e))
    }

    /// Sends request `id` and reads its answer: the response, and the messages before it.
    pub(super) async fn exchange(
        &self,
        id: i64,
        method: &str,
        body: &Value,
        era: Era,
        headers: &[(String, String)],
    ) -> Result<Exchange, ClientError> {
        let messages = self.post(method, body, era, headers).await?;
        read(id, method, messages, self.timeout).await
    }

    /// `initialize`: the answer, and the session it opens.
    pub(super) async fn initialize(
        &mut self,
        id: i64,
        body: &Value,
    ) -> Result<Exchange, ClientError> {
        let method = "initialize";
        let messages = self.post(method, body, Era::Sessions, &[]).await?;
        let session = messages.header("mcp-session-id").map(str::to_owned);
        let exchange = read(id, method, messages, self.timeout).await?;
        if exchange.message.get("error").is_none() {
            self.session = Some(session.ok_or(ClientError::NoSession)?);
        }
        Ok(exchange)
    }

    /// POSTs a notification, which the server accepts with 202.
    pub(super) async fn notify(
        &self,
        method: &str,
        body: &Value,
        era: Era,
    ) -> Result<(), ClientError> {
        let messages = self.post(method, body, era, &[]).await?;
        if messages.status().is_success() {
            return Ok(());
        }
        Err(http_error(method, &messages))
    }

    /// DELETEs the session, if there is one.
    pub(super) async fn delete(self) -> Result<(), ClientError> {
        let method = "DELETE";
        if self.session.is_none() {
            return Ok(());
        }
        let request = self
            .builder(http::Method::DELETE, Era::Sessions)
            .body(Full::new(Bytes::new()))
            .map_err(|e| transport(method, e.to_string()))?;
        let messages = Messages::open(&self.client, request, self.timeout)
            .await
            .map_err(|e| wire(method, self.timeout, e))?;
        // 404: the session is gone already, which is what was asked.
        if messages.status().is_success() || messages.status() == http::StatusCode::NOT_FOUND {
            return Ok(());
        }
        Err(http_error(method, &messages))
    }
}

/// Reads `messages` to the response to `id`; what came before it are its notes. A JSON
/// error answer (a refusal on an HTTP error status, whose id may be null) is the response.
async fn read(
    id: i64,
    method: &str,
    mut messages: Messages,
    timeout: Duration,
) -> Result<Exchange, ClientError> {
    if !messages.status().is_success() && messages.first().is_none_or(|m| m.get("error").is_none())
    {
        return Err(http_error(method, &messages));
    }
    let mut notes = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let next = tokio::time::timeout_at(deadline, messages.next())
            .await
            .map_err(|_| ClientError::Timeout {
                method: method.to_owned(),
                timeout,
            })?
            .map_err(|e| wire(method, timeout, e))?;
        let Some(message) = next else {
            return Err(ClientError::NoResponse {
                method: method.to_owned(),
            });
        };
        let answers = message.get("method").is_none()
            && (message["id"] == json!(id)
                || (message["id"].is_null() && message.get("error").is_some()));
        if answers {
            return Ok(Exchange { message, notes });
        }
        notes.push(message);
    }
}

fn transport(method: &str, detail: String) -> ClientError {
    ClientError::Transport {
        method: method.to_owned(),
        detail,
    }
}

fn wire(method: &str, timeout: Duration, e: WireError) -> ClientError {
    match e {
        WireError::Idle(_) => ClientError::Timeout {
            method: method.to_owned(),
            timeout,
        },
        other => transport(method, other.to_string()),
    }
}

fn http_error(method: &str, messages: &Messages) -> ClientError {
    ClientError::Http {
        method: method.to_owned(),
        status: messages.status().as_u16(),
        body: messages.text().to_owned(),
    }
}
