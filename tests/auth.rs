//! `[auth]`: otpmcp as an OAuth 2.1 resource server. A stand-in authorization server on
//! loopback serves keys made by openssl (RSA and EC, committed in tests/fixtures/keys);
//! the tests mint real tokens with them and check what a request with each gets: the
//! principal a handler sees, 401 and 403 with their challenges, key rotation, sessions and
//! tasks bound to their principal (on one server and across replicas on Redis), scopes,
//! per-principal caps, introspection.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::issuer::{Issuer, fixture_key, jwk_of, now};
use common::redis::RedisServer;
use common::stateless::{Stateless, wait_tool};
use common::{Client, SseReader, TestServer, Transcript, eventually, within};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use otpmcp::McpServer;
use otpmcp::cluster::leases::RESTARTED_MESSAGE;
use otpmcp::config::{BackendKind, Config, NonZeroDuration};
use otpmcp::server::HANDED_ON_NOTE;

use otpmcp::handler::builtin::{echo, stream_events};
use otpmcp::handler::tool;
use otpmcp::handler::{PromptRegistry, ResourceRegistry, ToolRegistry};
use otpmcp::protocol::methods::{
    CallToolResult, GetPromptResult, PromptArgument, PromptDefinition, ResourceContents,
    ResourceDefinition,
};
use serde_json::{Value, json};

/// This server's resource URI, which tokens must name as their audience.
const AUDIENCE: &str = "http://mcp.test/mcp";

/// `[auth]` on, trusting `issuer`.
fn auth_on(issuer: &Issuer) -> impl FnOnce(&mut Config) + Clone + 'static {
    let url = issuer.url.clone();
    move |c: &mut Config| {
        c.auth.enabled = true;
        c.auth.issuer = url;
        c.auth.audience = AUDIENCE.into();
        c.auth.scopes_supported = vec!["mcp".into(), "admin".into()];
        // Every client here is 127.0.0.1, and some tests are refused on purpose many
        // times: the per-address limit has its own test.
        c.auth.max_failures_per_client = 10_000;
    }
}

/// A resource whose contents are its URI.
fn resource(uri: &str) -> ResourceDefinition {
    ResourceDefinition {
        uri: uri.into(),
        name: uri.into(),
        description: uri.into(),
        mime_type: None,
    }
}

/// `echo`, `stream_events`, `whoami` (the principal a handler sees) and `reset`, which
/// needs scope `admin`; resources `mem://open` and `mem://secret`, which needs `admin`.
fn server() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(echo())
        .register(stream_events())
        .register(
            tool("whoami", |(), ctx| async move {
                let who = ctx
                    .principal()
                    .map(|p| format!("{} {}", p.subject, p.scopes.join(",")));
                Ok(CallToolResult::text(who.unwrap_or_default()))
            })
            .description("Who is calling."),
        )
        .register(
            tool("reset", |(), _| async { Ok(CallToolResult::text("reset")) })
                .description("Needs admin.")
                .scopes(["admin"]),
        )
        .register(wait_tool(Arc::default()));
    let mut prompts = PromptRegistry::default();
    for name in ["hello", "audit"] {
        let definition = PromptDefinition {
            name: name.into(),
            description: format!("The {name} prompt."),
            arguments: vec![PromptArgument {
                name: "who".into(),
                description: None,
                required: false,
            }],
        };
        prompts.prompt(definition, |_, _| async {
            Ok(GetPromptResult {
                description: None,
                messages: vec![],
            })
        });
    }
    prompts.require_scopes("audit", ["admin"]);
    let mut resources = ResourceRegistry::default();
    for uri in ["mem://open", "mem://secret"] {
        resources.resource(resource(uri), |uri, _| async move {
            Ok(vec![ResourceContents {
                text: Some(uri.clone()),
                uri,
                mime_type: None,
                blob: None,
            }])
        });
    }
    resources.require_scopes("mem://secret", ["admin"]);
    McpServer::new(tools)
        .with_prompts(prompts)
        .with_resources(resources)
        .with_completion(|_, _, _| async { vec!["ada".to_owned()] })
}

async fn start(issuer: &Issuer, tweak: impl FnOnce(&mut Config)) -> TestServer {
    let on = auth_on(issuer);
    TestServer::start_with(
        move |c| {
            on(c);
            tweak(c);
        },
        server(),
    )
    .await
}

/// `initialize` as a client with `token`: the status, and the challenge if refused.
async fn try_initialize(url: &str, token: Option<&str>) -> (u16, String) {
    let resp = initialize(url, token).await;
    (resp.status().as_u16(), challenge_of(&resp))
}

