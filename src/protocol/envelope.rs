//! The JSON-RPC envelope: [`parse`] classifies one incoming message into [`Incoming`];
//! [`Outgoing`] serializes ours.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{ErrorObject, Notification, Request, RequestId};

/// One incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Incoming {
    /// A request.
    Request(Request),
    /// A notification.
    Notification(Notification),
    /// A response to a request we sent (result or error).
    Response {
        /// The id of our request.
        id: RequestId,
        /// The result, or the client's error.
        outcome: Result<Value, ErrorObject>,
    },
}

/// Why a body is not a usable message.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseFailure {
    /// The id, when one could be read (so the error can be addressed).
    pub id: Option<RequestId>,
    /// The error to send back.
    pub error: ErrorObject,
}

#[derive(Deserialize)]
struct RawMessage {
    jsonrpc: Option<String>,
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    method: Option<String>,
    params: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    result: Option<Value>,
    error: Option<Value>,
}

/// Distinguishes `"id": null` (present) from a missing id.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// Parses one JSON-RPC message.
pub fn parse(body: &[u8]) -> Result<Incoming, ParseFailure> {
    let invalid = |id: Option<RequestId>, why: &str| ParseFailure {
        id,
        error: ErrorObject::new(
            ErrorObject::INVALID_REQUEST,
            format!("Invalid request: {why}"),
        ),
    };
    // Straight into the envelope: a well-formed message is read once. Anything else is
    // read again as a plain value, only to say what is wrong with it.
    let raw: RawMessage = match serde_json::from_slice(body) {
        Ok(raw) => raw,
        Err(_) => {
            let value: Value = serde_json::from_slice(body).map_err(|e| ParseFailure {
                id: None,
                error: ErrorObject::new(ErrorObject::PARSE_ERROR, format!("Parse error: {e}")),
            })?;
            return Err(if value.is_array() {
                invalid(
                    None,
                    "batches (JSON arrays) are not supported since MCP 2025-06-18; send one message per POST",
                )
            } else {
                invalid(None, "expected a JSON object")
            });
        }
    };
    let id = match raw.id {
        None => None,
        Some(v) => match serde_json::from_value::<RequestId>(v) {
            Ok(id) => Some(id),
            Err(_) => return Err(invalid(None, "id must be a string or an integer")),
        },
    };
    if raw.jsonrpc.as_deref() != Some("2.0") {
        return Err(invalid(id, "jsonrpc must be \"2.0\""));
    }
    if let Some(params) = &raw.params
        && !params.is_object()
        && !params.is_array()
    {
        return Err(invalid(id, "params must be an object or an array"));
    }
    match (raw.method, id) {
        (Some(method), Some(id)) => Ok(Incoming::Request(Request::new(id, method, raw.params))),
        (Some(method), None) => Ok(Incoming::Notification(Notification {
            method,
            params: raw.params,
        })),
        (None, Some(id)) if raw.result.is_some() || raw.error.is_some() => {
            let outcome = match (raw.result, raw.error) {
                (Some(result), _) => Ok(result),
                (None, Some(error)) => Err(serde_json::from_value(error).unwrap_or_else(|_| {
                    ErrorObject::new(ErrorObject::INTERNAL_ERROR, "malformed error object")
                })),
                (None, None) => return Err(invalid(Some(id), "missing result")),
            };
            Ok(Incoming::Response { id, outcome })
        }
        (None, id) => Err(invalid(id, "missing method")),
    }
}

/// A message we send.
#[derive(Debug, Clone)]
pub enum Outgoing {
    /// A successful response.
    Result {
        /// The request's id.
        id: RequestId,
        /// The result.
        result: Value,
    },
    /// An error response; `id` is `None` when the request's id could not be read.
    Error {
        /// The request's id.
        id: Option<RequestId>,
        /// The error.
        error: ErrorObject,
    },
    /// A notification.
    Notification(Notification),
    /// A request to the client (sampling, elicitation, roots), with our id for it.
    Request(Request),
}

