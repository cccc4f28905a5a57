//! The skills extension (SEP-2640) over real HTTP, in both eras: the capability, the
//! listing and one skill's entry, each file read back matching its digest and size, the
//! `SKILL.md` resources, directory reads, and -32602 for what is not served. The fixtures
//! are examples/everything's, which the conformance suite checks too
//! (scripts/conformance). With `[auth]`, skills scoped by `with_skill_scopes` are
//! refused (403) to a token without the scopes and served to one with them.

mod common;

use common::issuer::Issuer;
use common::stateless::Stateless;
use common::{Client, TestServer};
use otpmcp::McpServer;
use otpmcp::handler::SkillsDirectory;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

const SKILLS: &str = "io.modelcontextprotocol/skills";
const PDF: &str = "skill://pdf-processing/SKILL.md";

async fn server() -> TestServer {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/everything/skills");
    let skills = SkillsDirectory::open(root).unwrap_or_else(|e| panic!("{e}"));
    TestServer::start_with(|_| {}, McpServer::default().with_skills(skills)).await
}

fn sha256(text: &str) -> String {
    let hex: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// Either era's way to ask: the result, or the error code.
trait Ask {
    async fn call(&self, method: &str, params: Value) -> Result<Value, i64>;
}

impl Ask for Client {
    async fn call(&self, method: &str, params: Value) -> Result<Value, i64> {
        let answer = self.ask(method, params).await;
        answer["error"]["code"]
            .as_i64()
            .map_or_else(|| Ok(answer["result"].clone()), Err)
    }
}

impl Ask for Stateless {
    async fn call(&self, method: &str, params: Value) -> Result<Value, i64> {
        let answer = self.ask(method, params).await;
        answer
            .error_code()
            .map_or_else(|| Ok(answer.result().clone()), Err)
    }
}

/// What both eras answer alike; returns the `skills/list` and `skills/get` results.
async fn serves_the_fixtures(client: &impl Ask) -> (Value, Value) {
    let list = client
        .call("skills/list", json!({}))
        .await
        .unwrap_or_default();
    let uris: Vec<&str> = list["skills"]
        .as_array()
        .map(|s| s.iter().filter_map(|e| e["uri"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        uris,
        ["skill://acme/billing/refunds/SKILL.md", PDF],
        "{list}"
    );
    assert!(list.get("nextCursor").is_none());

    let got = client
        .call("skills/get", json!({"uri": PDF}))
        .await
        .unwrap_or_default();
    let skill = &got["skill"];
    assert_eq!(
        skill, &list["skills"][1],
        "skills/get and skills/list agree"
    );
    assert_eq!(skill["frontmatter"]["name"], "pdf-processing");
    assert_eq!(skill["frontmatter"]["metadata"]["version"], "2.1.0");
    let files = skill["resources"].as_array().cloned().unwrap_or_default();
    assert_eq!(files.len(), 4, "{skill}");
    for file in &files {
        let uri = file["uri"].as_str().unwrap_or_default();
        let read = client
            .call("resources/read", json!({"uri": uri}))
            .await
            .unwrap_or_else(|code| panic!("{uri}: {code}"));
        let text = read["contents"][0]["text"].as_str().unwrap_or_default();
        assert_eq!(file["digest"], sha256(text), "{uri}");
        assert_eq!(file["size"], text.len(), "{uri}");
    }
    let read = client.call("resources/read", json!({"uri": PDF})).await;
    assert_eq!(
        read.unwrap_or_default()["contents"][0]["mimeType"],
        "text/markdown"
    );

    let listed = client
        .call("resources/list", json!({}))
        .await
        .unwrap_or_default();
    let manifest = listed["resources"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["uri"] == PDF).cloned())
        .unwrap_or_default();
    assert_eq!(manifest["name"], "pdf-processing", "{listed}");
    assert_eq!(manifest["description"], skill["frontmatter"]["description"]);

    let dir = client
        .call(
            "resources/directory/read",
            json!({"uri": "skill://pdf-processing/templates"}),
        )
        .await
        .unwrap_or_default();
    let children: Vec<(&str, &str)> = dir["resources"]
        .as_array()
        .map(|c| {
            c.iter()
                .filter_map(|c| Some((c["uri"].as_str()?, c["mimeType"].as_str()?)))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        children,
        [
            (
                "skill://pdf-processing/templates/invoice.md",
                "text/markdown"
            ),
            (
                "skill://pdf-processing/templates/regional",
                "inode/directory"
            ),
        ]
    );

    for (method, uri) in [
        ("skills/get", "skill://mcp-nonexistent/SKILL.md"),
        ("skills/get", "skill://pdf-processing/references/FORMS.md"),
        (
            "skills/get",
            "skill://pdf-processing/../pdf-processing/SKILL.md",
        ),
        ("resources/directory/read", PDF),
        ("resources/directory/read", "skill://nowhere"),
        ("resources/directory/read", "skill:///etc"),
    ] {
        let answer = client.call(method, json!({"uri": uri})).await;
        assert_eq!(answer.err(), Some(-32602), "{method} {uri}");
    }
    let escape = client
        .call(
            "resources/read",
            json!({"uri": "skill://pdf-processing/../../Cargo.toml"}),
        )
        .await;
    assert!(escape.is_err(), "{escape:?}");
    (list, got)
}

#[tokio::test]
async fn a_session_is_served_skills() {
    let server = server().await;
    let mut client = server.client();
    let init = client.initialize().await;
    let caps = &init["result"]["capabilities"];
    assert_eq!(caps["extensions"][SKILLS], json!({"directoryRead": true}));
    assert!(caps["resources"].is_object(), "{caps}");
    serves_the_fixtures(&client).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_stateless_request_is_served_skills_with_cache_hints() {
    let server = server().await;
    let client = Stateless::new(&server.url);
    let discover = client
        .call("server/discover", json!({}))
        .await
        .unwrap_or_default();
    let caps = &discover["capabilities"];
    assert_eq!(caps["extensions"][SKILLS], json!({"directoryRead": true}));
    assert!(caps["resources"].is_object(), "{caps}");
    let (list, got) = serves_the_fixtures(&client).await;
    for result in [&list, &got] {
        assert_eq!(result["resultType"], "complete");
        assert!(result["ttlMs"].is_u64(), "{result}");
        assert!(result["cacheScope"].is_string(), "{result}");
    }
    server.shutdown().await;
}

/// This server's resource URI, which tokens must name as their audience.
const AUDIENCE: &str = "http://mcp.test/mcp";

#[tokio::test]
async fn scoped_skills_are_refused_without_the_scope_and_served_with_it() {
    let issuer = Issuer::start().await;
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/everything/skills");
    let skills = SkillsDirectory::open(root).unwrap_or_else(|e| panic!("{e}"));
    let url = issuer.url.clone();
    let server = TestServer::start_with(
        move |c| {
            c.auth.enabled = true;
            c.auth.issuer = url;
            c.auth.audience = AUDIENCE.into();
            c.auth.scopes_supported = vec!["mcp".into(), "skills".into()];
        },
        McpServer::default()
            .with_skills(skills)
            .with_skill_scopes(["skills"]),
    )
    .await;
    let requests = [
        ("skills/list", json!({})),
        ("skills/get", json!({"uri": PDF})),
        (
            "resources/directory/read",
            json!({"uri": "skill://pdf-processing/templates"}),
        ),
        ("resources/read", json!({"uri": PDF})),
        ("resources/subscribe", json!({"uri": PDF})),
    ];
    let manifests = |listed: &Value| {
        listed["result"]["resources"]
            .as_array()
            .map(|r| r.iter().filter(|r| r["uri"] == PDF).count())
            .unwrap_or_default()
    };

    let mut user = Client::new(&server.url).with_token(&issuer.token(AUDIENCE, "u", "mcp"));
    user.initialize().await;
    for (n, (method, params)) in requests.iter().enumerate() {
        let body = json!({"jsonrpc": "2.0", "id": 10 + n, "method": method, "params": params});
        let resp = Client::send(user.post(&body)).await;
        assert_eq!(resp.status(), 403, "{method}");
        let challenge = resp
            .headers()
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        assert!(
            challenge.contains("error=\"insufficient_scope\"")
                && challenge.contains("scope=\"skills\""),
            "{method}: {challenge}"
        );
    }
    assert_eq!(manifests(&user.ask("resources/list", json!({})).await), 0);
    // The 2026-07-28 era goes through the same check.
    let stateless = Stateless::new(&server.url).with_token(&issuer.token(AUDIENCE, "u", "mcp"));
    let (_, refused) = stateless.post("skills/list", json!({}));
    assert_eq!(Client::send(refused).await.status(), 403);

    let mut reader =
        Client::new(&server.url).with_token(&issuer.token(AUDIENCE, "r", "mcp skills"));
    reader.initialize().await;
    // (A skill file takes no subscription: skills are a snapshot. Only the refusal above
    // is about scopes.)
    for (method, params) in &requests[..4] {
        let answer = reader.ask(method, params.clone()).await;
        assert!(answer["result"].is_object(), "{method}: {answer}");
    }
    let listed = reader
        .call("skills/list", json!({}))
        .await
        .unwrap_or_default();
    assert_eq!(
        listed["skills"].as_array().map(Vec::len),
        Some(2),
        "{listed}"
    );
    assert_eq!(manifests(&reader.ask("resources/list", json!({})).await), 1);
    let stateless =
        Stateless::new(&server.url).with_token(&issuer.token(AUDIENCE, "r", "mcp skills"));
    let served = stateless.call("skills/list", json!({})).await;
    assert!(served.is_ok(), "{served:?}");
    server.shutdown().await;
}
