//! The issuer's signing keys (its JWKS), fetched, cached, and fetched again when they
//! age or when a token names a key we do not have (the issuer rotated), at a bounded
//! rate.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::AuthError;
use super::fetch::Fetcher;

/// One usable key.
#[derive(Clone)]
pub(crate) struct Key {
    key: DecodingKey,
    /// The one algorithm the JWK says it is for, if it says.
    alg: Option<Algorithm>,
}

impl Key {
    /// The key, if it may check a signature made with `alg`.
    pub(crate) fn for_alg(&self, alg: Algorithm) -> Option<&DecodingKey> {
        let fits = self.alg.is_none_or(|a| a == alg) && self.key.family() == alg.family();
        fits.then_some(&self.key)
    }
}

/// The keys of one fetch.
#[derive(Default)]
struct KeySet {
    by_kid: HashMap<String, Key>,
    /// Keys without a `kid`, tried for tokens without one.
    unnamed: Vec<Key>,
    /// When they were fetched; `None`: never.
    fetched: Option<Instant>,
}

/// The issuer's keys, shared by every request.
pub(crate) struct KeyCache {
    fetcher: Fetcher,
    issuer: String,
    /// Configured, or found in the issuer's metadata at the first fetch.
    jwks_url: tokio::sync::OnceCell<String>,
    /// Read on every request, replaced whole on each fetch: a lock taken for a pointer
    /// copy. An actor would put a message round trip on every request's path for data
    /// that changes every few minutes.
    current: RwLock<Arc<KeySet>>,
    /// One fetch at a time; holds when the last one was tried.
    refresh: tokio::sync::Mutex<Option<Instant>>,
    max_age: Duration,
    min_refresh: Duration,
    /// Keys older than this (since their fetch) no longer verify: see `auth.jwks_max_stale`.
    max_stale: Duration,
}

impl std::fmt::Debug for KeyCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyCache")
            .field("jwks_url", &self.jwks_url.get())
            .finish()
    }
}

impl KeyCache {
    pub(crate) fn new(
        fetcher: Fetcher,
        issuer: String,
        jwks_url: &str,
        max_age: Duration,
        min_refresh: Duration,
        max_stale: Duration,
    ) -> Self {
        let configured = tokio::sync::OnceCell::new();
        if !jwks_url.is_empty() {
            let _ = configured.set(jwks_url.to_owned());
        }
        Self {
            fetcher,
            issuer,
            jwks_url: configured,
            current: RwLock::default(),
            refresh: tokio::sync::Mutex::new(None),
            max_age,
            min_refresh,
            max_stale,
        }
    }

    /// The keys that may check a token signed with `alg` naming `kid`: fetched again
    /// when they are old, or when `kid` is unknown and the last fetch is not too recent.
    pub(crate) async fn keys_for(
        &self,
        kid: Option<&str>,
        alg: Algorithm,
    ) -> Result<Vec<DecodingKey>, AuthError> {
        let set = self.snapshot();
        let fresh = set.fetched.is_some_and(|t| t.elapsed() < self.max_age);
        let found = candidates(&set, kid, alg);
        if fresh && !found.is_empty() {
            return Ok(found);
        }
        let set = self.refreshed(set.fetched).await?;
        let found = candidates(&set, kid, alg);
        if found.is_empty() {
            return Err(AuthError::UnknownKey);
        }
        Ok(found)
    }

