//! The fuzz targets' bodies: one function per target of `fuzz/`, each taking the raw input
//! and checking a property of a decoder that a client (or Redis, read back, or a recording
//! given to `otpmcp proxy --replay`) reaches. They
//! never panic on any input unless the property fails. `tests/fuzz_corpus.rs` runs the
//! committed corpus through them on the stable toolchain; `cargo fuzz` runs them under
//! libFuzzer (docs/reliability.md).
//!
//! Structured inputs are cut from the bytes by hand (a byte for a flag, fixed-width
//! numbers, the rest as text), so this needs no fuzzing crate of its own.

use std::collections::HashMap;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use bytes::Bytes;
use serde_json::Value;

use crate::config::{Config, ServerConfig, parse_duration};
use crate::ids::{EventId, SessionId, StreamKey, StreamNo};
use crate::net::guard::Guard;
use crate::protocol::meta::RequestMeta;
use crate::protocol::methods::Method;
use crate::protocol::{self, Incoming};
use crate::proxy::{artifact, replay::Replay};
use crate::stream::sse;
use crate::transport::extract::{self, LastEventId};

/// Takes `n` bytes off the front of `data` (fewer if it is shorter).
fn take<'a>(data: &mut &'a [u8], n: usize) -> &'a [u8] {
    let (head, tail) = data.split_at(n.min(data.len()));
    *data = tail;
    head
}

fn take_u64(data: &mut &[u8]) -> u64 {
    let mut bytes = [0u8; 8];
    let head = take(data, 8);
    bytes[..head.len()].copy_from_slice(head);
    u64::from_le_bytes(bytes)
}

/// `Last-Event-ID`, as text and as a header: whatever parses prints back the same, and
/// the header never reads more than the id's bounded length.
pub fn last_event_id(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(id) = text.parse::<EventId>() {
        let printed = id.to_string();
        assert_eq!(printed.parse::<EventId>().ok(), Some(id), "{printed}");
        assert!(printed.len() <= 8 + 1 + 20 + 1 + 20);
    }
    let Ok(value) = HeaderValue::from_bytes(data) else {
        return;
    };
    let mut headers = HeaderMap::new();
    headers.insert(extract::LAST_EVENT_ID.clone(), value);
    match extract::last_event_id(&headers) {
        LastEventId::Valid(id) => assert_eq!(id.to_string().parse::<EventId>().ok(), Some(id)),
        LastEventId::Malformed(shown, _) => assert!(shown.chars().count() <= 64),
        LastEventId::Absent => panic!("the header is there"),
    }
}

/// A POST body: the JSON-RPC decoder, then what the server reads of a request before any
/// handler runs (method, `_meta`, progress token, `initialize`'s params).
pub fn jsonrpc(data: &[u8]) {
    let incoming = match protocol::parse(data) {
        Ok(incoming) => incoming,
        Err(failure) => {
            assert!(failure.error.code < 0, "an error code");
            return;
        }
    };
    let Incoming::Request(request) = incoming else {
        return;
    };
    let method = request.kind;
    let _ = RequestMeta::read(&request);
    let _ = crate::protocol::meta::names_version(&request);
    let _ = request.target();
    let _ = request.cursor();
    if let Some(token) = crate::server::McpServer::progress_token(&request) {
        assert!(token.is_string() || token.is_number());
    }
    if method == Method::Initialize {
        let _ = crate::server::McpServer::default().initialize(request.clone());
    }
    let _ = crate::transport::stateless::headers::check_standard(&HeaderMap::new(), &request);
}

/// The headers a request is judged by. The input is lines `name: value`; each header
/// becomes one entry (repeats allowed), then every reader of headers runs on the map.
pub fn headers(data: &[u8]) {
    let mut headers = HeaderMap::new();
    for line in data.split(|b| *b == b'\n') {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name),
            HeaderValue::from_bytes(value.trim_ascii()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    if let Ok(Some(id)) = extract::session_id(&headers) {
        assert_eq!(id.to_string().parse::<SessionId>().ok(), Some(id));
    }
    let _ = extract::protocol_version(&headers);
    let _ = extract::accepts(&headers);
    let _ = extract::is_json_content(&headers);
    let _ = extract::last_event_id(&headers);
    let _ = Guard::new(&ServerConfig::default()).check(&headers);
    let call =
        crate::protocol::Request::new(crate::protocol::RequestId::Number(1), "tools/call", None);
    let _ = crate::transport::stateless::headers::check_standard(&headers, &call);
}

/// `sys.toml` and its durations: any text loads as a configuration or gives an error that
/// names a key or the file, never a panic.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(d) = parse_duration(&text) {
        let ms = d.as_millis();
        assert_eq!(parse_duration(&format!("{ms}ms")), Ok(d));
    }
    if let Ok(config) = Config::from_toml(&text) {
        assert!(config.validate().is_ok(), "a loaded configuration is valid");
    }
}

