//! DNS-rebinding protection for every listener browsers must not reach (the MCP
//! endpoint, the admin listener, `otpmcp proxy`): `Host` and `Origin` allow-lists (ports
//! ignored); and no header the server decides by may come twice.

use axum::http::{HeaderMap, header};

use crate::config::ServerConfig;

/// Why [`Guard::check`] refused a request; the transport's `Rejection` carries it as
/// is, the proxy answers with a status of its own.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Forbidden {
    /// A header the server decides by came more than once.
    #[error("Bad Request: the {0} header must not be repeated")]
    DuplicateHeader(&'static str),
    /// `Origin` not allowed (its first 100 characters).
    #[error("Forbidden: origin {0:?} is not allowed")]
    Origin(String),
    /// `Host` not allowed (its first 100 characters).
    #[error("Forbidden: host {0:?} is not allowed")]
    Host(String),
}

/// Allow-lists prepared once from the configuration.
#[derive(Debug, Clone)]
pub struct Guard {
    enabled: bool,
    hosts: Vec<String>,
    origins: Vec<String>,
}

impl Guard {
    /// From `[server]`.
    pub fn new(config: &ServerConfig) -> Self {
        Self::from_lists(
            config.dns_rebinding_protection,
            &config.allowed_hosts,
            &config.allowed_origins,
        )
    }

    /// From allow-lists written as `[server]`'s are (ports ignored), for the other
    /// listeners that browsers must not reach: the admin listener and `otpmcp proxy`.
    pub fn from_lists(enabled: bool, hosts: &[String], origins: &[String]) -> Self {
        Self {
            enabled,
            hosts: hosts
                .iter()
                .map(|h| strip_port(h).to_ascii_lowercase())
                .collect(),
            origins: origins
                .iter()
                .map(|o| origin_without_port(o).to_ascii_lowercase())
                .collect(),
        }
    }

    /// Refuses a request that repeats a header the server decides by, or whose `Origin`
    /// or `Host` is not allowed. A request without `Origin` (any non-browser client)
    /// passes the origin check.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), Forbidden> {
        if let Some(name) = repeated(headers) {
            return Err(Forbidden::DuplicateHeader(name));
        }
        if !self.enabled {
            return Ok(());
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let text = String::from_utf8_lossy(origin.as_bytes());
            let bare = origin_without_port(&text).to_ascii_lowercase();
            if !self.origins.contains(&bare) {
                return Err(Forbidden::Origin(text.chars().take(100).collect()));
            }
        }
        if !self.hosts.is_empty() {
            let host = headers.get(header::HOST).map_or(&[][..], |h| h.as_bytes());
            // Compared in place: this runs on every request. A Host that is not UTF-8
            // matches nothing.
            let bare = strip_port(std::str::from_utf8(host).unwrap_or(""));
            if !self.hosts.iter().any(|h| h.eq_ignore_ascii_case(bare)) {
                let shown = String::from_utf8_lossy(host);
                return Err(Forbidden::Host(shown.chars().take(100).collect()));
            }
        }
        Ok(())
    }
}

/// `host:port` → `host`; `[::1]:8080` → `[::1]`.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host.find(']').map_or(host, |end| &host[..=end]);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    }
}

/// `scheme://host:port/...` → `scheme://host`.
fn origin_without_port(origin: &str) -> String {
    let origin = origin.trim();
    match origin.split_once("://") {
        Some((scheme, rest)) => {
            let authority = rest.split('/').next().unwrap_or("");
            format!("{scheme}://{}", strip_port(authority))
        }
        None => origin.to_owned(),
    }
}

/// Headers that must come at most once: with two, which one wins would be a silent
/// choice (a proxy may read the first, we the other). The MCP ones are here because the
/// MCP endpoint and the proxy decide by them; no other listener sends them.
const SINGLE: [&str; 6] = [
    "mcp-session-id",
    "mcp-protocol-version",
    "origin",
    "host",
    "content-type",
    "last-event-id",
];

/// The first of [`SINGLE`] that `headers` repeats.
fn repeated(headers: &HeaderMap) -> Option<&'static str> {
    // Most requests have a dozen headers: comparing the count is the cheap test.
    if headers.len() == headers.keys_len() {
        return None;
    }
    SINGLE
        .into_iter()
        .find(|name| headers.get_all(*name).iter().nth(1).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn check(pairs: &[(&'static str, &'static str)]) -> Result<(), Forbidden> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        Guard::new(&ServerConfig::default()).check(&h)
    }

    #[test]
    fn loopback_hosts_and_origins_pass_any_port() {
        assert!(check(&[("host", "127.0.0.1:9000")]).is_ok());
        assert!(check(&[("host", "localhost")]).is_ok());
        assert!(check(&[("host", "[::1]:80"), ("origin", "http://[::1]:3000")]).is_ok());
        assert!(check(&[("host", "localhost:1"), ("origin", "http://localhost:5173")]).is_ok());
    }

    #[test]
    fn foreign_hosts_and_origins_are_forbidden() {
        assert!(matches!(
            check(&[("host", "evil.example:8080")]),
            Err(Forbidden::Host(_))
        ));
        assert!(matches!(
            check(&[("host", "localhost"), ("origin", "http://evil.example")]),
            Err(Forbidden::Origin(_))
        ));
        assert!(matches!(
            check(&[("host", "localhost"), ("origin", "null")]),
            Err(Forbidden::Origin(_))
        ));
        assert!(check(&[]).is_err(), "no Host at all is refused");
    }
}
