//! Recording: every request goes to the upstream MCP server as it came (the headers that
//! matter, the body unchanged), and its answer comes back as it arrives, an SSE stream
//! block by block with the upstream's own bytes, paced by the client (the upstream body
//! is read only as the client takes it). Each request, response, block and stream end is
//! written to the recording on the way.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
use super::{MAX_BODY, is_event_stream, kept_headers};
use crate::stream::sse::{Block, Parser};

/// The recording proxy's state.
pub struct Recording {
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    recorder: Arc<Recorder>,
    redact: Vec<String>,
    next: AtomicU64,
}

impl Recording {
    /// Forwards to `upstream` and records with `recorder`, writing the headers named in
    /// `redact` (lower case) as `[redacted]`.
    pub fn new(upstream: Uri, recorder: Recorder, redact: Vec<String>) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        Self {
            upstream,
            client: Client::builder(TokioExecutor::new()).build(connector),
            recorder: Arc::new(recorder),
            redact,
            next: AtomicU64::new(1),
        }
    }

    fn recorded(&self, headers: &HeaderMap) -> BTreeMap<String, String> {
        kept_headers(headers)
            .map(|(name, value)| {
                let value = match self.redact.iter().any(|r| r == name.as_str()) {
                    true => "[redacted]".to_owned(),
                    false => String::from_utf8_lossy(value.as_bytes()).into_owned(),
                };
                (name.as_str().to_owned(), value)
            })
            .collect()
    }
}

/// Any request to the proxy: forwarded to the upstream's MCP endpoint.
pub async fn forward(State(rec): State<Arc<Recording>>, request: Request) -> Response {
    let n = rec.next.fetch_add(1, Ordering::Relaxed);
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(body) => body,
        Err(_) => return (StatusCode::PAYLOAD_TOO_LARGE, "request body too large").into_response(),
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    rec.recorder.write(&Entry::Request {
        n,
        t: rec.recorder.now(),
        method: parts.method.to_string(),
        path,
        headers: rec.recorded(&parts.headers),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let mut upstream = http::Request::builder()
        .method(parts.method.clone())
        .uri(rec.upstream.clone());
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
    let headers = rec.recorded(&parts.headers);
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
    ended: bool,
}

impl Tap {
    fn record(&mut self, data: &[u8]) {
        // A block can end only at a line end: fed a line at a time, the parser says
        // where each block ends in the upstream's own bytes.
        let mut start = 0;
        for (i, &b) in data.iter().enumerate() {
            if b == b'\n' || b == b'\r' {
                self.feed(&data[start..=i]);
                start = i + 1;
            }
        }
        self.feed(&data[start..]);
    }

    fn feed(&mut self, piece: &[u8]) {
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
