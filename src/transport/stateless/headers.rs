//! The routing headers of a stateless request (2026-07-28), checked against its body:
//! `Mcp-Method`, `Mcp-Name` and the `Mcp-Param-*` headers a tool's input schema asks for
//! with `x-mcp-header`. A proxy routes on the headers and the server acts on the body, so
//! the two must agree, or -32020.

use axum::http::HeaderMap;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::protocol::ErrorObject;
use crate::protocol::Request;
use crate::protocol::meta::HeaderParam;

/// `Mcp-Method`.
pub const MCP_METHOD: &str = "mcp-method";
/// `Mcp-Name`.
pub const MCP_NAME: &str = "mcp-name";
/// Prefix of the headers that mirror tool arguments.
pub const MCP_PARAM_PREFIX: &str = "mcp-param-";

/// Checks `Mcp-Method` against `request`'s method and, for the methods whose spec routes
/// them by a param ([`crate::protocol::methods::Routing`]), `Mcp-Name` against it.
pub fn check_standard(headers: &HeaderMap, request: &Request) -> Result<(), ErrorObject> {
    let method = request.method.as_str();
    match header_value(headers, MCP_METHOD)? {
        None => {
            return Err(ErrorObject::header_mismatch(
                "the Mcp-Method header is required",
            ));
        }
        Some(value) if value != method => {
            return Err(ErrorObject::header_mismatch(format!(
                "Mcp-Method {value:?} does not match the body's method {method:?}"
            )));
        }
        Some(_) => {}
    }
    let Some(routing) = request.kind.spec().routed_by else {
        return Ok(());
    };
    let field = routing.param.key();
    let Some(body) = request.named(routing.param) else {
        // The body is wrong, not the header: the method's own validation says how.
        return Ok(());
    };
    match decoded(header_value(headers, MCP_NAME)?)? {
        None if !routing.required => Ok(()),
        None => Err(ErrorObject::header_mismatch(format!(
            "the Mcp-Name header is required for {method}"
        ))),
        Some(value) if value != body => Err(ErrorObject::header_mismatch(format!(
            "Mcp-Name {value:?} does not match params.{field} {body:?}"
        ))),
        Some(_) => Ok(()),
    }
}

