//! Redis over TLS and with ACL users, as an operator meets them at start-up: the binary
//! on a TLS-only Redis trusting a CA file answers calls, one trusting the wrong CA exits
//! with an error that names the key and the server but no credentials, and an ACL user
//! works in clear too. (The store's contract over TLS: tests/store_contract.rs; a
//! replica failover over TLS: tests/replica_failover.rs.)

mod common;

use common::redis::{Certs, RedisServer, SENTINEL_SERVICE, Secured, Sentinel};
use common::{Binary, Client, TestServer, within};
use otpmcp::config::BackendKind;

/// The binary with the shipped `config/redis.toml` overlay and `env` (the test's Redis).
async fn binary(env: &[(&'static str, String)]) -> Binary {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Binary::start(
        &[
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
        ],
        &env,
    )
    .await
}

/// A call through `b`, answered.
async fn answers(b: &Binary) {
    let mut client = Client::new(&b.url);
    client.initialize().await;
    client.echo("stored in redis").await;
}

#[tokio::test]
async fn serves_on_a_tls_only_redis_trusting_its_ca_file() {
    let redis = RedisServer::start_secured(Secured {
        tls: Some(Certs::make()),
        ..Secured::default()
    });
    answers(&binary(&redis.store_env()).await).await;
}

#[tokio::test]
async fn serves_as_an_acl_user_over_mutual_tls_and_in_clear() {
    let user = Some(("otpmcp".to_owned(), "acl-pass".to_owned()));
    let tls = RedisServer::start_secured(Secured {
        tls: Some(Certs::make()),
        client_auth: true,
        user: user.clone(),
    });
    answers(&binary(&tls.store_env()).await).await;
    let clear = RedisServer::start_secured(Secured {
        user,
        ..Secured::default()
    });
    answers(&binary(&clear.store_env()).await).await;
}

/// Sentinel over TLS: the sentinel is asked over TLS, and the primary it names is reached
/// over TLS too (`store.redis_url`'s scheme), both trusting the CA file.
#[tokio::test]
async fn serves_on_a_primary_named_by_a_sentinel_over_tls() {
    let certs = Certs::make();
    let primary = RedisServer::start_secured(Secured {
        tls: Some(certs.clone()),
        ..Secured::default()
    });
    let sentinel = Sentinel::start_tls(&primary, certs.clone());
    let server = TestServer::start(|c| {
        c.store.backend = BackendKind::Redis;
        // Its host is not used: the sentinel names the primary.
        c.store.redis_url = "rediss://127.0.0.1:1".into();
        c.store.redis_sentinels = vec![sentinel.url().into()];
        c.store.redis_sentinel_service = SENTINEL_SERVICE.into();
        c.store.redis_ca_file.clone_from(&certs.ca);
    })
    .await;
    let mut client = Client::new(&server.url);
    client.initialize().await;
    client.echo("through the sentinel").await;
}

/// Runs the binary with `env` until it exits by itself: its exit code and its log.
async fn exits(env: &[(&'static str, String)]) -> (Option<i32>, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_otpmcp"))
        .args([
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/test.toml"),
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/redis.toml"),
        ])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .current_dir(std::env::temp_dir())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = within("the binary to exit", out)
        .await
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code(), log)
}

#[tokio::test]
async fn a_redis_whose_certificate_the_ca_file_did_not_sign_fails_clearly() {
    let redis = RedisServer::start_secured(Secured {
        tls: Some(Certs::make()),
        user: Some(("otpmcp".into(), "never-printed".into())),
        ..Secured::default()
    });
    let other = Certs::other_ca();
    let mut env = redis.store_env();
    for (key, value) in &mut env {
        if *key == "OTPMCP__STORE__REDIS_CA_FILE" {
            *value = other.display().to_string();
        }
    }
    env.push(("OTPMCP__STORE__CONNECT_TIMEOUT", "5s".into()));
    let (code, log) = exits(&env).await;
    assert_eq!(code, Some(1), "{log}");
    let ca = format!("store.redis_ca_file = {}", other.display());
    assert!(log.contains(&ca), "names the key and the file: {log}");
    assert!(
        log.contains(&format!("127.0.0.1:{}", redis.port)),
        "names the server: {log}"
    );
    assert!(
        log.contains("certificate") || log.contains("Certificate"),
        "says it is the certificate: {log}"
    );
    assert!(!log.contains("never-printed"), "no password: {log}");
}

#[tokio::test]
async fn tls_files_that_cannot_be_used_exit_2_naming_the_key() {
    let redis = RedisServer::start_secured(Secured {
        tls: Some(Certs::make()),
        ..Secured::default()
    });
    let url = ("OTPMCP__STORE__REDIS_URL", redis.url());
    let missing = (
        "OTPMCP__STORE__REDIS_CA_FILE",
        "/nonexistent/ca.pem".to_owned(),
    );
    let (code, log) = exits(&[url.clone(), missing]).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("store.redis_ca_file"), "{log}");
    let cert_only = (
        "OTPMCP__STORE__REDIS_CLIENT_CERT",
        redis.store_env()[1].1.clone(),
    );
    let (code, log) = exits(&[url, cert_only]).await;
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("store.redis_client_key"), "{log}");
}
