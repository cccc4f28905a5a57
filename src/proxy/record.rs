//! Recording: every request goes to the upstream MCP server as it came (the headers that
//! matter, the body unchanged), and its answer comes back as it arrives, an SSE stream
//! block by block with the upstream's own bytes, paced by the client (the upstream body
//! is read only as the client takes it). Each request, response, block and stream end is
//! written to the recording on the way.
//!
//! A request whose `Host` or `Origin` is not allowed is refused before any of that
//! ([`super::access`]). `Mcp-Session-Id` values are written as `[session-N]`, one
//! number per session the upstream handed out, so a recording holds no live credential.

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, Uri};
use http_body::Frame;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::artifact::{Entry, Recorder};
use super::{MAX_BODY, access, is_event_stream, kept_headers};
use crate::config::is_secret_name;
use crate::net::guard::Guard;
use crate::stream::sse::{Block, Parser};

/// Blank lines and empty blocks (which dispatch nothing) kept in front of the next block
/// in the recording; beyond this they are passed on but not recorded, so an upstream
/// that sends nothing but line ends cannot grow the proxy's memory or the recording.
const SPARE: usize = 64 << 10;

/// The recording proxy's state.
pub struct Recording {
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    recorder: Arc<Recorder>,
    redact: Vec<String>,
    /// Query parameters written as `[redacted]`, besides the credential-like ones.
    redact_params: Vec<String>,
    /// `None`: session ids are recorded as they are (`--keep-session-ids`).
    sessions: Option<Mutex<Sessions>>,
    guard: Guard,
    next: AtomicU64,
}

/// The placeholder of each session id the upstream handed out.
#[derive(Default)]
struct Sessions {
    names: HashMap<String, String>,
}

/// What a session id the upstream never handed out is recorded as.
const UNKNOWN_SESSION: &str = "[session-unknown]";

impl Sessions {
    /// `id`'s placeholder; a new one when `issued` (the upstream's answer names it).
    fn name(&mut self, id: &str, issued: bool) -> String {
        if let Some(name) = self.names.get(id) {
            return name.clone();
        }
        if !issued {
            // Not stored: ids a client makes up cannot grow the table.
            return UNKNOWN_SESSION.to_owned();
        }
        let name = format!("[session-{}]", self.names.len() + 1);
        self.names.insert(id.to_owned(), name.clone());
        name
    }
}

/// `path` (a path with its query, or a whole URL) as it is recorded: the value of each
/// query parameter that looks like a credential or is named in `extra` (lower case) as
/// `[redacted]`. URLs end up in recordings people share and attach to bug reports.
pub(crate) fn redact_path(path: &str, extra: &[String]) -> String {
    let Some((before, query)) = path.split_once('?') else {
        return path.to_owned();
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _))
                if is_secret_name(name) || extra.iter().any(|e| name.eq_ignore_ascii_case(e)) =>
            {
                format!("{name}=[redacted]")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{before}?{}", query.join("&"))
}

