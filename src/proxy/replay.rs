//! Replaying: the recording served as an MCP server. A request is matched to the first
//! recorded exchange not yet replayed with the same method, session and body (JSON
//! compared as values), and gets that exchange's status, headers and body, an SSE stream
//! block by block with the recorded bytes, so the client sees what it saw then, event ids
//! and `retry:` included. With `--timing` the blocks keep their recorded spacing.
//!
//! A GET with `Last-Event-ID` gets the recorded resume with that id if there is one, and
//! otherwise what followed that event: the rest of its stream, then the streams that
//! resumed it, each event once. So a client resumes anywhere in a replay.
//!
//! Each client whose request gets a recorded `Mcp-Session-Id` (an `initialize`) is handed
//! a fresh random id instead, mapped back to the recorded one (`[session-N]`, or the id
//! itself in a recording made with `--keep-session-ids`) on its later requests. A foreign
//! `Host` or `Origin` is refused before anything is read from the recording.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use super::artifact::Entry;
use super::{MAX_BODY, access};
use crate::net::guard::Guard;

/// Fresh session ids remembered; past it the oldest is forgotten, so clients that
/// initialize in a loop cannot grow the table.
const MAX_SESSIONS: usize = 10_000;

/// One recorded exchange.
#[derive(Debug, Default)]
struct Exchange {
    method: String,
    session: Option<String>,
    last_event_id: Option<String>,
    body: String,
    json: Option<Value>,
    /// The response, once recorded.
    status: u16,
    headers: Vec<(String, String)>,
    answer: Option<String>,
    t_response: f64,
    /// SSE blocks: time, bytes, id.
    events: Vec<(f64, String, Option<String>)>,
    /// The client left first: the stream stays open after its last block.
    cut: bool,
    tail: String,
    replayed: AtomicBool,
}

/// The replaying server's state: the recording, indexed.
pub struct Replay {
    exchanges: Vec<Exchange>,
    /// Event id to (exchange, block).
    events: HashMap<String, (usize, usize)>,
    timing: bool,
    guard: Guard,
    sessions: Mutex<Sessions>,
}

/// The fresh session ids handed out, each with the recorded one it stands for.
#[derive(Debug, Default)]
struct Sessions {
    recorded: HashMap<String, String>,
    order: VecDeque<String>,
}

impl Sessions {
    /// A fresh id for `recorded`.
    fn hand_out(&mut self, recorded: &str) -> String {
        let fresh = uuid::Uuid::new_v4().simple().to_string();
        if self.order.len() >= MAX_SESSIONS
            && let Some(oldest) = self.order.pop_front()
        {
            self.recorded.remove(&oldest);
        }
        self.order.push_back(fresh.clone());
        self.recorded.insert(fresh.clone(), recorded.to_owned());
        fresh
    }
}

impl Replay {
    /// Indexes `entries`; `timing` keeps the recorded spacing of blocks; requests that
    /// `guard` refuses get nothing from the recording.
    pub fn new(entries: Vec<Entry>, timing: bool, guard: Guard) -> Self {
        let mut exchanges: Vec<Exchange> = Vec::new();
        let mut by_n = HashMap::new();
        for entry in entries {
            let n = entry.exchange();
            let at = *by_n.entry(n).or_insert_with(|| {
                exchanges.push(Exchange::default());
                exchanges.len() - 1
            });
            let x = &mut exchanges[at];
            match entry {
                Entry::Request {
                    method,
                    headers,
                    body,
                    ..
                } => {
                    x.method = method;
                    x.session = headers.get("mcp-session-id").cloned();
                    x.last_event_id = headers.get("last-event-id").cloned();
                    x.json = serde_json::from_str(&body).ok();
                    x.body = body;
                }
                Entry::Response {
                    t,
                    status,
                    headers,
                    body,
                    ..
                } => {
                    x.status = status;
                    x.headers = headers.into_iter().collect();
                    x.answer = body;
                    x.t_response = t;
                }
                Entry::Event { t, raw, id, .. } => x.events.push((t, raw, id)),
                Entry::End { cut, tail, .. } => {
                    x.cut = cut;
                    x.tail = tail;
                }
            }
        }
        let mut events = HashMap::new();
        for (i, x) in exchanges.iter().enumerate() {
            for (j, (_, _, id)) in x.events.iter().enumerate() {
                if let Some(id) = id {
                    events.entry(id.clone()).or_insert((i, j));
                }
            }
        }
        Self {
            exchanges,
            events,
            timing,
            guard,
            sessions: Mutex::default(),
        }
    }