/// `initialize` as a client with `token`: the whole answer.
async fn initialize(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut client = Client::new(url);
    if let Some(token) = token {
        client = client.with_token(token);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    Client::send(client.post(&body)).await
}

/// The `WWW-Authenticate` header of `resp` (empty if none).
fn challenge_of(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn session(url: &str, token: &str) -> Client {
    let mut client = Client::new(url).with_token(token);
    client.initialize().await;
    client
}

/// The text of a `tools/call` answer.
async fn call(client: &Client, tool: &str) -> Value {
    let answer = client
        .ask(
            "tools/call",
            json!({"name": tool, "arguments": {"text": "hi"}}),
        )
        .await;
    answer["result"]["content"][0]["text"].clone()
}

#[tokio::test]
async fn tokens_signed_with_rsa_and_ec_keys_are_accepted_and_the_handler_sees_its_principal() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let rsa = issuer.token(AUDIENCE, "alice", "mcp read");
    let alice = session(&server.url, &rsa).await;
    assert_eq!(call(&alice, "whoami").await, "alice mcp,read");

    let ec = Issuer::sign(&issuer.ec, &issuer.claims(AUDIENCE, "bob", "mcp"));
    let bob = session(&server.url, &ec).await;
    assert_eq!(call(&bob, "whoami").await, "bob mcp");
    assert_eq!(call(&bob, "echo").await, "hi");
    // The keys were fetched once, found through the issuer's metadata.
    assert_eq!(issuer.jwks_fetches(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn without_a_token_the_answer_names_the_protected_resource_metadata() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let (status, challenge) = try_initialize(&server.url, None).await;
    assert_eq!(status, 401);
    assert_eq!(
        challenge,
        "Bearer resource_metadata=\"http://mcp.test/.well-known/oauth-protected-resource/mcp\""
    );
    // GET and DELETE too, before anything else is looked at.
    let anonymous = Client::new(&server.url);
    for resp in [
        Client::send(anonymous.get(None).header("mcp-session-id", "x")).await,
        Client::send(anonymous.delete().header("mcp-session-id", "x")).await,
    ] {
        assert_eq!(resp.status(), 401);
        assert!(resp.headers().contains_key("www-authenticate"));
    }
    // The metadata, without a token, at the well-known path and with the resource's path.
    let base = server.url.trim_end_matches("/mcp");
    for path in [
        "/.well-known/oauth-protected-resource/mcp",
        "/.well-known/oauth-protected-resource",
    ] {
        let resp = Client::send(reqwest::Client::new().get(format!("{base}{path}"))).await;
        assert_eq!(resp.status(), 200, "{path}");
        let body: Value =
            serde_json::from_str(&resp.text().await.unwrap_or_default()).unwrap_or_default();
        assert_eq!(body["resource"], AUDIENCE);
        assert_eq!(body["authorization_servers"], json!([issuer.url]));
        assert_eq!(body["scopes_supported"], json!(["mcp", "admin"]));
        assert_eq!(body["bearer_methods_supported"], json!(["header"]));
    }
    server.shutdown().await;
}

#[tokio::test]
async fn expired_early_foreign_forged_and_unsigned_tokens_get_401_invalid_token() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    // Valid claims with `key` set to `value` (or removed).
    let claims = |key: &str, value: Option<Value>| {
        let mut claims = issuer.claims(AUDIENCE, "mallory", "mcp");
        match value {
            Some(value) => claims.insert(key.to_owned(), value),
            None => claims.remove(key),
        };
        claims
    };
    let signed = |key: &str, value: Option<Value>| Issuer::sign(&issuer.rsa, &claims(key, value));
    let t = now();
    // Within the leeway (30 s by default): accepted.
    let lately = signed("exp", Some(json!(t - 10)));
    assert_eq!(try_initialize(&server.url, Some(&lately)).await.0, 200);

    // A key with the issuer's kid that the issuer never published.
    let forger = fixture_key("rsa-forger", "rsa-1");
    let forged = Issuer::sign(&forger, &claims("sub", Some(json!("mallory"))));
    // `alg: none`, and HS256 keyed with public material: a resource server takes neither.
    let b64 = |v: Value| {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    };
    let valid = Value::Object(claims("sub", Some(json!("mallory"))));
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"})),
        b64(valid.clone())
    );
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("rsa-1".into());
    let hmac = jsonwebtoken::encode(
        &hs,
        &valid,
        &EncodingKey::from_secret(issuer.url.as_bytes()),
    )
    .unwrap_or_default();
    let cases = [
        ("expired", signed("exp", Some(json!(t - 120)))),
        ("not yet valid", signed("nbf", Some(json!(t + 120)))),
        (
            "another audience",
            signed("aud", Some(json!("http://other.test/mcp"))),
        ),
        (
            "another issuer",
            signed("iss", Some(json!("http://evil.test"))),
        ),
        ("no subject", signed("sub", None)),
        ("forged", forged),
        ("alg none", unsigned),
        ("hmac", hmac),
        ("opaque garbage", "not-a-jwt".to_owned()),
    ];
    for (what, token) in cases {
        let (status, challenge) = try_initialize(&server.url, Some(&token)).await;
        assert_eq!(status, 401, "{what}");
        assert!(
            challenge.contains("error=\"invalid_token\""),
            "{what}: {challenge}"
        );
        assert!(
            challenge.contains("resource_metadata="),
            "{what}: {challenge}"
        );
    }
    // Not a bearer token at all.
    let basic = Client::new(&server.url);
    let resp = Client::send(
        basic
            .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
            .header("authorization", "Basic YTpi"),
    )
    .await;
    assert_eq!(resp.status(), 401);
    server.shutdown().await;
}

#[tokio::test]
async fn a_rotated_key_is_fetched_again_and_unknown_kids_cannot_hammer_the_issuer() {
    let issuer = Issuer::start().await;
    let min_refresh = NonZeroDuration::from_millis(300);
    let server = start(&issuer, move |c| c.auth.jwks_min_refresh = min_refresh).await;
    let first = issuer.token(AUDIENCE, "alice", "mcp");
    assert_eq!(try_initialize(&server.url, Some(&first)).await.0, 200);
    assert_eq!(issuer.jwks_fetches(), 1);

    // The issuer rotates: a token signed with the new key is accepted once the keys are
    // fetched again (at most every jwks_min_refresh).
    let next = fixture_key("rsa-rotated", "rsa-2");
    issuer.publish(&next);
    let rotated = Issuer::sign(&next, &issuer.claims(AUDIENCE, "alice", "mcp"));
    eventually("the rotated key to be accepted", || async {
        (try_initialize(&server.url, Some(&rotated)).await.0 == 200).then_some(())
    })
    .await;

    // Tokens naming kids nobody published: each may ask for the keys, but the issuer
    // sees at most one fetch per interval.
    let before = issuer.jwks_fetches();
    let started = Instant::now();
    for n in 0..30 {
        let stranger = fixture_key("ec-stranger", &format!("unknown-{n}"));
        let token = Issuer::sign(&stranger, &issuer.claims(AUDIENCE, "x", "mcp"));
        assert_eq!(try_initialize(&server.url, Some(&token)).await.0, 401);
    }
    let intervals = started.elapsed().as_millis() / min_refresh.get().as_millis() + 1;
    let fetched = issuer.jwks_fetches() - before;
    assert!(
        fetched as u128 <= intervals,
        "{fetched} fetches in {intervals} intervals"
    );
    server.shutdown().await;
}

/// A streamed call of `client`: the id of its first event.
async fn first_event_id(client: &Client) -> String {
    let mut reader: SseReader = client
        .call_stream("stream_events", json!({"count": 3, "interval_ms": 1}), None)
        .await;
    let frames = reader.rest().await;
    frames
        .iter()
        .find_map(|f| f.id.clone().filter(|id| !id.is_empty()))
        .unwrap_or_else(|| panic!("no event id in {frames:?}"))
}

/// Bob, holding alice's session id (and an event id of it), gets what an unknown session
/// gets, whatever he tries; alice's session is untouched.
async fn bob_cannot_use_alices_session(alice: &Client, bob: Client, event: &str) {
    let mut bob = bob;
    bob.session = alice.session.clone();
    let call = json!({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                      "params": {"name": "echo", "arguments": {"text": "x"}}});
    let note = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                      "params": {"requestId": 1}});
    for (what, req) in [
        ("POST", bob.post(&call)),
        ("notification", bob.post(&note)),
        (
            "resume",
            bob.get(Some(event))
                .header("mcp-protocol-version", "2025-11-25"),
        ),
        (
            "DELETE",
            bob.delete().header("mcp-protocol-version", "2025-11-25"),
        ),
    ] {
        assert_eq!(Client::send(req).await.status(), 404, "{what}");
    }
    assert_eq!(call_text(alice).await, "hi");
}

