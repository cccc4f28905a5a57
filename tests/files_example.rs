//! examples/files: the read-only files server, over HTTP (2026-07-28, its `index` as a
//! durable task) and over stdio (a 2025-11-25 session on pipes), on a folder made for
//! each test with a link out of it.

mod common;

#[path = "../examples/files/index.rs"]
mod index;
#[path = "../examples/files/service.rs"]
mod service;

use std::path::PathBuf;

use serde_json::{Value, json};

use common::TestServer;
use common::stateless::Stateless;
use common::stdio::Pipe;

/// A folder to serve: two text files with `needle` in them, a file that is not UTF-8, a
/// link inside and a link out (to a file outside that also says `needle`); and a folder
/// of one skill beside it.
struct Folder {
    dir: PathBuf,
    root: index::Root,
    skills: PathBuf,
}

impl Folder {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("otpmcp-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let served = dir.join("served");
        let write = |path: PathBuf, bytes: &[u8]| {
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir: {e}"));
            }
            std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
        };
        write(served.join("README.md"), b"# Notes\nthe needle is here\n");
        write(served.join("src/lib.rs"), b"fn main() {}\nfn needle() {}\n");
        write(served.join("blob.bin"), &[0xff, 0xfe, 0x00, 0x80]);
        write(dir.join("secret.txt"), b"needle outside\n");
        let link = |target: PathBuf, at: PathBuf| {
            std::os::unix::fs::symlink(target, at).unwrap_or_else(|e| panic!("symlink: {e}"));
        };
        link(dir.join("secret.txt"), served.join("escape"));
        link(served.join("README.md"), served.join("inside"));
        write(
            dir.join("skills/code-review/SKILL.md"),
            b"---\nname: code-review\ndescription: How to review this folder's code\n---\n\nRead src/ first.\n",
        );
        let root = index::Root::open(&served).unwrap_or_else(|e| panic!("root: {e}"));
        let skills = dir.join("skills");
        Self { dir, root, skills }
    }

    /// The files server over this folder, with its skill.
    fn server(&self) -> otpmcp::McpServer {
        let skills = otpmcp::handler::SkillsDirectory::open(&self.skills)
            .unwrap_or_else(|e| panic!("skills: {e}"));
        service::server(self.root.clone(), Some(skills))
    }
}

impl Drop for Folder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn text(result: &Value) -> &str {
    result["content"][0]["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn over_http_index_runs_as_a_task_then_search_finds_only_what_is_inside() {
    let folder = Folder::new("http");
    let server = TestServer::start_with(|_| {}, folder.server()).await;
    let client = Stateless::new(&server.url).with_tasks();

    let early = client
        .ask(
            "tools/call",
            json!({"name": "search", "arguments": {"query": "needle"}}),
        )
        .await;
    assert_eq!(early.result()["isError"], true, "{:?}", early.message);

    let task = client.start_task("index", json!({})).await;
    client.until_status(&task, "completed").await;

    let found = client
        .ask(
            "tools/call",
            json!({"name": "search", "arguments": {"query": "NEEDLE"}}),
        )
        .await;
    let hits = &found.result()["structuredContent"]["hits"];
    let places: Vec<(&str, u64)> = hits
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h["path"].as_str().unwrap_or_default(),
                h["line"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    // The link out is neither indexed nor followed; the link inside is not walked either
    // (links are not followed by the walk), so each file counts once.
    assert_eq!(
        places,
        [("README.md", 2), ("src/lib.rs", 2)],
        "{:?}",
        found.message
    );
    assert_eq!(found.result()["structuredContent"]["indexed"], 2);

    let read = |path: &'static str| {
        let client = client.clone();
        async move {
            client
                .ask(
                    "tools/call",
                    json!({"name": "read_file", "arguments": {"path": path}}),
                )
                .await
        }
    };
    let inside = read("inside").await;
    assert_eq!(text(inside.result()), "# Notes\nthe needle is here\n");
    for (path, why) in [
        ("../secret.txt", "not a relative path"),
        ("/etc/hostname", "not a relative path"),
        ("escape", "outside the root"),
        ("src", "not a regular file"),
        ("missing.txt", "no such file"),
    ] {
        let refused = read(path).await;
        assert_eq!(
            refused.result()["isError"],
            true,
            "{path}: {:?}",
            refused.message
        );
        assert!(
            text(refused.result()).contains(why),
            "{path}: {:?}",
            refused.message
        );
    }

    let resource = client
        .ask(
            "resources/read",
            json!({"uri": "files://file/src%2Flib.rs"}),
        )
        .await;
    assert_eq!(
        resource.result()["contents"][0]["text"],
        "fn main() {}\nfn needle() {}\n"
    );
    let outside = client
        .ask("resources/read", json!({"uri": "files://file/escape"}))
        .await;
    assert!(outside.error_code().is_some(), "{:?}", outside.message);

    let prompt = client
        .ask(
            "prompts/get",
            json!({"name": "review", "arguments": {"path": "README.md"}}),
        )
        .await;
    let asked = prompt.result()["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(asked.contains("the needle is here"), "{:?}", prompt.message);
    server.shutdown().await;
}

#[tokio::test]
async fn over_stdio_a_session_indexes_with_progress_and_searches() {
    let folder = Folder::new("stdio");
    let mut pipe = Pipe::start(folder.server(), |_| {}).await;
    pipe.initialize(json!({})).await;
    let id = pipe
        .request(
            "tools/call",
            json!({"name": "index", "arguments": {}, "_meta": {"progressToken": "i"}}),
        )
        .await;
    let (indexed, notes) = pipe.answer(id).await;
    assert!(
        text(&indexed["result"]).starts_with("indexed 2 files (1 skipped"),
        "{indexed}"
    );
    let last = notes.last().cloned().unwrap_or_default();
    assert_eq!(last["method"], "notifications/progress", "{notes:?}");
    assert_eq!(
        last["params"]["progress"], last["params"]["total"],
        "{notes:?}"
    );

    let found = pipe
        .ask(
            "tools/call",
            json!({"name": "search", "arguments": {"query": "needle", "max": 1}}),
        )
        .await;
    let hits = &found["result"]["structuredContent"]["hits"];
    assert_eq!(hits.as_array().map(Vec::len), Some(1), "{found}");
    let index = pipe
        .ask("resources/read", json!({"uri": "files://index"}))
        .await;
    let listed: Value = serde_json::from_str(
        index["result"]["contents"][0]["text"]
            .as_str()
            .unwrap_or("null"),
    )
    .unwrap_or_default();
    assert_eq!(listed["files"].as_array().map(Vec::len), Some(2), "{index}");

    // The folder's skill, listed and read back over the same connection.
    let skills = pipe.ask("skills/list", json!({})).await;
    let skill = &skills["result"]["skills"][0];
    assert_eq!(skill["frontmatter"]["name"], "code-review", "{skills}");
    let uri = skill["uri"].clone();
    let read = pipe.ask("resources/read", json!({"uri": uri})).await;
    let body = read["result"]["contents"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(body.ends_with("Read src/ first.\n"), "{read}");
    pipe.close().await;
}