#[derive(Serialize)]
struct Envelope<'a> {
    jsonrpc: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<Option<&'a RequestId>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a ErrorObject>,
    #[serde(skip_serializing_if = "Option::is_none")]
    method: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    params: Option<&'a Value>,
}

impl Outgoing {
    /// Serializes to compact JSON (one line, as SSE `data:` wants).
    pub fn to_bytes(&self) -> Bytes {
        let envelope = match self {
            Self::Result { id, result } => Envelope {
                jsonrpc: "2.0",
                id: Some(Some(id)),
                result: Some(result),
                error: None,
                method: None,
                params: None,
            },
            Self::Error { id, error } => Envelope {
                jsonrpc: "2.0",
                id: Some(id.as_ref()),
                result: None,
                error: Some(error),
                method: None,
                params: None,
            },
            Self::Notification(n) => Envelope {
                jsonrpc: "2.0",
                id: None,
                result: None,
                error: None,
                method: Some(&n.method),
                params: n.params.as_ref(),
            },
            Self::Request(r) => Envelope {
                jsonrpc: "2.0",
                id: Some(Some(&r.id)),
                result: None,
                error: None,
                method: Some(&r.method),
                params: r.params.as_ref(),
            },
        };
        // Serializing these plain structs cannot fail; fall back to an internal error
        // rather than panic if it ever did.
        serde_json::to_vec(&envelope).map(Bytes::from).unwrap_or_else(|_| {
            Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32603,"message":"serialization failed"}}"#,
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn classifies_messages() {
        let req = parse(br#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#);
        assert_eq!(
            req,
            Ok(Incoming::Request(Request::new(
                RequestId::Number(7),
                "ping",
                None
            )))
        );
        let note = parse(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(note, Ok(Incoming::Notification(_))));
        let resp = parse(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#);
        assert_eq!(
            resp,
            Ok(Incoming::Response {
                id: RequestId::String("a".into()),
                outcome: Ok(serde_json::json!({}))
            })
        );
    }

    #[test]
    fn rejects_bad_bodies_with_the_right_code() {
        let cases: &[(&[u8], i64)] = &[
            (b"{not json", ErrorObject::PARSE_ERROR),
            (b"", ErrorObject::PARSE_ERROR),
            (
                br#"[{"jsonrpc":"2.0","id":1,"method":"ping"}]"#,
                ErrorObject::INVALID_REQUEST,
            ),
            (br#""hello""#, ErrorObject::INVALID_REQUEST),
            (br#"{"id":1,"method":"ping"}"#, ErrorObject::INVALID_REQUEST),
            (
                br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#,
                ErrorObject::INVALID_REQUEST,
            ),
            (
                br#"{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}"#,
                ErrorObject::INVALID_REQUEST,
            ),
            (br#"{"jsonrpc":"2.0","id":1}"#, ErrorObject::INVALID_REQUEST),
            (
                br#"{"jsonrpc":"2.0","id":1,"method":"x","params":3}"#,
                ErrorObject::INVALID_REQUEST,
            ),
        ];
        for (body, code) in cases {
            let got = parse(body).err().map(|f| f.error.code);
            assert_eq!(got, Some(*code), "body {:?}", String::from_utf8_lossy(body));
        }
    }

    #[test]
    fn serializes_compact_single_line_json() {
        let out = Outgoing::Result {
            id: RequestId::Number(1),
            result: json!({"text": "a\nb"}),
        }
        .to_bytes();
        assert!(!out.contains(&b'\n'));
        let v: Value = serde_json::from_slice(&out).unwrap_or_default();
        assert_eq!(v, json!({"jsonrpc":"2.0","id":1,"result":{"text":"a\nb"}}));
        let err = Outgoing::Error {
            id: None,
            error: ErrorObject::new(-32700, "bad"),
        }
        .to_bytes();
        let v: Value = serde_json::from_slice(&err).unwrap_or_default();
        assert_eq!(v["id"], Value::Null);
    }
}