async fn call_text(client: &Client) -> Value {
    call(client, "echo").await
}

#[tokio::test]
async fn a_session_and_its_events_answer_only_the_principal_that_created_them() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let alice = session(&server.url, &issuer.token(AUDIENCE, "alice", "mcp")).await;
    let event = first_event_id(&alice).await;
    let bob = Client::new(&server.url).with_token(&issuer.token(AUDIENCE, "bob", "mcp"));
    bob_cannot_use_alices_session(&alice, bob, &event).await;
    let resp = Client::send(alice.delete().header("mcp-protocol-version", "2025-11-25")).await;
    assert_eq!(resp.status(), 200, "alice ends her own session");
    server.shutdown().await;
}

#[tokio::test]
async fn the_binding_holds_across_replicas_on_redis() {
    let issuer = Issuer::start().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let on = move |c: &mut Config| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.clone().into();
    };
    let a = start(&issuer, on.clone()).await;
    let b = start(&issuer, on).await;
    let alice = session(&a.url, &issuer.token(AUDIENCE, "alice", "mcp")).await;
    let event = first_event_id(&alice).await;
    // Bob on replica B, which loads the session from Redis with its owner.
    let bob = Client::new(&b.url).with_token(&issuer.token(AUDIENCE, "bob", "mcp"));
    let mut alice_on_b = alice.clone();
    alice_on_b.url = b.url.clone();
    bob_cannot_use_alices_session(&alice_on_b, bob, &event).await;
    a.shutdown().await;
    b.shutdown().await;
}

