//! `server.trusted_proxies`: the client's address when a reverse proxy stands between it
//! and the server. Behind nginx every TCP peer is nginx, so per-address limits keyed by
//! the peer would count all clients as one (one client's bad tokens would lock everyone
//! out). A trusted proxy's report of the client's address is taken instead, from the one
//! header the proxy is configured to set.

use std::net::{IpAddr, SocketAddr};

use axum::http::HeaderMap;
use axum::http::header::FORWARDED;
use ipnet::IpNet;

use crate::config::{ClientAddressHeader, ServerConfig};

/// Who is trusted to report a client's address, and where.
#[derive(Debug, Clone, Default)]
pub(crate) struct Proxies {
    trusted: Vec<IpNet>,
    header: ClientAddressHeader,
}

impl Proxies {
    pub(crate) fn from_config(server: &ServerConfig) -> Self {
        Self {
            trusted: server.trusted_proxies.clone(),
            header: server.client_address_header,
        }
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        self.trusted.iter().any(|net| net.contains(&addr))
    }

    /// The client's address for a request from `peer` with `headers`: the peer itself,
    /// unless it is a trusted proxy; then, walking the proxy's header from the right
    /// (nearest hop first), the first address that is not a trusted proxy. An entry that
    /// is not an address (`unknown`, an obfuscated name) stops the walk at the hop that
    /// wrote it; when every entry is trusted, the left-most one.
    pub(crate) fn client(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        if self.trusted.is_empty() || !self.trusts(peer) {
            return peer;
        }
        let hops = match self.header {
            ClientAddressHeader::XForwardedFor => forwarded_for(headers),
            ClientAddressHeader::Forwarded => forwarded(headers),
        };
        let mut reporter = peer;
        for hop in hops.iter().rev() {
            match hop {
                Some(addr) if self.trusts(*addr) => reporter = *addr,
                Some(addr) => return addr.to_canonical(),
                None => return reporter,
            }
        }
        reporter
    }
}

/// `X-Forwarded-For`'s entries, left to right, over every instance of the header.
fn forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all("x-forwarded-for")
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("unknown").split(','))
        .map(address)
        .collect()
}

/// The `for=` of each element of `Forwarded` (RFC 7239), left to right, over every
/// instance of the header; an element without one counts as unknown.
fn forwarded(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    headers
        .get_all(FORWARDED)
        .iter()
        .flat_map(|value| value.to_str().unwrap_or("for=unknown").split(','))
        .map(|element| {
            element.split(';').find_map(|pair| {
                let (name, value) = pair.split_once('=')?;
                name.trim()
                    .eq_ignore_ascii_case("for")
                    .then(|| address(value))
            })?
        })
        .collect()
}

/// One node as proxies write it: `192.0.2.1`, `192.0.2.1:4711`, `2001:db8::1`,
/// `[2001:db8::1]:4711`, quoted or not.
fn address(node: &str) -> Option<IpAddr> {
    let node = node.trim().trim_matches('"');
    node.parse::<IpAddr>()
        .ok()
        .or_else(|| node.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            let inner = node.strip_prefix('[')?.split_once(']')?.0;
            inner.parse().ok()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proxies(trusted: &[&str], header: ClientAddressHeader) -> Proxies {
        Proxies {
            trusted: trusted
                .iter()
                .filter_map(|t| {
                    t.parse::<IpNet>()
                        .or_else(|_| t.parse::<IpAddr>().map(IpNet::from))
                        .ok()
                })
                .collect(),
            header,
        }
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(*name, axum::http::HeaderValue::from_static(value));
        }
        map
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or(IpAddr::from([0, 0, 0, 0]))
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_claims() {
        let p = proxies(&["10.0.0.0/8"], ClientAddressHeader::XForwardedFor);
        let h = headers(&[("x-forwarded-for", "203.0.113.9")]);
        assert_eq!(p.client(ip("198.51.100.1"), &h), ip("198.51.100.1"));
        let none = proxies(&[], ClientAddressHeader::XForwardedFor);
        assert_eq!(none.client(ip("10.0.0.1"), &h), ip("10.0.0.1"));
    }

    #[test]
    fn the_right_most_untrusted_hop_is_the_client() {
        let p = proxies(&["10.0.0.0/8"], ClientAddressHeader::XForwardedFor);
        // The client wrote a spoofed first entry; nginx appended what it saw.
        let h = headers(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9, 10.0.0.2")]);
        assert_eq!(p.client(ip("10.0.0.1"), &h), ip("203.0.113.9"));
        let split = headers(&[
            ("x-forwarded-for", "1.2.3.4"),
            ("x-forwarded-for", "[2001:db8::7]:443"),
        ]);
        assert_eq!(p.client(ip("10.0.0.1"), &split), ip("2001:db8::7"));
        // No header: the proxy itself.
        assert_eq!(p.client(ip("10.0.0.1"), &HeaderMap::new()), ip("10.0.0.1"));
        // Every hop trusted: the left-most.
        let inner = headers(&[("x-forwarded-for", "10.1.1.1, 10.0.0.2")]);
        assert_eq!(p.client(ip("10.0.0.1"), &inner), ip("10.1.1.1"));
        // An unreadable hop stops the walk at the proxy that wrote it.
        let junk = headers(&[("x-forwarded-for", "203.0.113.9, unknown, 10.0.0.2")]);
        assert_eq!(p.client(ip("10.0.0.1"), &junk), ip("10.0.0.2"));
    }

    #[test]
    fn forwarded_is_read_only_when_configured() {
        let h = headers(&[
            (
                "forwarded",
                "for=1.2.3.4, for=\"[2001:db8:cafe::17]:4711\";proto=https",
            ),
            ("x-forwarded-for", "198.51.100.5"),
        ]);
        let p = proxies(&["127.0.0.1/32"], ClientAddressHeader::Forwarded);
        assert_eq!(p.client(ip("127.0.0.1"), &h), ip("2001:db8:cafe::17"));
        let p = proxies(&["127.0.0.1"], ClientAddressHeader::XForwardedFor);
        assert_eq!(p.client(ip("127.0.0.1"), &h), ip("198.51.100.5"));
        let mapped = headers(&[("x-forwarded-for", "::ffff:192.0.2.4")]);
        assert_eq!(p.client(ip("127.0.0.1"), &mapped), ip("192.0.2.4"));
    }
}
