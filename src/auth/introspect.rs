//! Opaque tokens, checked by the authorization server (RFC 7662 introspection) and the
//! answer kept briefly, so a client's burst of requests costs one round trip. Refusals are
//! kept too, and introspections in flight are bounded: a flood of made-up tokens costs
//! the authorization server at most one call each, never more than
//! `auth.introspection_concurrency` at once.

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
    client_secret: crate::config::Secret,
    issuer: String,
    audience: String,
    require_aud: bool,
    leeway: Duration,
    ttl: Duration,
    /// By the token's SHA-256, never the token itself. A lock held for a map lookup:
    /// checked on every request that carries an opaque token, so not worth an actor's
    /// round trip.
    cache: Mutex<Bounded<Principal>>,
    /// Refusals, by the token's SHA-256, with why.
    refused: Mutex<Bounded<AuthError>>,
    negative_ttl: Duration,
    /// One permit per introspection in flight.
    slots: tokio::sync::Semaphore,
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
            require_aud: config.introspection_require_aud,
            leeway: config.leeway,
            ttl: config.introspection_cache.get(),
            cache: Mutex::new(Bounded::new(config.introspection_cache_entries.get())),
            refused: Mutex::new(Bounded::new(config.introspection_negative_entries.get())),
            negative_ttl: config.introspection_negative_ttl.get(),
            slots: tokio::sync::Semaphore::new(config.introspection_concurrency.get()),
        }
    }

    /// The principal an active token names.
    pub(crate) async fn check(&self, token: &str) -> Result<Principal, AuthError> {
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if let Some(principal) = lock(&self.cache).get(&key) {
            return Ok(principal);
        }
        if let Some(refusal) = lock(&self.refused).get(&key) {
            return Err(refusal);
        }
        // No waiting for a slot: a queue would hold each flooding request (and its
        // connection) for as long as the authorization server is slow.
        let Ok(_slot) = self.slots.try_acquire() else {
            return Err(AuthError::Busy);
        };
        let basic = (!self.client_id.is_empty())
            .then_some((self.client_id.as_str(), self.client_secret.expose()));
        let answer = self
            .fetcher
            .post_form(
                &self.url,
                basic,
                &[("token", token), ("token_type_hint", "access_token")],
            )
            .await
            .map_err(|e| AuthError::Unavailable(format!("introspection at {}: {e}", self.url)))?;
        let Value::Object(mut claims) = answer else {
            return Err(AuthError::Unavailable(format!(
                "introspection at {} answered with a non-object",
                self.url
            )));
        };
        match self.judge(&mut claims) {
            Ok((principal, lifetime)) => {
                lock(&self.cache).insert(key, principal.clone(), lifetime.min(self.ttl));
                Ok(principal)
            }
            Err(refusal) => {
                lock(&self.refused).insert(key, refusal.clone(), self.negative_ttl);
                Err(refusal)
            }
        }
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
        // A token for another resource is refused; one whose answer names no audience
        // too, unless the deployment says its authorization server never names one.
        let fits = match claims.get("aud") {
            None if self.require_aud => return Err(AuthError::MissingClaim("aud")),
            None => true,
            Some(Value::String(aud)) => aud == &self.audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(&self.audience)),
            Some(_) => false,
        };
        if !fits {
            return Err(AuthError::WrongAudience);
        }
        if !claims.get("token_type").is_none_or(is_access_token_type) {
            return Err(AuthError::WrongTokenType);
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        if let Some(nbf) = claims.get("nbf") {
            let starts = nbf.as_u64().ok_or(AuthError::NotYetValid)?;
            if starts > now.saturating_add(self.leeway.as_secs()) {
                return Err(AuthError::NotYetValid);
            }
        }
        let lifetime = match claims.get("exp").and_then(Value::as_u64) {
            Some(exp) if exp <= now => return Err(AuthError::Expired),
            Some(exp) => Duration::from_secs(exp - now),
            None => self.ttl,
        };
        Ok((Principal::from_claims(std::mem::take(claims))?, lifetime))
    }
}

/// RFC 7662's `token_type` names the kind of token (RFC 6749 §7.1, or an RFC 8693 type
/// URI): those of a bearer access token pass, case-insensitively. A refresh token, an ID
/// token, a DPoP-bound token (which this server cannot check the proof of) do not.
fn is_access_token_type(value: &Value) -> bool {
    const ACCESS: [&str; 3] = [
        "bearer",
        "access_token",
        "urn:ietf:params:oauth:token-type:access_token",
    ];
    value
        .as_str()
        .is_some_and(|t| ACCESS.iter().any(|a| a.eq_ignore_ascii_case(t)))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Answers by token hash, each until its deadline, at most `capacity` of them.
struct Bounded<T> {
    entries: HashMap<[u8; 32], (T, Instant)>,
    capacity: usize,
    /// When expired entries were last swept: a full map is swept at most once per
    /// [`SWEEP_EVERY`], so a flood of new tokens costs no scan per request.
    swept: Option<Instant>,
}

/// How often a full map may be scanned for expired entries.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

impl<T: Clone> Bounded<T> {
    fn new(capacity: usize) -> Self {
        Self {
            entries: HashMap::new(),
            capacity,
            swept: None,
        }
    }

    fn get(&self, key: &[u8; 32]) -> Option<T> {
        self.entries
            .get(key)
            .filter(|(_, until)| *until > Instant::now())
            .map(|(value, _)| value.clone())
    }

    fn insert(&mut self, key: [u8; 32], value: T, lifetime: Duration) {
        let now = Instant::now();
        if self.entries.len() >= self.capacity
            && !self.entries.contains_key(&key)
            && self
                .swept
                .is_none_or(|at| now.duration_since(at) >= SWEEP_EVERY)
        {
            self.swept = Some(now);
            self.entries.retain(|_, (_, until)| *until > now);
        }
        // Still full of live answers: this one is not kept (the next use of its token
        // asks again, within the concurrency bound); those kept stay.
        if self.entries.len() >= self.capacity && !self.entries.contains_key(&key) {
            return;
        }
        // A configured lifetime too long for the clock is kept as long as it can be.
        let until = now
            .checked_add(lifetime)
            .or_else(|| now.checked_add(Duration::from_secs(u32::MAX.into())))
            .unwrap_or(now);
        self.entries.insert(key, (value, until));
    }
}