#[tokio::test]
async fn lists_show_what_the_scopes_allow_and_a_call_without_them_gets_403() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let names = |list: Value| -> Vec<String> {
        list["result"]["tools"]
            .as_array()
            .map(|t| {
                t.iter()
                    .filter_map(|t| t["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let user = session(&server.url, &issuer.token(AUDIENCE, "u", "mcp")).await;
    let listed = names(user.ask("tools/list", json!({})).await);
    assert!(
        listed.contains(&"echo".to_owned()) && !listed.contains(&"reset".to_owned()),
        "{listed:?}"
    );
    let body = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
                      "params": {"name": "reset", "arguments": {}}});
    let resp = Client::send(user.post(&body)).await;
    assert_eq!(resp.status(), 403);
    let challenge = challenge_of(&resp);
    assert!(
        challenge.contains("error=\"insufficient_scope\""),
        "{challenge}"
    );
    assert!(challenge.contains("scope=\"admin\""), "{challenge}");

    // Prompts likewise, and a completion of a prompt's argument needs the prompt's scopes.
    let prompts = user.ask("prompts/list", json!({})).await;
    assert_eq!(
        prompts["result"]["prompts"].as_array().map(Vec::len),
        Some(1),
        "{prompts}"
    );
    assert_eq!(prompts["result"]["prompts"][0]["name"], "hello");
    let complete = |name: &str, id: i64| {
        json!({"jsonrpc": "2.0", "id": id, "method": "completion/complete",
               "params": {"ref": {"type": "ref/prompt", "name": name},
                          "argument": {"name": "who", "value": "a"}}})
    };
    assert_eq!(
        Client::send(user.post(&complete("audit", 6)))
            .await
            .status(),
        403
    );
    assert_eq!(
        Client::send(user.post(&complete("hello", 7)))
            .await
            .status(),
        200
    );

    let admin = session(&server.url, &issuer.token(AUDIENCE, "a", "mcp admin")).await;
    assert!(names(admin.ask("tools/list", json!({})).await).contains(&"reset".to_owned()));
    assert_eq!(call(&admin, "reset").await, "reset");
    let prompts = admin.ask("prompts/list", json!({})).await;
    assert_eq!(
        prompts["result"]["prompts"].as_array().map(Vec::len),
        Some(2),
        "{prompts}"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn required_scopes_apply_to_every_request_and_a_token_in_the_query_is_refused() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |c| c.auth.required_scopes = vec!["mcp".into()]).await;
    let (status, challenge) =
        try_initialize(&server.url, Some(&issuer.token(AUDIENCE, "u", "read"))).await;
    assert_eq!(status, 403);
    assert!(challenge.contains("scope=\"mcp\""), "{challenge}");
    // Even a valid token is refused in the query string, where proxies log it.
    let token = issuer.token(AUDIENCE, "u", "mcp");
    let resp = Client::send(
        reqwest::Client::new()
            .post(format!("{}?access_token={token}", server.url))
            .header("content-type", "application/json")
            .header("accept", common::ACCEPT_BOTH)
            .body(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string()),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert_eq!(try_initialize(&server.url, Some(&token)).await.0, 200);
    server.shutdown().await;
}

/// Stateless clients declaring the tasks extension, as alice and as bob.
fn stateless_pair(issuer: &Issuer, server: &TestServer) -> (Stateless, Stateless) {
    let alice = Stateless::new(&server.url)
        .with_tasks()
        .with_token(&issuer.token(AUDIENCE, "alice", "mcp"));
    let bob = alice
        .clone()
        .with_token(&issuer.token(AUDIENCE, "bob", "mcp"));
    (alice, bob)
}

#[tokio::test]
async fn a_task_answers_only_the_principal_that_created_it() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let (alice, bob) = stateless_pair(&issuer, &server);
    let id = alice.start_task("wait", json!({})).await;
    assert_eq!(alice.task(&id).await.result()["status"], "working");
    // Bob gets exactly what an unknown id gets.
    let unknown = bob.task("0123456789abcdef0123456789abcdef").await;
    let foreign = bob.task(&id).await;
    assert_eq!(foreign.error_code(), unknown.error_code());
    assert_eq!(foreign.status, unknown.status);
    let cancel = bob.ask("tasks/cancel", json!({"taskId": id})).await;
    assert_eq!(cancel.error_code(), unknown.error_code());
    assert_eq!(alice.task(&id).await.result()["status"], "working");
    alice.ask("tasks/cancel", json!({"taskId": id})).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_listen_stream_is_never_told_of_another_principals_task() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let (alice, bob) = stateless_pair(&issuer, &server);
    let hers = alice.start_task("wait", json!({})).await;
    let his = bob.start_task("wait", json!({})).await;
    // Bob names both tasks; alice's ends first, then his. The hub delivers in order, so
    // had alice's change reached his stream it would come before his own.
    let (mut stream, _) = bob.listen(json!({"taskIds": [hers, his]})).await;
    alice.ask("tasks/cancel", json!({"taskId": hers})).await;
    alice.until_status(&hers, "cancelled").await;
    bob.ask("tasks/cancel", json!({"taskId": his})).await;
    let note = stream.next_json().await;
    assert_eq!(note["method"], "notifications/tasks");
    assert_eq!(note["params"]["taskId"], his.as_str(), "{note}");
    server.shutdown().await;
}

#[tokio::test]
async fn each_principal_has_its_own_session_and_request_caps() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |c| {
        c.auth.max_sessions_per_principal = 2;
        c.auth.max_requests_per_principal = 1;
    })
    .await;
    let token = issuer.token(AUDIENCE, "alice", "mcp");
    let first = session(&server.url, &token).await;
    let second = session(&server.url, &token).await;
    let bob = session(&server.url, &issuer.token(AUDIENCE, "bob", "mcp")).await;
    // A third session of alice's ends her least recently used idle one, not bob's.
    let third = session(&server.url, &token).await;
    let resp =
        Client::send(first.post(&json!({"jsonrpc": "2.0", "id": 9, "method": "ping"}))).await;
    assert_eq!(resp.status(), 404, "alice's oldest idle session made room");
    assert_eq!(call_text(&second).await, "hi");
    assert_eq!(call_text(&bob).await, "hi");

    // One request of alice's running (its stream open): her next one waits its turn.
    let mut running = third
        .call_stream(
            "stream_events",
            json!({"count": 1000, "interval_ms": 5}),
            None,
        )
        .await;
    within("the call to start", running.next_event()).await;
    let resp =
        Client::send(second.post(&json!({"jsonrpc": "2.0", "id": 10, "method": "ping"}))).await;
    assert_eq!(resp.status(), 429);
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(call_text(&bob).await, "hi", "bob is not held back by alice");
    drop(running);
    eventually("alice's slot to be free again", || async {
        let resp =
            Client::send(second.post(&json!({"jsonrpc": "2.0", "id": 11, "method": "ping"}))).await;
        (resp.status() == 200).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn opaque_tokens_are_introspected_and_the_answer_is_kept_briefly() {
    let issuer = Issuer::start().await;
    let introspect = format!("{}/introspect", issuer.url);
    let server = start(&issuer, move |c| {
        c.auth.introspection_url = introspect;
        c.auth.introspection_client_id = "rs".into();
        c.auth.introspection_client_secret = "secret".into();
    })
    .await;
    issuer.opaque(
        "opaque-alice",
        json!({"active": true, "sub": "alice", "scope": "mcp", "aud": AUDIENCE,
               "exp": now() + 300}),
    );
    issuer.opaque(
        "opaque-other",
        json!({"active": true, "sub": "eve", "aud": "http://other.test/mcp"}),
    );
    let alice = session(&server.url, "opaque-alice").await;
    assert_eq!(call(&alice, "whoami").await, "alice mcp");
    let seen = issuer.introspections();
    assert_eq!(call_text(&alice).await, "hi");
    assert_eq!(
        issuer.introspections(),
        seen,
        "cached: no new introspection"
    );
    for token in ["opaque-other", "opaque-unknown"] {
        assert_eq!(
            try_initialize(&server.url, Some(token)).await.0,
            401,
            "{token}"
        );
    }
    server.shutdown().await;
}

/// `[auth]` with opaque tokens introspected at the stand-in.
fn introspected(issuer: &Issuer) -> impl FnOnce(&mut Config) + Clone + 'static {
    let url = format!("{}/introspect", issuer.url);
    move |c: &mut Config| c.auth.introspection_url = url
}

/// An active introspection answer for alice with `changes` applied (`null` removes).
fn active(changes: Value) -> Value {
    let mut answer = json!({"active": true, "sub": "alice", "scope": "mcp", "aud": AUDIENCE,
                            "exp": now() + 300});
    if let (Some(answer), Some(changes)) = (answer.as_object_mut(), changes.as_object()) {
        for (key, value) in changes {
            match value {
                Value::Null => answer.remove(key),
                value => answer.insert(key.clone(), value.clone()),
            };
        }
    }
    answer
}

#[tokio::test]
async fn an_introspected_token_must_name_this_resource_be_valid_already_and_be_an_access_token() {
    // Issue 22, finding 5: an active answer without `aud`, before its `nbf`, or of a
    // refresh token was accepted.
    let issuer = Issuer::start().await;
    let server = start(&issuer, introspected(&issuer)).await;
    let t = now();
    let cases = [
        ("no-aud", json!({"aud": null}), 401),
        ("early", json!({"nbf": t + 120}), 401),
        ("refresh", json!({"token_type": "refresh_token"}), 401),
        ("dpop", json!({"token_type": "DPoP"}), 401),
        ("lately", json!({"nbf": t + 10}), 200),
        ("bearer", json!({"token_type": "Bearer"}), 200),
        ("access", json!({"token_type": "access_token"}), 200),
        (
            "listed",
            json!({"aud": ["http://other.test", AUDIENCE]}),
            200,
        ),
    ];
    for (token, changes, _) in &cases {
        issuer.opaque(token, active(changes.clone()));
    }
    for (token, _, status) in cases {
        let (got, challenge) = try_initialize(&server.url, Some(token)).await;
        assert_eq!(got, status, "{token}");
        if status == 401 {
            assert!(challenge.contains("invalid_token"), "{token}: {challenge}");
        }
    }
    server.shutdown().await;

    // An authorization server that never names an audience: allowed by configuration,
    // but one naming another resource is still refused.
    let lenient = introspected(&issuer);
    let server = start(&issuer, move |c| {
        lenient(c);
        c.auth.introspection_require_aud = false;
    })
    .await;
    issuer.opaque("other-aud", active(json!({"aud": "http://other.test/mcp"})));
    assert_eq!(try_initialize(&server.url, Some("no-aud")).await.0, 200);
    assert_eq!(try_initialize(&server.url, Some("other-aud")).await.0, 401);
    server.shutdown().await;
}

#[tokio::test]
async fn refused_tokens_are_remembered_and_introspections_in_flight_are_bounded() {
    // Issue 22, finding 5: every bogus token cost an introspection, every time, with no
    // bound on how many ran at once.
    let issuer = Issuer::start().await;
    let on = introspected(&issuer);
    let server = start(&issuer, move |c| {
        on(c);
        // Held answers must not time out while the test fills the slots.
        c.auth.fetch_timeout = NonZeroDuration::from_secs(60);
    })
    .await;
    let bogus: Vec<String> = (0..20).map(|n| format!("bogus-{n}")).collect();
    let before = issuer.introspections();
    for token in &bogus {
        assert_eq!(try_initialize(&server.url, Some(token)).await.0, 401);
    }
    let asked = issuer.introspections() - before;
    assert!(asked <= bogus.len(), "{asked} introspections");
    for token in &bogus {
        assert_eq!(try_initialize(&server.url, Some(token)).await.0, 401);
    }
    assert_eq!(
        issuer.introspections() - before,
        asked,
        "a refusal is remembered for auth.introspection_negative_ttl"
    );

    // 16 (the default) introspections held at the authorization server: the 17th token
    // is not sent there but answered 503 with Retry-After at once.
    issuer.open_introspection(false);
    let before = issuer.introspections();
    let held: Vec<_> = (0..16)
        .map(|n| {
            let url = server.url.clone();
            tokio::spawn(async move { try_initialize(&url, Some(&format!("held-{n}"))).await })
        })
        .collect();
    eventually("16 introspections to be waiting", || async {
        (issuer.introspections() - before == 16).then_some(())
    })
    .await;
    let resp = initialize(&server.url, Some("one-too-many")).await;
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(
        challenge_of(&resp),
        "",
        "not the token's fault: no challenge"
    );
    assert_eq!(
        issuer.introspections() - before,
        16,
        "the 17th was not sent"
    );
    issuer.open_introspection(true);
    for waiting in held {
        let (status, _) = within("a held introspection", waiting)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status, 401);
    }
    // The refused one was not remembered: it is introspected once a slot is free.
    assert_eq!(
        try_initialize(&server.url, Some("one-too-many")).await.0,
        401
    );
    assert_eq!(issuer.introspections() - before, 17);
    server.shutdown().await;
}

#[tokio::test]
async fn an_address_refused_too_often_gets_429_before_its_token_is_checked() {
    // Issue 22, finding 5: nothing stopped one address trying token after token.
    let issuer = Issuer::start().await;
    let on = introspected(&issuer);
    let server = start(&issuer, move |c| {
        on(c);
        c.auth.max_failures_per_client = 3;
    })
    .await;
    issuer.opaque("good", active(json!({})));
    assert_eq!(try_initialize(&server.url, Some("good")).await.0, 200);
    // A request without any token is OAuth discovery, not a failure (issue 36, finding 3).
    for _ in 0..5 {
        assert_eq!(try_initialize(&server.url, None).await.0, 401);
    }
    for n in 0..3 {
        let token = format!("guess-{n}");
        assert_eq!(try_initialize(&server.url, Some(&token)).await.0, 401);
    }
    let introspections = issuer.introspections();
    let jwks = issuer.jwks_fetches();
    let fresh = issuer.token(AUDIENCE, "alice", "mcp");
    for token in ["good", "guess-9", fresh.as_str()] {
        let resp = initialize(&server.url, Some(token)).await;
        assert_eq!(resp.status(), 429, "{token}");
        let retry = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        assert!(retry.is_some_and(|s| (1..=60).contains(&s)), "{retry:?}");
    }
    assert_eq!(
        issuer.introspections(),
        introspections,
        "no token was checked"
    );
    assert_eq!(issuer.jwks_fetches(), jwks, "no token was checked");
    server.shutdown().await;
}

/// Issue 36, finding 3: behind the recommended nginx every TCP peer is nginx, so the
/// failure count was everybody's. With nginx trusted (`server.trusted_proxies`) and its
/// `X-Forwarded-For` read, one client (127.0.0.2) flooding bad tokens is refused alone:
/// another (127.0.0.3) is still served, also after many requests without a token.
#[tokio::test]
#[ignore = "needs nginx; ./scripts/test runs it"]
async fn behind_nginx_one_client_flooding_bad_tokens_locks_out_only_itself() {
    let issuer = Issuer::start().await;
    let server = start(&issuer, |c| {
        c.auth.max_failures_per_client = 5;
        c.server.trusted_proxies = vec!["127.0.0.1/32".parse().unwrap_or_else(|e| panic!("{e}"))];
    })
    .await;
    let port = server
        .url
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next());
    let port: u16 = port
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{}", server.url));
    let nginx = common::nginx::Nginx::start(&[port]).await;
    let from = |last: u8| {
        reqwest::Client::builder()
            .local_address(std::net::IpAddr::from([127, 0, 0, last]))
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    };
    let (attacker, user) = (from(2), from(3));
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let post = |http: &reqwest::Client, token: Option<&str>| {
        let mut req = http
            .post(&nginx.url)
            .header("accept", common::ACCEPT_BOTH)
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        async move { Client::send(req).await.status().as_u16() }
    };
    let good = issuer.token(AUDIENCE, "alice", "mcp");
    assert_eq!(post(&user, Some(&good)).await, 200, "served through nginx");
    // The user's discovery requests count for nothing.
    for _ in 0..8 {
        assert_eq!(post(&user, None).await, 401);
    }
    let mut statuses = Vec::new();
    for n in 0..8 {
        statuses.push(post(&attacker, Some(&format!("bogus-{n}"))).await);
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429, 429]);
    assert_eq!(
        post(&attacker, Some(&good)).await,
        429,
        "the flooder is refused"
    );
    assert_eq!(
        post(&user, Some(&good)).await,
        200,
        "the other client is served"
    );
    drop(nginx);
    server.shutdown().await;
}

