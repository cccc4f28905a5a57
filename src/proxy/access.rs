//! Who may use the proxy: the MCP endpoint's own DNS-rebinding protection (`net::guard`),
//! applied before a request is forwarded, recorded or answered from a recording. A web
//! page whose name re-resolves to 127.0.0.1 sends its own name as `Host` and its own
//! origin as `Origin`; both are refused, so it can neither drive the upstream through
//! the proxy nor read a recording back.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::config::ServerConfig;
use crate::net::guard::{Forbidden, Guard};

/// The allow-lists given on the command line; `None`: the MCP endpoint's defaults
/// (loopback names and origins).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `--allowed-host`, in order.
    pub hosts: Option<Vec<String>>,
    /// `--allowed-origin`, in order.
    pub origins: Option<Vec<String>>,
}

/// An allow-list entry that cannot match anything a client sends.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// Not a host name or address (optionally with a port).
    #[error("--allowed-host {0:?} is not a host name (e.g. localhost, example.com, [::1])")]
    Host(String),
    /// Not `scheme://host[:port]`.
    #[error(
        "--allowed-origin {0:?} is not an origin (scheme://host[:port], e.g. http://localhost:5173)"
    )]
    Origin(String),
}

impl Access {
    /// The guard for these lists: the given ones replace the defaults, as
    /// `server.allowed_hosts` and `server.allowed_origins` do.
    pub fn guard(&self) -> Result<Guard, AccessError> {
        let defaults = ServerConfig::default();
        let hosts = self.hosts.clone().unwrap_or(defaults.allowed_hosts);
        let origins = self.origins.clone().unwrap_or(defaults.allowed_origins);
        if let Some(bad) = hosts.iter().find(|h| !is_host(h)) {
            return Err(AccessError::Host(bad.clone()));
        }
        if let Some(bad) = origins.iter().find(|o| !is_origin(o)) {
            return Err(AccessError::Origin(bad.clone()));
        }
        Ok(Guard::from_lists(true, &hosts, &origins))
    }
}

/// A name as `Host` carries it: no scheme, path, user or white space.
fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:[]".contains(&b))
}

/// `scheme://host[:port]` and nothing more (no path: browsers send none).
fn is_origin(origin: &str) -> bool {
    match origin.split_once("://") {
        Some((scheme, host)) => {
            !scheme.is_empty()
                && scheme
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
                && is_host(host)
        }
        None => false,
    }
}

/// The answer to a request whose `headers` may not pass, `None` if they may: 421
/// Misdirected Request for a foreign `Host` (the request was meant for another name), 403
/// for a foreign `Origin`, 400 for a repeated `Host`, `Origin` or MCP header.
pub fn refusal(guard: &Guard, headers: &HeaderMap) -> Option<Response> {
    let rejection = guard.check(headers).err()?;
    let status = match rejection {
        Forbidden::Host(_) => StatusCode::MISDIRECTED_REQUEST,
        Forbidden::Origin(_) => StatusCode::FORBIDDEN,
        Forbidden::DuplicateHeader(_) => StatusCode::BAD_REQUEST,
    };
    tracing::warn!(%rejection, "the proxy refused a request");
    let mut response = (status, rejection.to_string()).into_response();
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_list_entries_are_checked() {
        assert!(is_host("localhost") && is_host("[::1]") && is_host("example.com:8090"));
        assert!(!is_host("") && !is_host("http://x") && !is_host("a b") && !is_host("x/y"));
        assert!(is_origin("http://localhost:5173") && is_origin("https://[::1]"));
        assert!(!is_origin("localhost") && !is_origin("http://x/path") && !is_origin("://x"));
        let access = Access {
            hosts: Some(vec!["example.com".into()]),
            origins: Some(vec!["not an origin".into()]),
        };
        assert!(matches!(access.guard(), Err(AccessError::Origin(_))));
    }
}