    /// The recorded session id a client's `session` stands for: the one its fresh id was
    /// handed out for, or itself.
    fn recorded_session(&self, session: Option<String>) -> Option<String> {
        let session = session?;
        let recorded = self
            .sessions
            .lock()
            .ok()
            .and_then(|s| s.recorded.get(&session).cloned());
        Some(recorded.unwrap_or(session))
    }

    /// The session id to send a client in place of `recorded`: its own (`client`), or a
    /// fresh one when it has none yet.
    fn session_for(&self, client: Option<&str>, recorded: &str) -> String {
        if let Some(client) = client {
            return client.to_owned();
        }
        match self.sessions.lock() {
            Ok(mut sessions) => sessions.hand_out(recorded),
            // Never the recorded value: it may be a live id (--keep-session-ids).
            Err(_) => uuid::Uuid::new_v4().simple().to_string(),
        }
    }

    /// How many exchanges the recording holds.
    pub fn exchanges(&self) -> usize {
        self.exchanges.len()
    }

    /// The first exchange not yet replayed among those `fits`; the last of them when
    /// all were (a client may repeat itself).
    fn take(&self, fits: impl Fn(&Exchange) -> bool) -> Option<usize> {
        let mut last = None;
        for (i, x) in self.exchanges.iter().enumerate().filter(|(_, x)| fits(x)) {
            if !x.replayed.swap(true, Ordering::AcqRel) {
                return Some(i);
            }
            last = Some(i);
        }
        last
    }
}

fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Any request to the replaying server.
pub async fn answer(State(replay): State<Arc<Replay>>, request: Request) -> Response {
    if let Some(refused) = access::refusal(&replay.guard, request.headers()) {
        return refused;
    }
    let (parts, body) = request.into_parts();
    let method = parts.method.to_string();
    let client = header(&parts.headers, "mcp-session-id");
    let session = replay.recorded_session(client.clone());
    let last_event_id = header(&parts.headers, "last-event-id");
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => String::from_utf8_lossy(&body).into_owned(),
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response(),
    };
    let json = serde_json::from_str::<Value>(&body).ok();
    let found = replay.take(|x| {
        x.method == method
            && x.session == session
            && x.last_event_id == last_event_id
            && match (&x.json, &json) {
                (Some(a), Some(b)) => a == b,
                _ => x.body == body,
            }
    });
    let client = client.as_deref();
    if let Some(i) = found {
        return replay.send(i, 0, client);
    }
    if let Some(id) = &last_event_id
        && let Some(&(i, j)) = replay.events.get(id)
    {
        return replay.resume(i, j, client);
    }
    not_recorded(&replay, &method, json.as_ref(), last_event_id.as_deref())
}

impl Replay {
    /// Exchange `i`'s answer, its blocks from `from` on, for a client in session `client`.
    fn send(&self, i: usize, from: usize, client: Option<&str>) -> Response {
        let x = &self.exchanges[i];
        let blocks = x.events[from.min(x.events.len())..]
            .iter()
            .map(|(t, raw, _)| (*t - x.t_response, raw.clone()))
            .collect();
        self.respond(x, blocks, client)
    }

    /// What followed block `j` of exchange `i`: the rest of it, then the exchanges that
    /// resumed it (and those that resumed them), each event once.
    fn resume(&self, i: usize, j: usize, client: Option<&str>) -> Response {
        let mut chain = vec![i];
        let mut k = 0;
        while k < chain.len() {
            let ids: Vec<&String> = self.exchanges[chain[k]]
                .events
                .iter()
                .filter_map(|(_, _, id)| id.as_ref())
                .collect();
            for (n, x) in self.exchanges.iter().enumerate() {
                let resumes = x.last_event_id.as_ref().is_some_and(|l| ids.contains(&l));
                if resumes && !chain.contains(&n) {
                    chain.push(n);
                }
            }
            k += 1;
        }
        let mut seen = std::collections::HashSet::new();
        let mut blocks = Vec::new();
        for (position, &n) in chain.iter().enumerate() {
            let x = &self.exchanges[n];
            let skip = if position == 0 { j + 1 } else { 0 };
            for (t, raw, id) in x.events.iter().skip(skip) {
                if id.as_ref().is_none_or(|id| seen.insert(id.clone())) {
                    blocks.push((*t - x.t_response, raw.clone()));
                }
            }
        }
        let last = chain.last().map_or(i, |&n| n);
        self.respond(&self.exchanges[last], blocks, client)
    }