/// The JSON-RPC error message of a refusal's body.
async fn refusal_message(resp: reqwest::Response) -> String {
    let body = resp.text().await.unwrap_or_default();
    let value: Value = serde_json::from_str(&body).unwrap_or_default();
    value["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {body}"))
        .to_owned()
}

#[tokio::test]
async fn a_503_names_neither_the_authorization_servers_address_nor_the_fetch_error() {
    // Issue 22, finding 9: the 503 body showed the JWKS or introspection URL and the
    // connection error.
    let issuer = Issuer::start().await;
    // A port nothing listens on.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .and_then(|l| l.local_addr())
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let server = start(&issuer, move |c| {
        c.auth.jwks_url = format!("http://{dead}/jwks");
        c.auth.introspection_url = format!("http://{dead}/introspect");
    })
    .await;
    let jwt = issuer.token(AUDIENCE, "alice", "mcp");
    for token in [jwt.as_str(), "opaque-token"] {
        let resp = initialize(&server.url, Some(token)).await;
        assert_eq!(resp.status(), 503, "{token}");
        let message = refusal_message(resp).await;
        assert_eq!(
            message, "Unauthorized: the authorization server is unavailable",
            "{token}"
        );
    }
    server.shutdown().await;
}

#[tokio::test]
async fn a_key_whose_alg_is_unreadable_verifies_no_token() {
    // Issue 22, finding 9: a JWK whose `alg` did not parse was taken as a key for any
    // algorithm.
    let issuer = Issuer::start().await;
    let odd = fixture_key("rsa-odd", "odd-1");
    let mut jwk = serde_json::to_value(jwk_of(&odd)).unwrap_or_default();
    jwk["alg"] = json!("bogus");
    issuer.publish_raw(jwk);
    let server = start(&issuer, |_| {}).await;
    let token = Issuer::sign(&odd, &issuer.claims(AUDIENCE, "mallory", "mcp"));
    let (status, challenge) = try_initialize(&server.url, Some(&token)).await;
    assert_eq!(status, 401);
    assert!(challenge.contains("invalid_token"), "{challenge}");
    // The rest of the JWKS was read: the issuer's own keys still verify.
    let good = issuer.token(AUDIENCE, "alice", "mcp");
    assert_eq!(try_initialize(&server.url, Some(&good)).await.0, 200);
    server.shutdown().await;
}

