//! JSON from the authorization server over HTTP(S): its metadata, its keys, and
//! introspection answers. Bounded in time and size, so a slow or hostile server cannot
//! hold a request or fill memory.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// The most bytes read of one answer: JWKS documents and metadata are a few KB.
const MAX_BODY: usize = 1 << 20;

/// Why a fetch failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FetchError {
    /// The URL could not be parsed.
    #[error("bad URL {0}")]
    Url(String),
    /// Plain `http://` to a host that is not loopback: refused whatever gave the URL
    /// (the configuration is checked at start-up; a `jwks_uri` from the issuer's
    /// metadata is checked here).
    #[error("{0}: plain http is refused except to a loopback host; use https")]
    Insecure(String),
    /// No answer within the timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Connection or protocol failure.
    #[error("{0}")]
    Http(String),
    /// A status other than 200.
    #[error("status {0}")]
    Status(u16),
    /// The body is not JSON, or too large.
    #[error("the answer is not usable JSON: {0}")]
    Body(String),
}

/// A small HTTP(S) client for JSON.
#[derive(Clone)]
pub(crate) struct Fetcher {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for Fetcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Fetcher {
    /// A client trusting the system's root certificates; plain `http://` only to a
    /// loopback host (a local identity provider, the tests).
    pub(crate) fn new(timeout: Duration) -> Result<Self, FetchError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = match hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(provider.clone())
        {
            Ok(builder) => builder,
            Err(e) => {
                // A container without CA certificates: https fails with a clear error at
                // each fetch, http still works.
                tracing::warn!(error = %e, "no system root certificates; https fetches for [auth] will fail");
                let config = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .map_err(|e| FetchError::Http(e.to_string()))?
                    .with_root_certificates(rustls::RootCertStore::empty())
                    .with_no_client_auth();
                hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
            }
        };
        let connector = builder.https_or_http().enable_http1().build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        })
    }

    /// GET `url`, a JSON answer.
    pub(crate) async fn get_json(&self, url: &str) -> Result<Value, FetchError> {
        let request = http::Request::get(url)
            .header(http::header::ACCEPT, "application/json")
            .body(Full::default())
            .map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
        self.send(request).await
    }

    /// POST a form to `url` (with HTTP Basic credentials), a JSON answer.
    pub(crate) async fn post_form(
        &self,
        url: &str,
        basic: Option<(&str, &str)>,
        form: &[(&str, &str)],
    ) -> Result<Value, FetchError> {
        let body = form
            .iter()
            .map(|(k, v)| format!("{}={}", form_encode(k), form_encode(v)))
            .collect::<Vec<_>>()
            .join("&");
        let mut request = http::Request::post(url)
            .header(http::header::ACCEPT, "application/json")
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            );
        if let Some((id, secret)) = basic {
            use base64::Engine;
            // RFC 6749 §2.3.1: each part form-encoded before Basic.
            let pair = format!("{}:{}", form_encode(id), form_encode(secret));
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            request = request.header(http::header::AUTHORIZATION, format!("Basic {encoded}"));
        }
        let request = request
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| FetchError::Url(format!("{url}: {e}")))?;
        self.send(request).await
    }

    async fn send(&self, request: http::Request<Full<Bytes>>) -> Result<Value, FetchError> {
        let uri = request.uri();
        let plain = uri
            .scheme_str()
            .is_none_or(|s| !s.eq_ignore_ascii_case("https"));
        if plain && !uri.host().is_some_and(crate::config::is_loopback_host) {
            return Err(FetchError::Insecure(uri.to_string()));
        }
        let exchange = async {
            let response = self
                .client
                .request(request)
                .await
                .map_err(|e| FetchError::Http(e.to_string()))?;
            if response.status() != http::StatusCode::OK {
                return Err(FetchError::Status(response.status().as_u16()));
            }
            let body = Limited::new(response.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| FetchError::Body(e.to_string()))?
                .to_bytes();
            serde_json::from_slice(&body).map_err(|e| FetchError::Body(e.to_string()))
        };
        tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| FetchError::Timeout(self.timeout))?
    }
}

/// `application/x-www-form-urlencoded` for one key or value.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(byte as char)
            }
            b' ' => out.push('+'),
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::form_encode;

    /// Issue 36, finding 10: a `jwks_uri` the issuer's metadata names over plain http
    /// is refused before any connection, as the configured URLs are at start-up.
    #[tokio::test]
    async fn plain_http_goes_only_to_loopback() {
        let Ok(fetcher) = super::Fetcher::new(std::time::Duration::from_secs(1)) else {
            panic!("a fetcher");
        };
        for url in ["http://192.0.2.1/jwks", "http://as.example/jwks"] {
            let got = fetcher.get_json(url).await;
            assert!(
                matches!(got, Err(super::FetchError::Insecure(_))),
                "{url}: {got:?}"
            );
            let got = fetcher.post_form(url, Some(("id", "secret")), &[]).await;
            assert!(
                matches!(got, Err(super::FetchError::Insecure(_))),
                "{got:?}"
            );
        }
        // Loopback is let through (nothing listens on port 1: a connection error).
        let got = fetcher.get_json("http://127.0.0.1:1/jwks").await;
        assert!(matches!(got, Err(super::FetchError::Http(_))), "{got:?}");
    }

    #[test]
    fn form_encoding_escapes_reserved_bytes() {
        assert_eq!(form_encode("a b&c=d/é"), "a+b%26c%3Dd%2F%C3%A9");
    }
}
