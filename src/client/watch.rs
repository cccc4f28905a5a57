//! `otpmcp tasks watch`: an operator's client of `tasks/stream` (SEP-2694). It follows
//! one task's events from any replica, prints each once as it comes, resumes with
//! `after` = the last seq printed whenever a stream is cut (a drain, a replica's death,
//! a proxy's timeout), trying the given URLs in turn, and ends with the task's status.
//!
//! The server half is `transport/stateless/task_stream.rs`; the two make the runnable
//! pair the SEP's reviewers asked for.

use std::io::Write;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use serde_json::{Value, json};

use super::wire::{HttpClient, Messages, Unreachable, WireError, check_url, http_client};

use crate::protocol::meta::{CLIENT_CAPABILITIES, PROTOCOL_VERSION, TASKS_EXTENSION};
use crate::tasks::events::{
    EVENT_METHOD, EXECUTION_OUTPUT, EXECUTION_STARTED, LOG, PROGRESS, STATUS,
};

/// The environment variable a bearer token is read from (never a flag: flags show in
/// `ps` and shell history).
pub const TOKEN_VARIABLE: &str = "OTPMCP_TOKEN";

/// The longest wait between two attempts to reach a server.
const MOST_BACKOFF: Duration = Duration::from_secs(2);

/// What to follow and how.
#[derive(Debug, Clone)]
pub struct Watch {
    /// MCP endpoints to try, in turn (one, or each replica's).
    pub urls: Vec<String>,
    /// The task.
    pub task_id: String,
    /// Sent as `Authorization: Bearer` (from [`TOKEN_VARIABLE`]).
    pub token: Option<String>,
    /// Print each event's JSON (the notification's `params`) instead of a summary.
    pub json: bool,
    /// Give up after this long without reaching a server that streams the task.
    pub retry_for: Duration,
    /// Resume when a stream brings nothing (not even a keep-alive) for this long.
    pub idle_timeout: Duration,
}

/// How a watch ended; [`Ending::code`] is the process's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The task completed (its result may still be a tool error, `isError`).
    Completed,
    /// The task failed.
    Failed,
    /// The task was cancelled.
    Cancelled,
    /// The server refused to stream it: unknown or expired task, another principal's,
    /// no or a bad token, or not a server that runs tasks.
    Refused,
    /// No server streamed it within `retry_for`.
    Unreachable,
}

impl Ending {
    /// 0 completed, 3 failed, 4 cancelled, 5 refused, 6 unreachable (2 is bad usage).
    pub fn code(self) -> u8 {
        match self {
            Self::Completed => 0,
            Self::Failed => 3,
            Self::Cancelled => 4,
            Self::Refused => 5,
            Self::Unreachable => 6,
        }
    }
}

/// Why a watch cannot start.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// No URL, a bad one, one a token would leak over, or no TLS client.
    #[error(transparent)]
    Unreachable(#[from] Unreachable),
}

/// How one attempt to stream ended, short of the task's end.
#[derive(Debug)]
enum Cut {
    /// Worth resuming: the connection failed, the stream ended without its result, or
    /// the server was busy or going away.
    Retry(String),
    /// The events after the cursor are no longer retained.
    EventsGone(Option<u64>),
    /// The server will not stream this task to us.
    Refused(String),
}

/// What the watch has seen, across attempts.
#[derive(Debug, Default)]
struct Seen {
    /// The last seq printed: the next attempt's `after`.
    last: Option<u64>,
    /// The last status the task's events showed.
    status: Option<String>,
}

