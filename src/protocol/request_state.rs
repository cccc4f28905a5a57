//! `requestState` of a multi round-trip request (2026-07-28): what a request that returned
//! `input_required` has learned so far, handed to the client and echoed back on its retry.
//! The client can read it but not change it: the state is signed (HMAC-SHA256 with a key
//! from config) and bound to the method, a digest of the request's parameters and an
//! expiry, so a state cannot be forged, replayed against another request, or kept forever.
//!
//! Wire form: `v1.<base64url(JSON payload)>.<base64url(MAC)>`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Why a `requestState` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not of our making, or changed since.
    #[error("requestState is not valid: it was not issued by this server or was altered")]
    Tampered,
    /// Issued for another method or other parameters.
    #[error("requestState belongs to another request")]
    WrongRequest,
    /// Older than its lifetime.
    #[error("requestState has expired; send the request again without it")]
    Expired,
}

/// The signing key, from config (shared by every replica, so any replica accepts a state
/// another issued).
#[derive(Clone)]
pub struct StateKey(Hmac<Sha256>);

impl std::fmt::Debug for StateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StateKey(..)")
    }
}

impl StateKey {
    /// A key from secret bytes (any length; HMAC hashes long keys).
    pub fn new(secret: &[u8]) -> Self {
        // HMAC accepts keys of every length, so this cannot fail; an empty key still
        // yields a (weak) MAC rather than a panic.
        Self(
            Hmac::new_from_slice(secret).unwrap_or_else(|_| {
                <Hmac<Sha256> as hmac::digest::KeyInit>::new(&Default::default())
            }),
        )
    }
}

#[derive(Serialize, Deserialize)]
struct Payload {
    /// Method.
    m: String,
    /// Digest of the request's salient parameters (hex).
    d: String,
    /// Expiry, seconds since the epoch.
    e: u64,
    /// The answers gathered in earlier rounds, by input key.
    a: Map<String, Value>,
}

/// A digest of `params` without what changes between rounds (`_meta`, `inputResponses`,
/// `requestState`), so a state only fits a retry of the request that earned it.
pub fn params_digest(params: Option<&Value>) -> String {
    let mut salient = params
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    for key in ["_meta", "inputResponses", "requestState"] {
        salient.remove(key);
    }
    // `serde_json::Map` is ordered by key here, so equal params serialize equally.
    let bytes = serde_json::to_vec(&salient).unwrap_or_default();
    let digest = Sha256::digest(&bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl StateKey {
    /// Signs `answers` for a retry of `method` with parameters of digest `digest`, valid
    /// for `lifetime`.
    pub fn seal(
        &self,
        method: &str,
        digest: &str,
        answers: &Map<String, Value>,
        lifetime: Duration,
    ) -> String {
        let payload = Payload {
            m: method.to_owned(),
            d: digest.to_owned(),
            e: now().saturating_add(lifetime.as_secs().max(1)),
            a: answers.clone(),
        };
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&payload).unwrap_or_default());
        let mut mac = self.0.clone();
        mac.update(body.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        format!("v1.{body}.{tag}")
    }

    /// Checks a state the client sent back and returns its answers.
    pub fn open(
        &self,
        state: &str,
        method: &str,
        digest: &str,
    ) -> Result<Map<String, Value>, StateError> {
        let mut parts = state.split('.');
        let (Some("v1"), Some(body), Some(tag), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(StateError::Tampered);
        };
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| StateError::Tampered)?;
        let mut mac = self.0.clone();
        mac.update(body.as_bytes());
        // Constant-time comparison.
        mac.verify_slice(&tag).map_err(|_| StateError::Tampered)?;
        let bytes = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| StateError::Tampered)?;
        let payload: Payload = serde_json::from_slice(&bytes).map_err(|_| StateError::Tampered)?;
        if payload.m != method || payload.d != digest {
            return Err(StateError::WrongRequest);
        }
        if payload.e < now() {
            return Err(StateError::Expired);
        }
        Ok(payload.a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_sealed_state_opens_only_for_its_request_and_unaltered() {
        let key = StateKey::new(b"test key");
        let params = json!({"name": "t", "arguments": {"x": 1}, "_meta": {"a": 1}});
        let digest = params_digest(Some(&params));
        // `_meta` and the round's answers do not change the digest.
        let retry = json!({"name": "t", "arguments": {"x": 1}, "inputResponses": {"k": {}}});
        assert_eq!(params_digest(Some(&retry)), digest);

        let mut answers = Map::new();
        answers.insert("k".into(), json!({"action": "accept"}));
        let state = key.seal("tools/call", &digest, &answers, Duration::from_secs(60));
        assert_eq!(key.open(&state, "tools/call", &digest), Ok(answers));
        assert_eq!(
            key.open(&state, "prompts/get", &digest),
            Err(StateError::WrongRequest)
        );
        let other = params_digest(Some(&json!({"name": "t", "arguments": {"x": 2}})));
        assert_eq!(
            key.open(&state, "tools/call", &other),
            Err(StateError::WrongRequest)
        );
        let mut altered = state.clone();
        altered.insert(5, 'x');
        assert_eq!(
            key.open(&altered, "tools/call", &digest),
            Err(StateError::Tampered)
        );
        assert_eq!(
            StateKey::new(b"other key").open(&state, "tools/call", &digest),
            Err(StateError::Tampered)
        );
        assert_eq!(
            key.open("garbage", "tools/call", &digest),
            Err(StateError::Tampered)
        );
    }
}
