//! `[auth]` at the HTTP edge: the gate's refusals as answers (401, 403, 429, 503), a
//! request's slot held while its answer is sent, and the protected resource metadata
//! (RFC 9728), served without a token.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::Body;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::json;

use super::rejection::{Challenge, Rejection};
use crate::auth::{Refused, RequestSlot};
use crate::config::AuthConfig;

/// The HTTP answer to the gate's `refused`: a challenge naming `config`'s protected
/// resource metadata and required scopes where the answer carries one.
pub(crate) fn rejection(refused: Refused, config: &AuthConfig) -> Rejection {
    let challenge = || Challenge {
        resource_metadata: config.metadata_url().into(),
        scope: config.required_scopes.join(" ").into(),
    };
    match refused {
        Refused::TooManyFailures { retry_after } => Rejection::TooManyFailures { retry_after },
        Refused::TokenInQuery => Rejection::TokenInQuery,
        Refused::Unauthorized(error) => Rejection::Unauthorized {
            error,
            challenge: challenge(),
        },
        Refused::InsufficientScope { scope } => Rejection::InsufficientScope {
            scope,
            challenge: challenge(),
        },
        Refused::PrincipalBusy => Rejection::PrincipalBusy,
    }
}

/// `response` with `slot` held until its body ends or is dropped: a streamed answer
/// counts as running for as long as its stream is open.
pub(crate) fn hold_until_sent(response: Response, slot: Option<RequestSlot>) -> Response {
    let Some(slot) = slot else {
        return response;
    };
    response.map(|body| Body::new(Held { body, _slot: slot }))
}

/// A body that keeps a request slot until it is done.
struct Held {
    body: Body,
    _slot: RequestSlot,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The protected resource metadata (RFC 9728): this resource, its authorization server,
/// its scopes, and that tokens go in the header.
pub(crate) fn metadata(config: &AuthConfig) -> Response {
    let mut body = json!({
        "resource": config.audience,
        "authorization_servers": [config.issuer],
        "bearer_methods_supported": ["header"],
    });
    if !config.scopes_supported.is_empty() {
        body["scopes_supported"] = json!(config.scopes_supported);
    }
    let mut response = body.to_string().into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        axum::http::HeaderValue::from_static("application/json"),
    );
    // Clients fetch it before they have a token, often from a browser.
    headers.insert(
        header::ACCESS_CONTROL_ALLOW_ORIGIN,
        axum::http::HeaderValue::from_static("*"),
    );
    response
}