impl Recording {
    /// Forwards to `upstream` and records with `recorder`, writing the headers named in
    /// `redact` and the query parameters named in `redact_params` (lower case), or
    /// looking like credentials, as `[redacted]` and, unless `keep_session_ids`, session
    /// ids as placeholders. Refuses what `guard` does not allow.
    pub fn new(
        upstream: Uri,
        recorder: Recorder,
        redact: Vec<String>,
        redact_params: Vec<String>,
        keep_session_ids: bool,
        guard: Guard,
    ) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            upstream,
            client: Client::builder(TokioExecutor::new()).build(connector),
            recorder: Arc::new(recorder),
            redact,
            redact_params,
            sessions: (!keep_session_ids).then(Mutex::default),
            guard,
            next: AtomicU64::new(1),
        }
    }

    /// The headers to write down; `answer`: the upstream's (which hand out session ids).
    fn recorded(&self, headers: &HeaderMap, answer: bool) -> BTreeMap<String, String> {
        kept_headers(headers)
            .map(|(name, value)| {
                let text = String::from_utf8_lossy(value.as_bytes());
                let value = if self.redact.iter().any(|r| r == name.as_str()) {
                    "[redacted]".to_owned()
                } else if name == "mcp-session-id"
                    && let Some(sessions) = &self.sessions
                {
                    match sessions.lock() {
                        Ok(mut sessions) => sessions.name(&text, answer),
                        Err(_) => "[redacted]".to_owned(),
                    }
                } else {
                    text.into_owned()
                };
                (name.as_str().to_owned(), value)
            })
            .collect()
    }

    /// The upstream's URL for a request to `uri`: the upstream's path, its own query and
    /// then the client's (docs/proxy.md: the query string is forwarded).
    fn target(&self, uri: &Uri) -> Result<Uri, http::Error> {
        let path = match self.upstream.path() {
            "" => "/",
            path => path,
        };
        let query = [self.upstream.query(), uri.query()]
            .into_iter()
            .flatten()
            .filter(|q| !q.is_empty())
            .collect::<Vec<_>>()
            .join("&");
        let path_and_query = match query.is_empty() {
            true => path.to_owned(),
            false => format!("{path}?{query}"),
        };
        let mut parts = self.upstream.clone().into_parts();
        parts.path_and_query = Some(path_and_query.parse()?);
        Ok(Uri::from_parts(parts)?)
    }
}

/// Any request to the proxy: forwarded to the upstream's MCP endpoint.
pub async fn forward(State(rec): State<Arc<Recording>>, request: Request) -> Response {
    if let Some(refused) = access::refusal(&rec.guard, request.headers()) {
        return refused;
    }
    let target = match rec.target(request.uri()) {
        Ok(target) => target,
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    };
    let n = rec.next.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response(),
    };
    let path = redact_path(
        parts.uri.path_and_query().map_or("/", |p| p.as_str()),
        &rec.redact_params,
    );
    rec.recorder.write(&Entry::Request {
        n,
        t: rec.recorder.now(),
        method: parts.method.to_string(),
        path,
        headers: rec.recorded(&parts.headers, false),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let mut upstream = http::Request::builder()
        .method(parts.method.clone())
        .uri(target);
    for (name, value) in kept_headers(&parts.headers) {
        upstream = upstream.header(name, value);
    }
    let answer = match upstream.body(Full::new(body)) {
        Ok(request) => rec.client.request(request).await,
        Err(e) => return bad_gateway(&e.to_string()),
    };
    let answer = match answer {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(error = %e, "the upstream could not be reached");
            return bad_gateway(&format!("the upstream could not be reached: {e}"));
        }
    };
    let (parts, body) = answer.into_parts();
    let headers = rec.recorded(&parts.headers, true);
    let mut response = Response::builder().status(parts.status);
    for (name, value) in kept_headers(&parts.headers) {
        response = response.header(name, value);
    }
    let status = parts.status.as_u16();
    let body = if is_event_stream(&parts.headers) {
        rec.recorder.write(&Entry::Response {
            n,
            t: rec.recorder.now(),
            status,
            headers,
            body: None,
        });
        Body::new(Tap {
            inner: body,
            recorder: rec.recorder.clone(),
            n,
            parser: Parser::new(MAX_BODY),
            raw: Vec::new(),
            line: Line::default(),
            dropped: false,
            ended: false,
        })
    } else {
        let bytes = match http_body_util::Limited::new(body, MAX_BODY).collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => return bad_gateway(&format!("the upstream's answer failed: {e}")),
        };
        rec.recorder.write(&Entry::Response {
            n,
            t: rec.recorder.now(),
            status,
            headers,
            body: Some(String::from_utf8_lossy(&bytes).into_owned()),
        });
        Body::from(bytes)
    };
    response
        .body(body)
        .unwrap_or_else(|e| bad_gateway(&e.to_string()))
}

fn bad_gateway(why: &str) -> Response {
    let mut response = (StatusCode::BAD_GATEWAY, why.to_owned()).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    response
}

