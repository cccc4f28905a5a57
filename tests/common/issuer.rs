//! A stand-in authorization server on loopback: keys made by `openssl` (RSA and EC, the
//! committed files of tests/fixtures/make, so that the tests need no openssl), its
//! metadata (RFC 8414), its JWKS, and an introspection endpoint (RFC 7662); and tokens
//! minted with those keys, for the `[auth]` tests. A test can make its JWKS fail, publish
//! a key as raw JSON, and hold introspection answers until it lets them go.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Map, Value, json};

/// A signing key: its kid, algorithm, private key, and whether the JWKS publishes it.
#[derive(Clone)]
pub struct Key {
    pub kid: String,
    pub alg: Algorithm,
    pub encoding: EncodingKey,
}

/// The key in tests/fixtures/keys/`file`.pem, named `kid`: RS256 for `rsa-*`, ES256 for
/// `ec-*`. Each file is a different key (the issuer's, a forger's, a rotated one...).
pub fn fixture_key(file: &str, kid: &str) -> Key {
    let path = format!(
        "{}/tests/fixtures/keys/{file}.pem",
        env!("CARGO_MANIFEST_DIR")
    );
    let pem = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (alg, encoding) = if file.starts_with("rsa-") {
        (Algorithm::RS256, EncodingKey::from_rsa_pem(&pem))
    } else {
        (Algorithm::ES256, EncodingKey::from_ec_pem(&pem))
    };
    let encoding = encoding.unwrap_or_else(|e| panic!("{path}: {e}"));
    Key {
        kid: kid.to_owned(),
        alg,
        encoding,
    }
}

/// The public half of `key` as a JWK.
pub fn jwk_of(key: &Key) -> Jwk {
    let mut jwk = Jwk::from_encoding_key(&key.encoding, key.alg)
        .unwrap_or_else(|e| panic!("a JWK of {}: {e}", key.kid));
    jwk.common.key_id = Some(key.kid.clone());
    jwk
}

pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

struct Shared {
    issuer: String,
    jwks: Mutex<Vec<Jwk>>,
    /// Keys published as they are written, readable by this server or not.
    raw_jwks: Mutex<Vec<Value>>,
    /// The JWKS answers 500 while set.
    jwks_failing: AtomicBool,
    /// Opaque token → introspection answer.
    opaque: Mutex<HashMap<String, Value>>,
    /// Introspection answers wait while this is false.
    introspection_open: tokio::sync::watch::Sender<bool>,
    /// Every JWKS request, the failed ones too.
    jwks_fetches: AtomicUsize,
    /// Every introspection request, counted as it arrives.
    introspections: AtomicUsize,
}