#[tokio::test]
async fn keys_stop_verifying_once_the_issuer_has_been_away_longer_than_jwks_max_stale() {
    // Issue 22, finding 9: keys fetched once verified for ever while fetches failed.
    let issuer = Issuer::start().await;
    let max_stale = Duration::from_millis(1500);
    let server = start(&issuer, move |c| {
        c.auth.jwks_max_age = NonZeroDuration::from_millis(100);
        c.auth.jwks_min_refresh = NonZeroDuration::from_millis(50);
        c.auth.jwks_max_stale = max_stale;
    })
    .await;
    let token = issuer.token(AUDIENCE, "alice", "mcp");
    // The keys are fetched during this request, so no earlier than now.
    let start = Instant::now();
    assert_eq!(try_initialize(&server.url, Some(&token)).await.0, 200);
    issuer.fail_jwks(true);
    let fetches = issuer.jwks_fetches();
    // Once a fetch has failed, the keys fetched before still verify (while not stale).
    let (status, when) = eventually("a fetch of the keys to fail", || async {
        let status = try_initialize(&server.url, Some(&token)).await.0;
        (issuer.jwks_fetches() > fetches).then(|| (status, start.elapsed()))
    })
    .await;
    if when < max_stale {
        assert_eq!(status, 200, "old keys within jwks_max_stale");
    }
    let resp = eventually("the stale keys to be refused", || async {
        let resp = initialize(&server.url, Some(&token)).await;
        (resp.status() == 503).then_some(resp)
    })
    .await;
    assert!(
        start.elapsed() >= max_stale,
        "refused before jwks_max_stale"
    );
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(
        refusal_message(resp).await,
        "Unauthorized: the authorization server is unavailable"
    );
    // The issuer back: its keys are fetched again and verify.
    issuer.fail_jwks(false);
    eventually("the keys to be fetched again", || async {
        (try_initialize(&server.url, Some(&token)).await.0 == 200).then_some(())
    })
    .await;
    server.shutdown().await;
}

