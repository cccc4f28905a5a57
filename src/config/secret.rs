//! Values that must never be printed: [`Secret`] (a client secret, a signing key, a
//! program's environment value) prints as `(set)`, and [`SecretUrl`] (a Redis or OTLP
//! URL) prints with the password of its user-info and every credential-like query
//! parameter as `(set)`. Debug, Display and Serialize all go through that, so `config
//! check`, start-up errors and logs cannot show them; the value itself is reached only
//! through `expose`, where it is used.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// What a set secret prints as.
const SET: &str = "(set)";

/// A secret string.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The secret itself, for the one place that uses it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (unset).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for Secret {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_empty() { "(empty)" } else { SET })
    }
}

/// `(set)`, or an empty string when unset (what the defaults are written as).
impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(if self.0.is_empty() { "" } else { SET })
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self)
    }
}

/// A secret is a string the documentation marks write-only: it is read, never shown.
impl schemars::JsonSchema for Secret {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "writeOnly": true })
    }
}

/// A URL that may carry credentials.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// The URL with its credentials, for the one place that connects with it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether it is empty (unset).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretUrl {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for SecretUrl {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl Serialize for SecretUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&redact_url(&self.0))
    }
}

impl<'de> Deserialize<'de> for SecretUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Self)
    }
}

/// A URL whose credentials are write-only.
impl schemars::JsonSchema for SecretUrl {
    fn inline_schema() -> bool {
        true
    }

    fn schema_name() -> std::borrow::Cow<'static, str> {
        "SecretUrl".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "uri", "writeOnly": true })
    }
}

/// Whether a query parameter (or header) named `name` carries a credential: `pass`,
/// `password`, `token`, `access_token`, `key`, `api_key`, `secret`, `signature`, `sig`,
/// `auth`, `credential` and their spellings with `-`, `_` or other words around them.
pub fn is_secret_name(name: &str) -> bool {
    let name: String = name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric())
        .map(|c| c.to_ascii_lowercase())
        .collect();
    const WITHIN: [&str; 8] = [
        "pass",
        "pwd",
        "token",
        "secret",
        "key",
        "signature",
        "auth",
        "credential",
    ];
    name == "sig" || WITHIN.iter().any(|word| name.contains(word))
}

/// `url` with the password of its user-info (a user alone too: Redis ACL names are half
/// the credential) and the value of every credential-like query parameter replaced by
/// `(set)`. Text that is not a URL comes back as it is.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let authority_end = before_query.find('/').unwrap_or(before_query.len());
    let (authority, path) = before_query.split_at(authority_end);
    let mut out = format!("{scheme}://");
    match authority.rsplit_once('@') {
        Some((_, host)) => {
            out.push_str(SET);
            out.push('@');
            out.push_str(host);
        }
        None => out.push_str(authority),
    }
    out.push_str(path);
    if let Some(query) = query {
        out.push('?');
        out.push_str(&redact_query(query, SET));
    }
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// A query string with the value of every credential-like parameter replaced by `mask`.
pub fn redact_query(query: &str, mask: &str) -> String {
    query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if is_secret_name(name) => format!("{name}={mask}"),
            _ => pair.to_owned(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_prints_as_set_everywhere() {
        let secret = Secret::from("hunter2");
        for shown in [
            format!("{secret}"),
            format!("{secret:?}"),
            serde_json::to_string(&secret).unwrap_or_default(),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("(set)"), "{shown}");
        }
        assert_eq!(secret.expose(), "hunter2");
        assert_eq!(format!("{}", Secret::default()), "(empty)");
    }

    #[test]
    fn credentials_in_urls_are_hidden_and_the_rest_kept() {
        let cases = [
            (
                "redis://:pw@10.0.0.1:6379/0",
                "redis://(set)@10.0.0.1:6379/0",
            ),
            ("rediss://app:pw@redis:6380", "rediss://(set)@redis:6380"),
            (
                "unix:///run/redis.sock?db=1&pass=pw",
                "unix:///run/redis.sock?db=1&pass=(set)",
            ),
            (
                "https://otel:4318/v1?api_key=k1&x=1&Access-Token=t#f",
                "https://otel:4318/v1?api_key=(set)&x=1&Access-Token=(set)#f",
            ),
            ("redis://127.0.0.1:6379", "redis://127.0.0.1:6379"),
            ("not a url", "not a url"),
        ];
        for (url, shown) in cases {
            let secret = SecretUrl::from(url);
            assert_eq!(secret.to_string(), shown);
            assert_eq!(format!("{secret:?}"), format!("{shown:?}"));
            assert_eq!(
                serde_json::to_string(&secret).unwrap_or_default(),
                format!("{shown:?}")
            );
            assert_eq!(secret.expose(), url);
        }
    }
}