/// The running stand-in.
pub struct Issuer {
    pub url: String,
    shared: Arc<Shared>,
    pub rsa: Key,
    pub ec: Key,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Issuer {
    /// Serves an RSA and an EC key (kids `rsa-1`, `ec-1`).
    pub async fn start() -> Self {
        let rsa = fixture_key("rsa-issuer", "rsa-1");
        let ec = fixture_key("ec-issuer", "ec-1");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let url = format!("http://{addr}");
        let shared = Arc::new(Shared {
            issuer: url.clone(),
            jwks: Mutex::new(vec![jwk_of(&rsa), jwk_of(&ec)]),
            raw_jwks: Mutex::default(),
            jwks_failing: AtomicBool::new(false),
            opaque: Mutex::default(),
            introspection_open: tokio::sync::watch::Sender::new(true),
            jwks_fetches: AtomicUsize::new(0),
            introspections: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/.well-known/oauth-authorization-server", get(metadata))
            .route("/jwks", get(jwks))
            .route("/introspect", post(introspect))
            .with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            shared,
            rsa,
            ec,
            task,
        }
    }

    /// Publishes `key` too (a rotation).
    pub fn publish(&self, key: &Key) {
        lock(&self.shared.jwks).push(jwk_of(key));
    }

    /// Publishes `jwk` as written (a key with an `alg` nobody knows, say).
    pub fn publish_raw(&self, jwk: Value) {
        lock(&self.shared.raw_jwks).push(jwk);
    }

    /// Makes the JWKS answer 500 (`true`) or the keys again (`false`).
    pub fn fail_jwks(&self, failing: bool) {
        self.shared.jwks_failing.store(failing, Ordering::SeqCst);
    }

    /// Holds every introspection answer (`false`) until let go (`true`).
    pub fn open_introspection(&self, open: bool) {
        self.shared.introspection_open.send_replace(open);
    }

    /// Withdraws the key named `kid`.
    pub fn withdraw(&self, kid: &str) {
        lock(&self.shared.jwks).retain(|k| k.common.key_id.as_deref() != Some(kid));
    }

    /// Makes `token` an opaque token whose introspection answers `answer`.
    pub fn opaque(&self, token: &str, answer: Value) {
        lock(&self.shared.opaque).insert(token.to_owned(), answer);
    }

    pub fn jwks_fetches(&self) -> usize {
        self.shared.jwks_fetches.load(Ordering::SeqCst)
    }

    pub fn introspections(&self) -> usize {
        self.shared.introspections.load(Ordering::SeqCst)
    }

    /// Claims a valid token for `audience` carries: this issuer, subject `sub`, `scope`,
    /// five minutes to live.
    pub fn claims(&self, audience: &str, sub: &str, scope: &str) -> Map<String, Value> {
        let now = now();
        let value = json!({
            "iss": self.url, "aud": audience, "sub": sub, "scope": scope,
            "iat": now, "exp": now + 300, "client_id": "otpmcp-tests",
        });
        match value {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }

    /// A token signed with `key` (header `kid` and `alg` from it).
    pub fn sign(key: &Key, claims: &Map<String, Value>) -> String {
        let mut header = Header::new(key.alg);
        header.kid = Some(key.kid.clone());
        jsonwebtoken::encode(&header, claims, &key.encoding)
            .unwrap_or_else(|e| panic!("signing: {e}"))
    }

    /// A valid RS256 token of `sub` with `scope`.
    pub fn token(&self, audience: &str, sub: &str, scope: &str) -> String {
        Self::sign(&self.rsa, &self.claims(audience, sub, scope))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn metadata(State(shared): State<Arc<Shared>>) -> axum::response::Response {
    json_response(json!({
        "issuer": shared.issuer,
        "jwks_uri": format!("{}/jwks", shared.issuer),
        "introspection_endpoint": format!("{}/introspect", shared.issuer),
        // What a host's OAuth discovery looks for (RFC 8414's required fields); nothing
        // here serves them.
        "authorization_endpoint": format!("{}/authorize", shared.issuer),
        "token_endpoint": format!("{}/token", shared.issuer),
        "response_types_supported": ["code"],
        "code_challenge_methods_supported": ["S256"],
    }))
}

async fn jwks(State(shared): State<Arc<Shared>>) -> axum::response::Response {
    use axum::response::IntoResponse;
    shared.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if shared.jwks_failing.load(Ordering::SeqCst) {
        return axum::http::StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let set = JwkSet {
        keys: lock(&shared.jwks).clone(),
    };
    let mut value = serde_json::to_value(&set).unwrap_or_default();
    if let Some(keys) = value.get_mut("keys").and_then(Value::as_array_mut) {
        keys.extend(lock(&shared.raw_jwks).iter().cloned());
    }
    json_response(value)
}

async fn introspect(State(shared): State<Arc<Shared>>, body: String) -> axum::response::Response {
    shared.introspections.fetch_add(1, Ordering::SeqCst);
    let mut open = shared.introspection_open.subscribe();
    let _ = open.wait_for(|open| *open).await;
    let token = body
        .split('&')
        .find_map(|pair| pair.strip_prefix("token="))
        .unwrap_or_default()
        .replace("%2D", "-");
    let answer = lock(&shared.opaque)
        .get(&token)
        .cloned()
        .unwrap_or_else(|| json!({"active": false}));
    json_response(answer)
}

fn json_response(value: Value) -> axum::response::Response {
    use axum::response::IntoResponse;
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}