#[tokio::test]
async fn with_bind_to_client_one_apps_sessions_and_tasks_are_invisible_to_another() {
    // Issue 22, finding 9: the owner was (issuer, subject) only, so every client app of a
    // user saw the others' sessions and tasks.
    let issuer = Issuer::start().await;
    let of_app = |app: &str| {
        let mut claims = issuer.claims(AUDIENCE, "alice", "mcp");
        claims.insert("client_id".into(), json!(app));
        Issuer::sign(&issuer.rsa, &claims)
    };
    let (one, two) = (of_app("app-1"), of_app("app-2"));

    // By default both apps are alice: the second may use the first's session.
    let server = start(&issuer, |_| {}).await;
    let first = session(&server.url, &one).await;
    let mut second = Client::new(&server.url).with_token(&two);
    second.session = first.session.clone();
    assert_eq!(call_text(&second).await, "hi");
    server.shutdown().await;

    let server = start(&issuer, |c| c.auth.bind_to_client = true).await;
    let first = session(&server.url, &one).await;
    let event = first_event_id(&first).await;
    let second = Client::new(&server.url).with_token(&two);
    bob_cannot_use_alices_session(&first, second, &event).await;
    let app1 = Stateless::new(&server.url).with_tasks().with_token(&one);
    let app2 = app1.clone().with_token(&two);
    let id = app1.start_task("wait", json!({})).await;
    let unknown = app2.task("0123456789abcdef0123456789abcdef").await;
    let foreign = app2.task(&id).await;
    assert_eq!(foreign.error_code(), unknown.error_code());
    assert_eq!(app1.task(&id).await.result()["status"], "working");
    app1.ask("tasks/cancel", json!({"taskId": id})).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_listen_stream_is_told_only_of_the_resources_its_scopes_allow() {
    // Issue 22, finding 7: `resourceSubscriptions` of subscriptions/listen were honoured
    // without the resource's scopes, which resources/subscribe checks.
    let issuer = Issuer::start().await;
    let server = start(&issuer, |_| {}).await;
    let user_token = issuer.token(AUDIENCE, "u", "mcp");
    // resources/subscribe refuses the protected URI...
    let user_session = session(&server.url, &user_token).await;
    let subscribe = json!({"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
                           "params": {"uri": "mem://secret"}});
    assert_eq!(
        Client::send(user_session.post(&subscribe)).await.status(),
        403
    );
    // ...and listen leaves it out, as it does a URI the server does not have.
    let user = Stateless::new(&server.url).with_token(&user_token);
    let admin = user
        .clone()
        .with_token(&issuer.token(AUDIENCE, "a", "mcp admin"));
    let asked = json!({"resourceSubscriptions": ["mem://secret", "mem://open", "mem://none"]});
    let (mut users, ack) = user.listen(asked.clone()).await;
    assert_eq!(
        ack["notifications"]["resourceSubscriptions"],
        json!(["mem://open"])
    );
    let (mut admins, ack) = admin.listen(asked).await;
    let mut acknowledged: Vec<String> =
        serde_json::from_value(ack["notifications"]["resourceSubscriptions"].clone())
            .unwrap_or_default();
    acknowledged.sort();
    assert_eq!(acknowledged, ["mem://open", "mem://secret"]);
    // The secret changes, then the open one. Changes arrive in order: had the secret's
    // reached the user's stream, it would come first.
    for uri in ["mem://secret", "mem://open"] {
        let _ = server.app.notify_resource_updated(uri).await;
    }
    let note = users.next_json().await;
    assert_eq!(note["method"], "notifications/resources/updated");
    assert_eq!(note["params"]["uri"], "mem://open", "{note}");
    for uri in ["mem://secret", "mem://open"] {
        let note = admins.next_json().await;
        assert_eq!(note["params"]["uri"], uri, "{note}");
    }
    server.shutdown().await;
}

/// Issue 36, finding 9: handover and in-flight entries in Redis held the whole principal
/// with every claim for up to a day, and a handed-on call ran again without its token's
/// expiry checked. Replicas A (a 200 ms drain) and B on one Redis, each on `[auth]`
/// with no leeway, serving `stream_events` and `slow_whoami`, both re-runnable.
struct HandedOn {
    issuer: Issuer,
    // Dropped last: the replicas go first.
    a: Option<TestServer>,
    b: TestServer,
    redis: RedisServer,
}

impl HandedOn {
    async fn start() -> Self {
        let issuer = Issuer::start().await;
        let redis = RedisServer::start();
        let url = redis.url();
        let on = auth_on(&issuer);
        let replica = move |c: &mut Config| {
            on(c);
            c.auth.leeway = Duration::ZERO;
            c.store.backend = BackendKind::Redis;
            c.store.redis_url = url.clone().into();
            c.store.lease_ttl = NonZeroDuration::from_secs(1);
        };
        let draining = replica.clone();
        let a = TestServer::start_with(
            move |c| {
                draining(c);
                c.server.shutdown_timeout = Duration::from_millis(200);
            },
            rerunnable_server(),
        )
        .await;
        let b = TestServer::start_with(replica, rerunnable_server()).await;
        Self {
            issuer,
            a: Some(a),
            b,
            redis,
        }
    }

    /// A token of alice (scope `mcp`) living `ttl` seconds, with a claim nobody needs
    /// again: her e-mail address.
    fn token(&self, ttl: u64) -> String {
        let mut claims = self.issuer.claims(AUDIENCE, "alice", "mcp");
        claims.insert("exp".into(), json!(now() + ttl));
        claims.insert("email".into(), json!("secret@x"));
        Issuer::sign(&self.issuer.rsa, &claims)
    }

    async fn inflight_entries(&self) -> Vec<String> {
        inflight_entries(&self.redis).await
    }

    /// Stops A (SIGTERM's path: its drain ends before the call does, which it leaves
    /// behind), then resumes `client`'s call on B with `token` from the last event id in
    /// `t`, reading until the answer (or, unless `to_the_end`, the note that the call
    /// runs again).
    async fn stop_a_and_resume_on_b(
        &mut self,
        client: &Client,
        reader: &mut SseReader,
        t: &mut Transcript,
        token: &str,
        to_the_end: bool,
    ) {
        if let Some(a) = self.a.take() {
            a.shutdown().await;
        }
        for f in within("A's stream to end", reader.rest()).await {
            t.add(&f);
        }
        let last = t.ids.last().cloned().unwrap_or_else(|| panic!("no ids"));
        let mut on_b = client.clone().with_token(token);
        on_b.url = self.b.url.clone();
        let mut resumed = on_b.resume(&last).await;
        within("the answer from B", async {
            while let Some(f) = resumed.next_event().await {
                if t.add(&f) || (!to_the_end && t.runs(HANDED_ON_NOTE).len() > 1) {
                    return;
                }
            }
        })
        .await;
    }
}

/// Every value of every in-flight table in `redis`, as stored.
async fn inflight_entries(redis: &RedisServer) -> Vec<String> {
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let tables: Vec<String> = redis::cmd("KEYS")
        .arg("*inflight*")
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut values = Vec::new();
    for table in tables {
        let entries: Vec<(String, String)> = redis::cmd("HGETALL")
            .arg(&table)
            .query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        values.extend(entries.into_iter().map(|(_, v)| v));
    }
    values
}

/// `stream_events`, and `slow_whoami(count)`: `count` progress events 25 ms apart, then
/// the subject, scopes and claim names of the principal it runs as.
fn rerunnable_server() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools.register(stream_events()).register(
        tool(
            "slow_whoami",
            |arguments: serde_json::Map<String, Value>, ctx| async move {
                let count = arguments.get("count").and_then(Value::as_u64).unwrap_or(1);
                for i in 1..=count {
                    ctx.progress(i as f64, Some(count as f64), None).await?;
                    tokio::time::sleep(Duration::from_millis(25)).await;
                }
                let who = ctx.principal().map(|p| {
                    let mut claims: Vec<&str> = p.claims.keys().map(String::as_str).collect();
                    claims.sort_unstable();
                    format!("{} {} {}", p.subject, p.scopes.join(","), claims.join(","))
                });
                Ok::<_, otpmcp::handler::ToolError>(CallToolResult::text(who.unwrap_or_default()))
            },
        )
        .description("Streams, then says who is calling.")
        .rerunnable(),
    );
    McpServer::new(tools)
}

/// A call of `tool` with `count` events on `client`'s replica, read until two progress
/// values have arrived.
async fn call_under_way(client: &mut Client, tool: &str, count: u64) -> (SseReader, Transcript) {
    client.initialize().await;
    let args = json!({"count": count, "interval_ms": 25});
    let mut reader = client.call_stream(tool, args, Some("t")).await;
    let mut t = Transcript::default();
    while t.progress.len() < 2 {
        let frame = within("progress", reader.next()).await;
        t.add(&frame.unwrap_or_else(|| panic!("stream ended early")));
    }
    (reader, t)
}

#[tokio::test]
async fn a_handed_on_call_keeps_only_its_owner_scopes_and_expiry_in_redis_and_runs_again() {
    let mut pair = HandedOn::start().await;
    let token = pair.token(300);
    let mut client =
        Client::new(&pair.a.as_ref().map(|a| a.url.clone()).unwrap_or_default()).with_token(&token);
    let (mut reader, mut t) = call_under_way(&mut client, "slow_whoami", 40).await;

    // What Redis holds for the running call: what it takes to run it again as alice.
    let entries = pair.inflight_entries().await;
    let entry = entries
        .iter()
        .find(|e| e.contains("slow_whoami"))
        .unwrap_or_else(|| panic!("no in-flight entry of the call: {entries:?}"));
    for dropped in ["secret@x", "email", "aud", "iat", "claims", AUDIENCE] {
        assert!(!entry.contains(dropped), "{dropped} is not kept: {entry}");
    }
    for kept in ["\"alice\"", "\"mcp\"", &pair.issuer.url, "expires_at"] {
        assert!(entry.contains(kept), "{kept} is kept: {entry}");
    }

    pair.stop_a_and_resume_on_b(&client, &mut reader, &mut t, &token, true)
        .await;
    assert_eq!(t.runs(HANDED_ON_NOTE).len(), 2, "run again: {:?}", t.notes);
    assert_eq!(
        t.result_text().as_deref(),
        Some("alice mcp client_id,exp,iss,scope,sub"),
        "the run again sees alice and her scopes, and only the claims kept"
    );
}