    fn snapshot(&self) -> Arc<KeySet> {
        match self.current.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// The keys after a fetch, unless another request fetched since `seen`, or the last
    /// try was less than `min_refresh` ago: then the keys we have.
    async fn refreshed(&self, seen: Option<Instant>) -> Result<Arc<KeySet>, AuthError> {
        let mut last_try = self.refresh.lock().await;
        let set = self.snapshot();
        if set.fetched != seen {
            return Ok(set);
        }
        if last_try.is_some_and(|t| t.elapsed() < self.min_refresh) {
            return self.usable(set);
        }
        *last_try = Some(Instant::now());
        match self.fetch().await {
            Ok(fetched) => {
                let fetched = Arc::new(fetched);
                match self.current.write() {
                    Ok(mut guard) => *guard = fetched.clone(),
                    Err(poisoned) => *poisoned.into_inner() = fetched.clone(),
                }
                Ok(fetched)
            }
            Err(e) => {
                tracing::warn!(
                    error = e.detail().unwrap_or_default(),
                    "could not fetch the issuer's keys"
                );
                self.usable(set)
            }
        }
    }

    /// Keys we had, while the issuer cannot be asked for new ones: they still check
    /// tokens until `max_stale` after their fetch, so a short outage goes unnoticed but
    /// a key the issuer withdrew meanwhile does not verify for ever.
    fn usable(&self, set: Arc<KeySet>) -> Result<Arc<KeySet>, AuthError> {
        match set.fetched {
            Some(at) if at.elapsed() < self.max_stale => Ok(set),
            Some(at) => Err(AuthError::Unavailable(format!(
                "the issuer's keys were last fetched {:?} ago, longer than auth.jwks_max_stale; fetches fail, retried at most every auth.jwks_min_refresh",
                at.elapsed()
            ))),
            None => Err(AuthError::Unavailable(
                "the issuer's keys could not be fetched; retried at most every auth.jwks_min_refresh".into(),
            )),
        }
    }

    async fn fetch(&self) -> Result<KeySet, AuthError> {
        let url = self
            .jwks_url
            .get_or_try_init(|| discover_jwks_url(&self.fetcher, &self.issuer))
            .await?;
        let document = self
            .fetcher
            .get_json(url)
            .await
            .map_err(|e| AuthError::Unavailable(format!("{url}: {e}")))?;
        let set: JwkSet = serde_json::from_value(document)
            .map_err(|e| AuthError::Unavailable(format!("{url} is not a JWKS: {e}")))?;
        let mut out = KeySet {
            fetched: Some(Instant::now()),
            ..KeySet::default()
        };
        let mut skipped = 0_usize;
        for jwk in &set.keys {
            // Encryption keys and shared secrets never check a signature here.
            if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption))
                || matches!(jwk.algorithm, AlgorithmParameters::OctetKey(_))
            {
                continue;
            }
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                skipped += 1;
                continue;
            };
            // An `alg` we cannot read restricts the key to something we do not know: it
            // is no key for any algorithm we do (reading it as "any" would let a key
            // meant for one purpose verify another's tokens).
            let alg = match jwk.common.key_algorithm {
                None => None,
                Some(named) => match named.to_string().parse::<Algorithm>() {
                    Ok(alg) => Some(alg),
                    Err(_) => {
                        skipped += 1;
                        continue;
                    }
                },
            };
            let key = Key { key, alg };
            match &jwk.common.key_id {
                Some(kid) => {
                    out.by_kid.insert(kid.clone(), key);
                }
                None => out.unnamed.push(key),
            }
        }
        if skipped > 0 {
            tracing::warn!(
                skipped,
                "some of the issuer's keys are unusable (an unknown `alg`, or parameters that do not parse); skipped"
            );
        }
        tracing::info!(
            keys = out.by_kid.len() + out.unnamed.len(),
            "fetched the issuer's keys"
        );
        Ok(out)
    }
}

fn candidates(set: &KeySet, kid: Option<&str>, alg: Algorithm) -> Vec<DecodingKey> {
    match kid {
        Some(kid) => set
            .by_kid
            .get(kid)
            .and_then(|k| k.for_alg(alg))
            .cloned()
            .into_iter()
            .collect(),
        None => set
            .unnamed
            .iter()
            .chain(set.by_kid.values())
            .filter_map(|k| k.for_alg(alg))
            .cloned()
            .collect(),
    }
}

/// The issuer's `jwks_uri`: from its OAuth metadata (RFC 8414, the well-known path
/// inserted before the issuer's path), else its OpenID Connect discovery document.
pub(crate) async fn discover_jwks_url(
    fetcher: &Fetcher,
    issuer: &str,
) -> Result<String, AuthError> {
    let mut tried = Vec::new();
    for url in metadata_urls(issuer) {
        match fetcher.get_json(&url).await {
            Ok(document) => {
                if document.get("issuer").and_then(Value::as_str) != Some(issuer) {
                    tried.push(format!("{url}: names another issuer"));
                    continue;
                }
                if let Some(jwks) = document.get("jwks_uri").and_then(Value::as_str) {
                    return Ok(jwks.to_owned());
                }
                tried.push(format!("{url}: no jwks_uri"));
            }
            Err(e) => tried.push(format!("{url}: {e}")),
        }
    }
    Err(AuthError::Unavailable(format!(
        "no jwks_uri for issuer {issuer} ({})",
        tried.join("; ")
    )))
}

/// Where an issuer's metadata may be, in the order tried.
fn metadata_urls(issuer: &str) -> Vec<String> {
    let trimmed = issuer.trim_end_matches('/');
    let start = trimmed.find("://").map_or(0, |i| i + 3);
    let (origin, path) = match trimmed[start..].find('/') {
        Some(i) => trimmed.split_at(start + i),
        None => (trimmed, ""),
    };
    vec![
        format!("{origin}/.well-known/oauth-authorization-server{path}"),
        format!("{origin}/.well-known/openid-configuration{path}"),
        format!("{trimmed}/.well-known/openid-configuration"),
    ]
    .into_iter()
    .fold(Vec::new(), |mut out, url| {
        if !out.contains(&url) {
            out.push(url);
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::metadata_urls;

    #[test]
    fn metadata_is_looked_for_where_the_rfcs_say() {
        assert_eq!(
            metadata_urls("https://as.example/realms/mcp"),
            [
                "https://as.example/.well-known/oauth-authorization-server/realms/mcp",
                "https://as.example/.well-known/openid-configuration/realms/mcp",
                "https://as.example/realms/mcp/.well-known/openid-configuration",
            ]
        );
        assert_eq!(
            metadata_urls("https://as.example/"),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration",
            ]
        );
    }
}