    fn respond(&self, x: &Exchange, blocks: Vec<(f64, String)>, client: Option<&str>) -> Response {
        let mut response = Response::builder().status(x.status);
        for (name, value) in &x.headers {
            match name.eq_ignore_ascii_case("mcp-session-id") {
                true => response = response.header(name, self.session_for(client, value)),
                false => response = response.header(name, value),
            }
        }
        let body = match &x.answer {
            Some(answer) => Body::from(answer.clone()),
            None => {
                let (cut, tail, timing) = (x.cut, x.tail.clone(), self.timing);
                let stream = async_stream(blocks, tail, cut, timing);
                Body::from_stream(stream)
            }
        };
        response
            .body(body)
            .unwrap_or_else(|e| (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response())
    }
}

impl Replay {
    /// Builds every answer this replay can give: each exchange's, for a client with and
    /// without a session, each resume from a recorded event id, and the nearest-request
    /// error for each recorded request. For the `recording` fuzz target: a recording
    /// from anywhere must not make any of them panic. Returns how many were built.
    pub(crate) fn answer_everything(&self) -> usize {
        let mut built = 0;
        for (i, x) in self.exchanges.iter().enumerate() {
            let _ = self.send(i, 0, None);
            let _ = self.send(i, x.events.len() + 1, Some("a-session"));
            let last = x.last_event_id.as_deref();
            let _ = not_recorded(self, &x.method, x.json.as_ref(), last);
            built += 3;
        }
        for &(i, j) in self.events.values() {
            let _ = self.resume(i, j, None);
            built += 1;
        }
        built
    }
}

/// The blocks as a body, at their recorded times when `timing`; then the tail, and if
/// the recorded client left first, nothing more until this client leaves too.
fn async_stream(
    blocks: Vec<(f64, String)>,
    tail: String,
    cut: bool,
    timing: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> {
    let start = tokio::time::Instant::now();
    let mut items = blocks.into_iter().map(Some).collect::<Vec<_>>();
    items.push(None);
    futures_util::stream::unfold(
        (items.into_iter(), tail, false),
        move |(mut rest, tail, done)| async move {
            if done {
                return None;
            }
            match rest.next() {
                Some(Some((at, raw))) => {
                    if timing && let Ok(offset) = Duration::try_from_secs_f64(at / 1000.0) {
                        tokio::time::sleep_until(start + offset).await;
                    }
                    Some((Ok(Bytes::from(raw)), (rest, tail, false)))
                }
                _ => {
                    if cut {
                        std::future::pending::<()>().await;
                    }
                    Some((Ok(Bytes::from(tail)), (rest, String::new(), true)))
                }
            }
        },
    )
}

/// A request the recording does not hold: a JSON-RPC error naming the nearest recorded
/// request, so the difference shows.
fn not_recorded(
    replay: &Replay,
    method: &str,
    json: Option<&Value>,
    last: Option<&str>,
) -> Response {
    let Some(request) = json else {
        let why = match last {
            Some(id) => format!("no event {id:?} in the recording"),
            None => format!("no recorded {method} request like this one"),
        };
        return (StatusCode::NOT_FOUND, why).into_response();
    };
    let Some(id) = request
        .get("id")
        .filter(|_| request.get("method").is_some())
    else {
        // A notification or an answer to the server: nothing to answer with.
        return StatusCode::ACCEPTED.into_response();
    };
    let name = request
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let text = request.to_string();
    let method_of = |x: &Exchange| {
        x.json
            .as_ref()
            .and_then(|j| j.get("method"))
            .and_then(Value::as_str)
            == Some(name)
    };
    let has_method = replay.exchanges.iter().any(&method_of);
    let nearest = replay
        .exchanges
        .iter()
        .filter(|x| x.json.is_some() && (!has_method || method_of(x)))
        .min_by_key(|x| distance(&x.body, &text));
    let (code, why) = match has_method {
        true => (-32602, "its params differ from every recorded"),
        false => (-32601, "no recorded request has this method"),
    };
    let nearest = nearest.map_or("none".to_owned(), |x| x.body.chars().take(400).collect());
    let error = json!({"jsonrpc": "2.0", "id": id, "error": {"code": code,
        "message": format!("`{name}` is not in the recording: {why}; the nearest recorded request is {nearest}"),
        "data": {"nearest": nearest}}});
    let mut response = (StatusCode::OK, error.to_string()).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    response
}

/// Characters of each text compared by [`distance`]: the cost is their product.
const COMPARED: usize = 400;

/// Edit distance of the first [`COMPARED`] characters of two texts (two rows of the
/// table), so a huge request cannot make the nearest-request search quadratic in it.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().take(COMPARED).collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().take(COMPARED).enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != cb)).min(row[j] + 1).min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::distance;

    #[test]
    fn edit_distance() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }
}
