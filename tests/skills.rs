//! The skills extension (SEP-2640) over real HTTP, in both eras: the capability, the
//! listing and one skill's entry, each file read back matching its digest and size, the
//! `SKILL.md` resources, directory reads, and -32602 for what is not served. The fixtures
//! are examples/everything's, which the conformance suite checks too
//! (scripts/conformance).

mod common;

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