/// An upstream SSE body on its way to the client, recorded block by block.
struct Tap {
    inner: Incoming,
    recorder: Arc<Recorder>,
    n: u64,
    parser: Parser,
    /// The bytes of the block being read, as they came.
    raw: Vec<u8>,
    line: Line,
    /// Blank lines were left out of the recording (logged once per stream).
    dropped: bool,
    ended: bool,
}

/// Where the upstream's bytes stand line by line, as the parser reads them (a line ends
/// at CR, LF or CRLF): enough to tell where a blank line ends a block.
#[derive(Debug, Default)]
struct Line {
    /// The current line has a byte other than a line end.
    text: bool,
    /// The last byte was a CR: a LF right after it ends nothing more.
    after_cr: bool,
}

impl Line {
    /// Reads `b`; whether it ends a blank line (and so a block, if only an empty one).
    fn ends_block(&mut self, b: u8) -> bool {
        match b {
            b'\n' if self.after_cr => {
                self.after_cr = false;
                false
            }
            b'\n' | b'\r' => {
                self.after_cr = b == b'\r';
                !std::mem::replace(&mut self.text, false)
            }
            _ => {
                self.after_cr = false;
                self.text = true;
                false
            }
        }
    }
}

impl Tap {
    fn record(&mut self, data: &[u8]) {
        // A block can end only at a line end: fed a line at a time, the parser says
        // where each block ends in the upstream's own bytes.
        let mut start = 0;
        for (i, &b) in data.iter().enumerate() {
            let ends_block = self.line.ends_block(b);
            if b == b'\n' || b == b'\r' {
                self.feed(&data[start..=i], ends_block);
                start = i + 1;
            }
        }
        self.feed(&data[start..], false);
    }

    fn feed(&mut self, piece: &[u8], ends_block: bool) {
        if piece.is_empty() {
            return;
        }
        self.raw.extend_from_slice(piece);
        let blocks = match self.parser.feed(piece) {
            Ok(blocks) => blocks,
            Err(e) => {
                // Passed on to the client all the same, but not recorded.
                tracing::warn!(error = %e, "an upstream SSE block is too large to record");
                self.parser = Parser::new(MAX_BODY);
                self.raw.clear();
                Vec::new()
            }
        };
        if let Some(block) = blocks.into_iter().last() {
            let raw = String::from_utf8_lossy(&std::mem::take(&mut self.raw)).into_owned();
            self.recorder
                .write(&event(self.n, self.recorder.now(), raw, block));
        } else if ends_block && self.raw.len() > SPARE {
            // Only empty blocks since the last one recorded: they dispatch nothing, so
            // the stream means the same without them.
            if !std::mem::replace(&mut self.dropped, true) {
                tracing::warn!(
                    bytes = self.raw.len(),
                    "the upstream sends blank lines or empty SSE blocks: passed on, not recorded"
                );
            }
            self.raw.clear();
        }
    }

    fn end(&mut self, cut: bool) {
        if !self.ended {
            self.ended = true;
            self.recorder.write(&Entry::End {
                n: self.n,
                t: self.recorder.now(),
                cut,
                tail: String::from_utf8_lossy(&std::mem::take(&mut self.raw)).into_owned(),
            });
        }
    }
}

fn event(n: u64, t: f64, raw: String, block: Block) -> Entry {
    Entry::Event {
        n,
        t,
        raw,
        id: block.id,
        event: block.event,
        data: block.data,
        retry: block.retry,
        comments: block.comments,
    }
}

impl http_body::Body for Tap {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let data = data.clone();
                    self.record(&data);
                }
                // A body whose end is known is not polled again after its last frame.
                if self.inner.is_end_stream() {
                    self.end(false);
                }
            }
            Poll::Ready(None) => self.end(false),
            Poll::Ready(Some(Err(_))) => self.end(false),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
}

impl Drop for Tap {
    /// The client left before the upstream ended the stream.
    fn drop(&mut self) {
        self.end(true);
    }
}