impl Watch {
    /// Follows the task to its end, writing one line per event to `out` and what
    /// happens to the connection to stderr.
    pub async fn run(&self, out: &mut impl Write) -> Result<Ending, WatchError> {
        self.follow(|event| {
            let line = if self.json {
                event.to_string()
            } else {
                describe(event)
            };
            // A closed stdout (the reader went away) is not the task's business: the
            // watch goes on to its end and exit code.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        })
        .await
    }

    /// Follows the task to its end, handing each event (the notification's `params`) to
    /// `on_event` once, in order, and writing what happens to the connection to stderr.
    pub async fn follow(&self, mut on_event: impl FnMut(&Value)) -> Result<Ending, WatchError> {
        let client = self.client()?;
        let mut seen = Seen::default();
        let mut next = 0usize;
        let mut failing_since: Option<Instant> = None;
        let mut backoff = Duration::from_millis(100);
        let mut request_id = 0u64;
        loop {
            // `client` checked there is a URL.
            let url = &self.urls[next % self.urls.len()];
            request_id += 1;
            let before = seen.last;
            let cut = match self
                .attempt(&client, url, request_id, &mut seen, &mut on_event)
                .await
            {
                Ok(()) => return Ok(self.ending(&client, url, request_id + 1, &mut seen).await),
                Err(cut) => cut,
            };
            if seen.last != before {
                failing_since = None;
                backoff = Duration::from_millis(100);
            }
            match cut {
                Cut::Refused(why) => {
                    eprintln!("otpmcp: {url}: {why}");
                    return Ok(Ending::Refused);
                }
                Cut::EventsGone(earliest) => {
                    eprintln!(
                        "otpmcp: events after seq {} are no longer retained; going on from {}",
                        show_seq(seen.last),
                        earliest.map_or("the live ones".to_owned(), |s| format!("seq {s}")),
                    );
                    seen.last = earliest.and_then(|s| s.checked_sub(1));
                    continue;
                }
                Cut::Retry(why) => {
                    let since = *failing_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.retry_for {
                        eprintln!(
                            "otpmcp: {url}: {why}; no server streamed the task for {:?}, giving up",
                            self.retry_for
                        );
                        return Ok(Ending::Unreachable);
                    }
                    match seen.last {
                        Some(seq) => eprintln!("otpmcp: {url}: {why}; resuming after seq {seq}"),
                        None => eprintln!("otpmcp: {url}: {why}; trying again"),
                    }
                }
            }
            next += 1;
            // Pacing between attempts, not synchronisation: a server that is down
            // should not be asked hundreds of times a second.
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MOST_BACKOFF);
        }
    }

    fn client(&self) -> Result<HttpClient, WatchError> {
        if self.urls.is_empty() {
            return Err(Unreachable::Url(String::new()).into());
        }
        for url in &self.urls {
            check_url(url, self.token.is_some())?;
        }
        Ok(http_client()?)
    }

    /// A POST of `method` as the stateless revision wants it.
    fn request(
        &self,
        url: &str,
        id: u64,
        method: &str,
        mut params: Value,
    ) -> Result<http::Request<Full<Bytes>>, Cut> {
        params["taskId"] = Value::String(self.task_id.clone());
        params["_meta"] = json!({
            PROTOCOL_VERSION: "2026-07-28",
            CLIENT_CAPABILITIES: { "extensions": { TASKS_EXTENSION: {} } },
        });
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let mut request = http::Request::post(url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", self.task_id.as_str());
        if let Some(token) = &self.token {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        request
            .body(Full::new(Bytes::from(body.to_string())))
            .map_err(|e| Cut::Refused(format!("cannot make the request: {e}")))
    }

    /// One `tasks/stream`: prints the events it brings; `Ok` once its result came.
    async fn attempt(
        &self,
        client: &HttpClient,
        url: &str,
        id: u64,
        seen: &mut Seen,
        on_event: &mut impl FnMut(&Value),
    ) -> Result<(), Cut> {
        let params = match seen.last {
            Some(after) => json!({ "after": after }),
            None => json!({}),
        };
        let request = self.request(url, id, "tasks/stream", params)?;
        let mut messages = open(client, request, self.idle_timeout).await?;
        while let Some(message) = messages.next().await.map_err(retry)? {
            if message.get("method").and_then(Value::as_str) == Some(EVENT_METHOD) {
                show(&message["params"], seen, on_event);
                continue;
            }
            if message.get("id").and_then(Value::as_u64) != Some(id) {
                continue;
            }
            return match message.get("error") {
                Some(error) => Err(refusal(error)),
                None => Ok(()),
            };
        }
        Err(Cut::Retry("the stream ended before the task did".into()))
    }

    /// The task's end: from its last status event, or asked with `tasks/get` when the
    /// stream ended without showing one (its events were no longer retained).
    async fn ending(&self, client: &HttpClient, url: &str, id: u64, seen: &mut Seen) -> Ending {
        let terminal = |status: Option<&str>| match status {
            Some("completed") => Some(Ending::Completed),
            Some("failed") => Some(Ending::Failed),
            Some("cancelled") => Some(Ending::Cancelled),
            _ => None,
        };
        if let Some(ending) = terminal(seen.status.as_deref()) {
            return ending;
        }
        let Ok(request) = self.request(url, id, "tasks/get", json!({})) else {
            return Ending::Unreachable;
        };
        let Ok(mut messages) = open(client, request, self.idle_timeout).await else {
            return Ending::Unreachable;
        };
        while let Ok(Some(message)) = messages.next().await {
            if let Some(ending) = terminal(message["result"]["status"].as_str()) {
                return ending;
            }
        }
        eprintln!("otpmcp: the stream ended but the task's end could not be read");
        Ending::Unreachable
    }
}

/// Hands `event` on unless it was handed on already.
fn show(event: &Value, seen: &mut Seen, on_event: &mut impl FnMut(&Value)) {
    let Some(seq) = event.get("seq").and_then(Value::as_u64) else {
        return;
    };
    if seen.last.is_some_and(|last| seq <= last) {
        return;
    }
    if event.get("type").and_then(Value::as_str) == Some(STATUS)
        && let Some(status) = event["payload"]["status"].as_str()
    {
        seen.status = Some(status.to_owned());
    }
    on_event(event);
    seen.last = Some(seq);
}

fn show_seq(seq: Option<u64>) -> String {
    seq.map_or("(none)".to_owned(), |s| s.to_string())
}

/// A JSON-RPC error answering `tasks/stream`.
fn refusal(error: &Value) -> Cut {
    let code = error["code"].as_i64().unwrap_or_default();
    let message = error["message"].as_str().unwrap_or("an error").to_owned();
    match code {
        -32010 => Cut::EventsGone(error["data"]["earliestSeq"].as_u64()),
        // Busy or failing on the server's side: another attempt may do.
        -32603 => Cut::Retry(format!("{message} ({code})")),
        _ => Cut::Refused(format!("{message} ({code})")),
    }
}

/// One line for a person: `[seq] what happened`, control characters escaped so that
/// every event stays on its line.
pub fn describe(event: &Value) -> String {
    let payload = &event["payload"];
    let text = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let what = match event["type"].as_str().unwrap_or_default() {
        STATUS => {
            let mut line = format!("status {}", text(&payload["status"]));
            if let Some(message) = payload["statusMessage"].as_str() {
                line.push_str(&format!(": {message}"));
            }
            if let Some(result) = payload.get("result") {
                let texts: Vec<String> = result["content"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c["text"].as_str().map(str::to_owned))
                    .collect();
                let error = if result["isError"] == Value::Bool(true) {
                    " (tool error)"
                } else {
                    ""
                };
                line.push_str(&format!(" result{error}: {}", texts.join(" ")));
            }
            if let Some(error) = payload.get("error") {
                line.push_str(&format!(
                    " error {}: {}",
                    text(&error["code"]),
                    text(&error["message"])
                ));
            }
            line
        }
        PROGRESS => {
            let mut line = format!("progress {}", text(&payload["progress"]));
            if !payload["total"].is_null() {
                line.push_str(&format!("/{}", text(&payload["total"])));
            }
            if let Some(message) = payload["message"].as_str() {
                line.push_str(&format!(" {message}"));
            }
            line
        }
        LOG => format!(
            "log {} {}: {}",
            text(&payload["level"]),
            text(&payload["logger"]),
            text(&payload["data"])
        ),
        EXECUTION_STARTED => format!("started {}", text(&payload["program"])),
        EXECUTION_OUTPUT => match payload["text"].as_str() {
            Some(t) => format!("{}: {t}", text(&payload["stream"])),
            None => format!(
                "{}: ({} bytes of base64)",
                text(&payload["stream"]),
                text(&payload["base64"]).len()
            ),
        },
        other => format!("{other} {payload}"),
    };
    format!("[{}] {}", text(&event["seq"]), what.escape_debug())
}

/// A stream cut short by `e`: worth resuming.
fn retry(e: WireError) -> Cut {
    Cut::Retry(e.to_string())
}

/// Sends `request`; an HTTP error that the server explains is turned into its cut.
async fn open(
    client: &HttpClient,
    request: http::Request<Full<Bytes>>,
    idle: Duration,
) -> Result<Messages, Cut> {
    let messages = Messages::open(client, request, idle).await.map_err(retry)?;
    if messages.is_stream() {
        return Ok(messages);
    }
    let status = messages.status();
    match (status.as_u16(), messages.first()) {
        (200..=299, Some(_)) => Ok(messages),
        (401, _) => Err(Cut::Refused(format!(
            "401 unauthorized: set {TOKEN_VARIABLE} to a bearer token the server accepts"
        ))),
        (_, Some(answer)) if answer.get("error").is_some() && !status.is_server_error() => {
            Err(refusal(&answer["error"]))
        }
        (403, _) => Err(Cut::Refused(
            "403 forbidden: the token lacks a scope".into(),
        )),
        (code, _) if status.is_server_error() || code == 429 || code == 408 => {
            Err(Cut::Retry(format!("HTTP {code}")))
        }
        (code, _) => Err(Cut::Refused(format!("HTTP {code}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_per_event_whatever_its_text() {
        let event = json!({"seq": 4, "type": EXECUTION_OUTPUT,
            "payload": {"stream": "stdout", "text": "two\nlines"}});
        assert_eq!(describe(&event), "[4] stdout: two\\nlines");
        let done = json!({"seq": 9, "type": STATUS, "payload": {"status": "completed",
            "result": {"content": [{"type": "text", "text": "streamed 3 events"}]}}});
        assert_eq!(
            describe(&done),
            "[9] status completed result: streamed 3 events"
        );
    }

    #[test]
    fn exit_codes_are_distinct() {
        let all = [
            Ending::Completed,
            Ending::Failed,
            Ending::Cancelled,
            Ending::Refused,
            Ending::Unreachable,
        ];
        let codes: std::collections::BTreeSet<u8> = all.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), all.len());
        assert!(!codes.contains(&2), "2 is bad usage");
    }
}