/// Checks the `Mcp-Param-*` headers of a `tools/call` against the arguments the tool's
/// input schema mirrors (`mirrored`, from [`crate::protocol::meta::header_params`]): each
/// argument given (and
/// not null) must come with its header, equal to it.
pub fn check_params(
    headers: &HeaderMap,
    mirrored: &[HeaderParam],
    arguments: Option<&Value>,
) -> Result<(), ErrorObject> {
    for HeaderParam { path, header: name } in mirrored {
        let mut value = arguments;
        for step in path {
            value = value.and_then(|v| v.get(step));
        }
        let body = match value {
            None | Some(Value::Null) => continue,
            Some(Value::String(s)) => s.clone(),
            Some(Value::Bool(b)) => b.to_string(),
            Some(Value::Number(n)) => n.to_string(),
            Some(_) => continue,
        };
        let header = format!("{MCP_PARAM_PREFIX}{}", name.to_ascii_lowercase());
        match decoded(header_value(headers, &header)?)? {
            None => {
                return Err(ErrorObject::header_mismatch(format!(
                    "the Mcp-Param-{name} header is required when the argument is given"
                )));
            }
            Some(given) if !same_value(&given, &body, value) => {
                return Err(ErrorObject::header_mismatch(format!(
                    "Mcp-Param-{name} {given:?} does not match the argument {body:?}"
                )));
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// Integers compare as numbers (`42.0` is `42`); everything else as text.
fn same_value(header: &str, body: &str, value: Option<&Value>) -> bool {
    if header == body {
        return true;
    }
    matches!(value, Some(Value::Number(_)))
        && header
            .parse::<f64>()
            .ok()
            .zip(body.parse::<f64>().ok())
            .is_some_and(|(a, b)| a == b)
}

/// A header's value with surrounding whitespace trimmed; -32020 when it is not text.
fn header_value<'a>(headers: &'a HeaderMap, name: &str) -> Result<Option<&'a str>, ErrorObject> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|v| Some(v.trim_matches([' ', '\t'])))
            .map_err(|_| ErrorObject::header_mismatch(format!("the {name} header is not text"))),
    }
}

/// A value in the base64 sentinel form `=?base64?…?=` decoded (strictly: canonical
/// padding, standard alphabet, UTF-8); any other value as is.
fn decoded(value: Option<&str>) -> Result<Option<String>, ErrorObject> {
    let Some(value) = value else {
        return Ok(None);
    };
    let Some(encoded) = value
        .strip_prefix("=?base64?")
        .and_then(|v| v.strip_suffix("?="))
    else {
        return Ok(Some(value.to_owned()));
    };
    let bytes = STANDARD
        .decode(encoded)
        .map_err(|_| ErrorObject::header_mismatch(format!("{value:?} is not valid base64")))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| ErrorObject::header_mismatch(format!("{value:?} does not decode to UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::meta::header_params;
    use crate::transport::extract::header_map as headers;
    use serde_json::json;

    fn req(method: &str, params: Option<&Value>) -> Request {
        Request::new(
            crate::protocol::RequestId::Number(1),
            method,
            params.cloned(),
        )
    }

    fn code(r: Result<(), ErrorObject>) -> Option<i64> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn method_and_name_must_match_the_body() {
        let call = json!({"name": "echo"});
        let ok = headers(&[("mcp-method", "tools/call"), ("mcp-name", "  echo\t")]);
        assert_eq!(
            code(check_standard(&ok, &req("tools/call", Some(&call)))),
            None
        );
        let mismatch = -32020;
        for h in [
            headers(&[("mcp-name", "echo")]),
            headers(&[("mcp-method", "TOOLS/CALL"), ("mcp-name", "echo")]),
            headers(&[("mcp-method", "tools/call")]),
            headers(&[("mcp-method", "tools/call"), ("mcp-name", "other")]),
        ] {
            assert_eq!(
                code(check_standard(&h, &req("tools/call", Some(&call)))),
                Some(mismatch)
            );
        }
        let list = headers(&[("mcp-method", "tools/list")]);
        assert_eq!(code(check_standard(&list, &req("tools/list", None))), None);
        let encoded = headers(&[
            ("mcp-method", "tools/call"),
            ("mcp-name", "=?base64?ZWNobw==?="),
        ]);
        assert_eq!(
            code(check_standard(&encoded, &req("tools/call", Some(&call)))),
            None
        );
    }

    // Issue 23, part 7: fastmcp-tasks 4.1.4 (and the MCP Inspector) send tasks/get,
    // tasks/update and tasks/cancel without Mcp-Name; a missing one is accepted there, a
    // different one is still -32020, and tools/call still requires it.
    #[test]
    fn tasks_methods_may_omit_the_name_header() {
        let task = json!({"taskId": "t-1"});
        for method in ["tasks/get", "tasks/update", "tasks/cancel"] {
            let missing = headers(&[("mcp-method", method)]);
            assert_eq!(
                code(check_standard(&missing, &req(method, Some(&task)))),
                None
            );
            let same = headers(&[("mcp-method", method), ("mcp-name", "t-1")]);
            assert_eq!(code(check_standard(&same, &req(method, Some(&task)))), None);
            let other = headers(&[("mcp-method", method), ("mcp-name", "t-2")]);
            assert_eq!(
                code(check_standard(&other, &req(method, Some(&task)))),
                Some(-32020)
            );
        }
    }

    #[test]
    fn mirrored_arguments_follow_the_sentinel_rules() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "n": {"type": "integer", "x-mcp-header": "N"}}});
        let args = |v: &str| json!({"region": v});
        let check = |pairs: &[(&'static str, &'static str)], body: &str| {
            code(check_params(
                &headers(pairs),
                &header_params(&schema),
                Some(&args(body)),
            ))
        };
        assert_eq!(
            check(&[("mcp-param-region", "=?base64?SGVsbG8=?=")], "Hello"),
            None
        );
        assert_eq!(
            check(&[("mcp-param-region", "=?base64?SGVsbG8?=")], "Hello"),
            Some(-32020)
        );
        assert_eq!(
            check(&[("mcp-param-region", "=?base64?SGVs!!!bG8=?=")], "Hello"),
            Some(-32020)
        );
        assert_eq!(check(&[("mcp-param-region", "SGVsbG8=")], "SGVsbG8="), None);
        assert_eq!(
            check(
                &[("mcp-param-region", "=?base64?SGVsbG8=")],
                "=?base64?SGVsbG8="
            ),
            None
        );
        assert_eq!(check(&[], "test-value"), Some(-32020));
        // Not given, or null: no header expected.
        assert_eq!(
            code(check_params(
                &HeaderMap::new(),
                &header_params(&schema),
                Some(&json!({"region": null}))
            )),
            None
        );
        let n = json!({"n": 42});
        assert_eq!(
            code(check_params(
                &headers(&[("mcp-param-n", "42.0")]),
                &header_params(&schema),
                Some(&n)
            )),
            None
        );
    }
}
