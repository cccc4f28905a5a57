//! The [`Verifier`]: a bearer token in, a [`Principal`] or the reason out.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, Validation};
use serde_json::{Map, Value};

use super::fetch::Fetcher;
use super::introspect::Introspector;
use super::keys::KeyCache;
use super::{AuthError, Principal};
use crate::config::AuthConfig;

/// Checks bearer tokens as `[auth]` says: JWTs against the issuer's keys (signature,
/// algorithm, `iss`, `aud`, `exp` and `nbf` with the leeway), opaque tokens by
/// introspection when it is configured.
#[derive(Debug)]
pub struct Verifier {
    config: AuthConfig,
    algorithms: Vec<Algorithm>,
    keys: KeyCache,
    introspector: Option<Introspector>,
}

/// Why a verifier could not be built.
#[derive(Debug, thiserror::Error)]
#[error("[auth]: {0}")]
pub struct SetupError(String);

impl Verifier {
    /// A verifier for `config` (validated: `enabled`, with an issuer and an audience).
    /// Fetches nothing yet: the keys come with the first token.
    pub fn new(config: &AuthConfig) -> Result<Self, SetupError> {
        let fetcher = super::fetch::Fetcher::new(config.fetch_timeout.get())
            .map_err(|e| SetupError(e.to_string()))?;
        let algorithms = config
            .algorithms
            .iter()
            .map(|a| a.parse::<Algorithm>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| SetupError(format!("auth.algorithms: {e}")))?;
        Ok(Self {
            keys: KeyCache::new(
                fetcher.clone(),
                config.issuer.clone(),
                &config.jwks_url,
                config.jwks_max_age.get(),
                config.jwks_min_refresh.get(),
                config.jwks_max_stale,
            ),
            introspector: (!config.introspection_url.is_empty())
                .then(|| Introspector::new(Fetcher::clone(&fetcher), config)),
            algorithms,
            config: config.clone(),
        })
    }

    /// The configuration it checks against.
    pub fn config(&self) -> &AuthConfig {
        &self.config
    }

    /// The principal `token` names, if it is valid for this server.
    pub async fn verify(&self, token: &str) -> Result<Principal, AuthError> {
        let mut principal = if looks_like_jwt(token) {
            self.verify_jwt(token).await?
        } else {
            match &self.introspector {
                Some(introspector) => introspector.check(token).await?,
                None => {
                    return Err(AuthError::Malformed(
                        "not a JWT (opaque tokens need auth.introspection_url)".into(),
                    ));
                }
            }
        };
        principal.bound_to_client = self.config.bind_to_client;
        Ok(principal)
    }

    async fn verify_jwt(&self, token: &str) -> Result<Principal, AuthError> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| match e.kind() {
            // `none` and unknown names fail to parse as an algorithm at all.
            ErrorKind::Json(_) | ErrorKind::InvalidAlgorithmName => {
                AuthError::Algorithm(alg_named(token).unwrap_or_else(|| "(unreadable)".into()))
            }
            _ => AuthError::Malformed(e.to_string()),
        })?;
        if !self.algorithms.contains(&header.alg) {
            return Err(AuthError::Algorithm(format!("{:?}", header.alg)));
        }
        let keys = self
            .keys
            .keys_for(header.kid.as_deref(), header.alg)
            .await?;
        // Only the header's algorithm (checked against the allowed list above): the crate
        // wants every algorithm it is given to fit the key's family.
        let mut validation = Validation::new(header.alg);
        validation.leeway = self.config.leeway.as_secs();
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.config.issuer]);
        validation.set_audience(&[&self.config.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud", "sub"]);
        let mut last = AuthError::UnknownKey;
        for key in &keys {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &validation) {
                Ok(data) => return Principal::from_claims(data.claims),
                Err(e) => {
                    last = reason(&e);
                    // Only a signature that does not verify may verify with the next key.
                    if last != AuthError::BadSignature {
                        return Err(last);
                    }
                }
            }
        }
        Err(last)
    }
}

/// Three base64url parts: a JWS in compact form.
fn looks_like_jwt(token: &str) -> bool {
    token.split('.').count() == 3
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The `alg` a header names, for the error that refuses it (`none`, `HS256` from a
/// forger who hopes the public key is taken as a secret).
fn alg_named(token: &str) -> Option<String> {
    use base64::Engine;
    let header = token.split('.').next()?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()?;
    let value: Value = serde_json::from_slice(&bytes).ok()?;
    let alg = value.get("alg")?.as_str()?;
    Some(alg.chars().take(16).collect())
}

fn reason(e: &jsonwebtoken::errors::Error) -> AuthError {
    match e.kind() {
        ErrorKind::InvalidSignature => AuthError::BadSignature,
        ErrorKind::ExpiredSignature => AuthError::Expired,
        ErrorKind::ImmatureSignature => AuthError::NotYetValid,
        ErrorKind::InvalidAudience => AuthError::WrongAudience,
        ErrorKind::InvalidIssuer => AuthError::WrongIssuer,
        ErrorKind::InvalidAlgorithm => AuthError::Algorithm("(does not fit the key)".into()),
        ErrorKind::MissingRequiredClaim(claim) => AuthError::MissingClaim(match claim.as_str() {
            "exp" => "exp",
            "iss" => "iss",
            "aud" => "aud",
            _ => "sub",
        }),
        _ => AuthError::Malformed(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_compact_jws_looks_like_a_jwt() {
        assert!(looks_like_jwt("eyJh.eyJz.c2ln"));
        assert!(!looks_like_jwt("opaque-token"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a.b c.d"));
    }

    #[test]
    fn the_refused_algorithm_is_named() {
        // {"alg":"none"}
        assert_eq!(alg_named("eyJhbGciOiJub25lIn0.e30."), Some("none".into()));
    }
}