#[tokio::test]
async fn a_handed_on_call_whose_token_has_expired_is_not_run_again() {
    let mut pair = HandedOn::start().await;
    // Long enough to start the call on a loaded machine.
    let ttl = 5;
    let expiring = pair.token(ttl);
    let expires = now() + ttl;
    let mut client = Client::new(&pair.a.as_ref().map(|a| a.url.clone()).unwrap_or_default())
        .with_token(&expiring);
    // Runs 10 s, well past the token's expiry.
    let (mut reader, mut t) = call_under_way(&mut client, "stream_events", 400).await;
    eventually("the token to expire", || async {
        (now() > expires).then_some(())
    })
    .await;

    // The client has refreshed its token by the time it resumes.
    let fresh = pair.token(300);
    pair.stop_a_and_resume_on_b(&client, &mut reader, &mut t, &fresh, false)
        .await;
    assert_eq!(
        t.runs(HANDED_ON_NOTE).len(),
        1,
        "not run again: {:?}",
        t.notes
    );
    let Some(response) = t.response else {
        panic!("no answer on B");
    };
    assert_eq!(
        response["error"]["message"], RESTARTED_MESSAGE,
        "{response}"
    );
    assert_eq!(response["error"]["data"]["retryable"], true, "{response}");
}

/// Issue 36, finding 10: `otpmcp config check` (and start-up, which loads alike) refuses
/// an identity provider reached over plain http off loopback, naming the key; on
/// loopback, as the stand-in issuer of these tests is, it is accepted.
#[test]
fn config_check_refuses_plain_http_to_the_identity_provider_but_on_loopback() {
    let dir = std::env::temp_dir().join(format!("otpmcp-auth-https-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let check = |name: &str, lines: &str| {
        let file = dir.join(name);
        let text =
            format!("[auth]\nenabled = true\naudience = \"https://mcp.example/mcp\"\n{lines}\n");
        std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_otpmcp"))
            .args(["config", "check"])
            .arg(&file)
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("run: {e}"));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.code(), stderr)
    };
    let refused = [
        (
            "jwks.toml",
            "issuer = \"https://as.example\"\njwks_url = \"http://as.example/keys\"",
            "auth.jwks_url",
        ),
        (
            "introspection.toml",
            "issuer = \"https://as.example\"\nintrospection_url = \"http://10.1.2.3/introspect\"",
            "auth.introspection_url",
        ),
        (
            "metadata.toml",
            "issuer = \"http://as.example/realms/mcp\"",
            "auth.issuer",
        ),
    ];
    for (name, lines, key) in refused {
        let (code, stderr) = check(name, lines);
        assert_eq!(code, Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(key) && stderr.contains("https"),
            "{name}: {stderr:?} should name {key}"
        );
    }
    let loopback = "issuer = \"http://127.0.0.1:8080\"\nintrospection_url = \"http://localhost:8080/introspect\"\njwks_url = \"http://[::1]:8080/keys\"";
    let (code, stderr) = check("loopback.toml", loopback);
    assert_eq!(code, Some(0), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An introspection answer need not name `exp`: it is trusted for
/// `auth.introspection_cache`, and a handed-on call's run again no longer after the call
/// began.
#[tokio::test]
async fn a_handed_on_call_of_a_token_introspected_without_exp_expires_with_the_answers_trust() {
    let issuer = Issuer::start().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let introspect = introspected(&issuer);
    let server = start(&issuer, move |c| {
        introspect(c);
        c.auth.introspection_cache = NonZeroDuration::from_secs(40);
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
    })
    .await;
    issuer.opaque("opaque-carol", active(json!({"sub": "carol", "exp": null})));
    let mut client = Client::new(&server.url).with_token("opaque-carol");
    let before = now();
    let (_reader, _) = call_under_way(&mut client, "stream_events", 400).await;
    let entries = inflight_entries(&redis).await;
    let entry = entries
        .iter()
        .find(|e| e.contains("stream_events"))
        .unwrap_or_else(|| panic!("no in-flight entry of the call: {entries:?}"));
    let value: Value = serde_json::from_str(entry).unwrap_or_default();
    let principal = &value["handover"]["principal"];
    assert_eq!(principal["subject"], "carol", "{entry}");
    let expires = principal["expires_at"].as_u64().unwrap_or_default();
    assert!(
        (before + 40..=now() + 40).contains(&expires),
        "expires {expires}, the call began at {before}: {entry}"
    );
    server.shutdown().await;
}

/// A task record of a re-runnable tool keeps its caller to run it again: in Redis, for
/// the task's ttl, with the owner, scopes and expiry only, not every claim.
#[tokio::test]
async fn a_task_record_in_redis_keeps_only_its_callers_owner_scopes_and_expiry() {
    let issuer = Issuer::start().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let server = start(&issuer, move |c| {
        c.store.backend = BackendKind::Redis;
        c.store.redis_url = url.into();
    })
    .await;
    let mut claims = issuer.claims(AUDIENCE, "alice", "mcp");
    claims.insert("email".into(), json!("secret@x"));
    let token = Issuer::sign(&issuer.rsa, &claims);
    let alice = Stateless::new(&server.url).with_tasks().with_token(&token);
    let id = alice
        .start_task("stream_events", json!({"count": 400, "interval_ms": 25}))
        .await;
    let client = redis::Client::open(redis.url()).unwrap_or_else(|e| panic!("{e}"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let record: String = redis::cmd("GET")
        .arg(format!("otpmcp:task:{id}"))
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    for dropped in ["secret@x", "email", "claims", AUDIENCE] {
        assert!(!record.contains(dropped), "{dropped} is not kept: {record}");
    }
    for kept in ["\"alice\"", "expires_at", "stream_events"] {
        assert!(record.contains(kept), "{kept} is kept: {record}");
    }
    alice.ask("tasks/cancel", json!({"taskId": id})).await;
    server.shutdown().await;
}
