//! Opaque tokens, checked by the authorization server (RFC 7662 introspection) and the
//! answer kept briefly, so a client's burst of requests costs one round trip.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::fetch::Fetcher;
use super::{AuthError, Principal};
use crate::config::AuthConfig;

/// Introspects tokens and caches the answers.
pub(crate) struct Introspector {
    fetcher: Fetcher,
    url: String,
    client_id: String,
    client_secret: String,
    issuer: String,
    audience: String,
    ttl: Duration,
    capacity: usize,
    /// By the token's SHA-256, never the token itself. A lock held for a map lookup:
    /// checked on every request that carries an opaque token, so not worth an actor's
    /// round trip.
    cache: Mutex<HashMap<[u8; 32], (Principal, Instant)>>,
}

impl std::fmt::Debug for Introspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Introspector")
            .field("url", &self.url)
            .finish()
    }
}

impl Introspector {
    pub(crate) fn new(fetcher: Fetcher, config: &AuthConfig) -> Self {
        Self {
            fetcher,
            url: config.introspection_url.clone(),
            client_id: config.introspection_client_id.clone(),
            client_secret: config.introspection_client_secret.clone(),
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            ttl: config.introspection_cache,
            capacity: config.introspection_cache_entries,
            cache: Mutex::default(),
        }
    }

    /// The principal an active token names.
    pub(crate) async fn check(&self, token: &str) -> Result<Principal, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = self.cached(&key) {
            return Ok(principal);
        }
        let basic = (!self.client_id.is_empty())
            .then_some((self.client_id.as_str(), self.client_secret.as_str()));
        let answer = self
            .fetcher
            .post_form(
                &self.url,
                basic,
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await
            .map_err(|e| AuthError::Unavailable(format!("introspection: {e}")))?;
        let Value::Object(mut claims) = answer else {
            return Err(AuthError::Unavailable(
                "introspection answered with a non-object".into(),
            ));
        };
        let (principal, lifetime) = self.judge(&mut claims)?;
        self.remember(key, principal.clone(), lifetime.min(self.ttl));
        Ok(principal)
    }

    /// An introspection answer as a principal, with how long it may be kept.
    fn judge(&self, claims: &mut Map<String, Value>) -> Result<(Principal, Duration), AuthError> {
        if claims.get("active") != Some(&Value::Bool(true)) {
            return Err(AuthError::Inactive);
        }
        // The answer may leave `iss` out: the server we asked is the issuer.
        let issuer = claims
            .entry("iss")
            .or_insert_with(|| Value::String(self.issuer.clone()));
        if issuer.as_str() != Some(self.issuer.as_str()) {
            return Err(AuthError::WrongIssuer);
        }
        // A token for another resource is refused when the answer names its audience.
        let fits = match claims.get("aud") {
            None => true,
            Some(Value::String(aud)) => aud == &self.audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(&self.audience)),
            Some(_) => false,
        };
        if !fits {
            return Err(AuthError::WrongAudience);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let lifetime = match claims.get("exp").and_then(Value::as_u64) {
            Some(exp) if exp <= now => return Err(AuthError::Expired),
            Some(exp) => Duration::from_secs(exp - now),
            None => self.ttl,
        };
        Ok((Principal::from_claims(std::mem::take(claims))?, lifetime))
    }

    fn cached(&self, key: &[u8; 32]) -> Option<Principal> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(p, _)| p.clone())
    }

    fn remember(&self, key: [u8; 32], principal: Principal, lifetime: Duration) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= self.capacity {
            let now = Instant::now();
            cache.retain(|_, (_, until)| *until > now);
        }
        // Still full of live answers: drop one, whichever; the next use introspects again.
        if cache.len() >= self.capacity
            && let Some(victim) = cache.keys().next().copied()
        {
            cache.remove(&victim);
        }
        cache.insert(key, (principal, Instant::now() + lifetime));
    }
}
