//! `[auth]`: otpmcp as an OAuth 2.1 resource server. A stand-in authorization server on
//! loopback serves keys made by openssl (RSA and EC); the tests mint real tokens with them
//! and check what a request with each gets: the principal a handler sees, 401 and 403
//! with their challenges, key rotation, sessions and tasks bound to their principal (on
//! one server and across replicas on Redis), scopes, per-principal caps, introspection.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::issuer::{Issuer, make_key, now};
use common::redis::RedisServer;
use common::stateless::{Stateless, wait_tool};
use common::{Client, SseReader, TestServer, eventually, within};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use otpmcp::McpServer;
use otpmcp::config::{BackendKind, Config};

use otpmcp::handler::builtin::{Echo, StreamEvents};
use otpmcp::handler::tools::tool_fn;
use otpmcp::handler::{PromptRegistry, ToolRegistry};
use otpmcp::protocol::methods::{
    CallToolResult, GetPromptResult, PromptArgument, PromptDefinition,
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
    }
}

/// `echo`, `stream_events`, `whoami` (the principal a handler sees) and `reset`, which
/// needs scope `admin`.
fn server() -> McpServer {
    let mut tools = ToolRegistry::default();
    tools
        .register(Echo)
        .register(StreamEvents)
        .register(tool_fn(
            "whoami",
            "Who is calling.",
            json!({"type": "object"}),
            |_, ctx| async move {
                let who = ctx
                    .principal()
                    .map(|p| format!("{} {}", p.subject, p.scopes.join(",")));
                Ok(CallToolResult::text(who.unwrap_or_default()))
            },
        ))
        .register(tool_fn(
            "reset",
            "Needs admin.",
            json!({"type": "object"}),
            |_, _| async { Ok(CallToolResult::text("reset")) },
        ))
        .register(wait_tool(Arc::default()))
        .require_scopes("reset", ["admin"]);
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
    McpServer::new(tools)
        .with_prompts(prompts)
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
    let mut client = Client::new(url);
    if let Some(token) = token {
        client = client.with_token(token);
    }
    let body = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                   "clientInfo": {"name": "t", "version": "0"}}
    });
    let resp = Client::send(client.post(&body)).await;
    (resp.status().as_u16(), challenge_of(&resp))
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
    let forger = make_key("rsa-1", Algorithm::RS256);
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
    let min_refresh = Duration::from_millis(300);
    let server = start(&issuer, move |c| c.auth.jwks_min_refresh = min_refresh).await;
    let first = issuer.token(AUDIENCE, "alice", "mcp");
    assert_eq!(try_initialize(&server.url, Some(&first)).await.0, 200);
    assert_eq!(issuer.jwks_fetches(), 1);

    // The issuer rotates: a token signed with the new key is accepted once the keys are
    // fetched again (at most every jwks_min_refresh).
    let next = make_key("rsa-2", Algorithm::RS256);
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
        let stranger = make_key(&format!("unknown-{n}"), Algorithm::ES256);
        let token = Issuer::sign(&stranger, &issuer.claims(AUDIENCE, "x", "mcp"));
        assert_eq!(try_initialize(&server.url, Some(&token)).await.0, 401);
    }
    let intervals = started.elapsed().as_millis() / min_refresh.as_millis() + 1;
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
        c.store.redis_url = url.clone();
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