/// SSE framing read back by the parser: a message frame gives its id, `event: message`
/// and its data (line breaks normalized to LF, invalid UTF-8 replaced), whether framed
/// whole or around a shared payload; priming, `retry:` and comment frames likewise.
pub fn sse_round_trip(data: &[u8]) {
    let mut rest = data;
    let flags = take(&mut rest, 1).first().copied().unwrap_or(0);
    let tag = take_u64(&mut rest) as u32;
    let (stream, seq) = (take_u64(&mut rest), take_u64(&mut rest));
    let retry_ms = take_u64(&mut rest) % (1 << 40);
    let id: Option<EventId> = (flags & 1 == 1)
        .then(|| format!("{tag:08x}-{stream}-{seq}").parse().ok())
        .flatten();
    let payload = Bytes::copy_from_slice(rest);
    let want = String::from_utf8_lossy(rest)
        .replace("\r\n", "\n")
        .replace('\r', "\n");

    let mut wire = bytes::BytesMut::new();
    sse::framed(id.as_ref(), &payload).copy_to(&mut wire);
    assert_eq!(wire.as_ref(), sse::message(id.as_ref(), &payload).as_ref());
    let retry = std::time::Duration::from_millis(retry_ms);
    wire.extend_from_slice(&sse::priming(id.as_ref(), retry));
    wire.extend_from_slice(&sse::retry(retry));
    let comment = String::from_utf8_lossy(rest).into_owned();
    wire.extend_from_slice(&sse::comment(&comment));

    // Fed in two pieces, cut anywhere: a parser must not care where reads end.
    let cut = usize::from(flags >> 1) * wire.len() / 128;
    let mut parser = sse::Parser::new(usize::MAX);
    let mut blocks = parser
        .feed(&wire[..cut.min(wire.len())])
        .unwrap_or_default();
    blocks.extend(
        parser
            .feed(&wire[cut.min(wire.len())..])
            .unwrap_or_default(),
    );
    let id_text = id.map(|id| id.to_string());
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    assert_eq!(blocks[0].id, id_text);
    assert_eq!(blocks[0].event.as_deref(), Some("message"));
    assert_eq!(blocks[0].data.as_deref(), Some(want.as_str()));
    assert_eq!(blocks[1].id, id_text);
    assert_eq!(blocks[1].retry, Some(retry_ms));
    assert_eq!(blocks[1].data.as_deref(), Some(""));
    assert_eq!(blocks[2].retry, Some(retry_ms));
    assert_eq!(blocks[2].data, None);
    let lines: Vec<String> = comment
        .replace("\r\n", "\n")
        .replace('\r', "\n")
        .split('\n')
        .map(|l| format!(" {l}"))
        .collect();
    assert_eq!(blocks[3].comments, lines);
}

/// A recording, as `otpmcp proxy --replay` reads a file it may not have written: any
/// bytes parse or give an error; whatever parses is indexed as a replay, and every
/// answer that replay can give (each exchange's, each resume from a recorded event id,
/// the nearest-request error for each recorded request) is built without a panic.
pub fn recording(data: &[u8]) {
    let entries = match artifact::parse(data, "input") {
        Ok((header, entries)) => {
            assert_eq!(header.format, artifact::FORMAT);
            entries
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let exchanges = entries
        .iter()
        .map(artifact::Entry::exchange)
        .collect::<std::collections::HashSet<_>>()
        .len();
    let replay = Replay::new(entries, true, Guard::new(&ServerConfig::default()));
    assert_eq!(replay.exchanges(), exchanges);
    assert!(replay.answer_everything() >= 3 * exchanges);
}

/// What is read back from Redis: an event (RESP, as `HMGET` returns it), a message
/// on a stream's channel, a session's hash, an in-flight lease entry, a task record.
/// Redis is ours, but a corrupted or foreign entry must give an error, not a panic.
pub fn redis_entry(data: &[u8]) {
    let mut rest = data;
    let kind = take(&mut rest, 1).first().copied().unwrap_or(0);
    let key = StreamKey::new(SessionId::random(), StreamNo(take_u64(&mut rest)));
    match kind % 5 {
        0 => {
            let seq = take_u64(&mut rest);
            if let Ok(value) = redis::parse_redis_value(rest)
                && let Some(event) = crate::event_store::redis::decode_event(key, seq, value)
            {
                assert_eq!(event.id.key_in(key.session), Some(key));
                assert_eq!(event.id.seq, seq);
            }
        }
        1 => {
            let _ = crate::event_store::redis::channel::decode(key, rest);
        }
        2 => {
            let text = String::from_utf8_lossy(rest);
            let fields: HashMap<String, String> = text
                .split('\n')
                .filter_map(|line| line.split_once('='))
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect();
            let _ = crate::session::directory::parse(&fields);
        }
        3 => {
            let text = String::from_utf8_lossy(rest);
            let (field, id) = text.split_once('\n').unwrap_or((&text, ""));
            let lapsed = crate::cluster::leases::Lapsed {
                replica: key.stream.0,
                stopped: key.stream.0.is_multiple_of(2),
            };
            if let Some(orphan) = crate::cluster::leases::orphan(lapsed, field.into(), id) {
                let answer: Value = serde_json::from_slice(&orphan.payload).unwrap_or_default();
                assert!(answer["error"]["code"].is_i64());
            }
        }
        _ => {
            let _ = serde_json::from_slice::<crate::tasks::record::TaskRecord>(rest);
        }
    }
}
