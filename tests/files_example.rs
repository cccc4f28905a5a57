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
    // No link is followed, out of the folder or inside it, so each file counts once.
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
    let readme = read("README.md").await;
    assert_eq!(text(readme.result()), "# Notes\nthe needle is here\n");
    for (path, why) in [
        ("../secret.txt", "not a relative path"),
        ("/etc/hostname", "not a relative path"),
        ("escape", "links are not followed"),
        ("inside", "links are not followed"),
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

/// A folder with the entries an attacker who can write into it would plant: a hidden
/// file, a link to it, a hard link to a file outside, and a folder that is a symlink out.
fn hostile(name: &str) -> Folder {
    let folder = Folder::new(name);
    let served = folder.dir.join("served");
    let write = |path: PathBuf, bytes: &[u8]| {
        std::fs::write(&path, bytes).unwrap_or_else(|e| panic!("write {path:?}: {e}"));
    };
    write(served.join(".env"), b"API_KEY=needle\n");
    std::os::unix::fs::symlink(".env", served.join("env-link")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::hard_link(folder.dir.join("secret.txt"), served.join("hard"))
        .unwrap_or_else(|e| panic!("hard link: {e}"));
    std::fs::create_dir_all(folder.dir.join("outside")).unwrap_or_else(|e| panic!("{e}"));
    write(folder.dir.join("outside/file.md"), b"OUTSIDE");
    std::os::unix::fs::symlink(folder.dir.join("outside"), served.join("out"))
        .unwrap_or_else(|e| panic!("{e}"));
    folder
}

#[test]
fn hidden_files_links_and_hard_links_are_neither_served_nor_indexed() {
    let folder = hostile("hostile");
    for (path, why) in [
        (".env", "hidden"),
        ("src/../.env", "hidden"),
        ("env-link", "links are not followed"),
        ("hard", "hard link"),
        ("out/file.md", "links are not followed"),
    ] {
        match service::read_text_blocking(&folder.root, path) {
            Ok(text) => panic!("{path} was served: {text:?}"),
            Err(e) => assert!(format!("{e:?}").contains(why), "{path}: {e:?}"),
        }
    }
    // The walk lists no hidden file (`hard` is listed, and skipped when read).
    let walked = folder.root.walk();
    assert!(walked.iter().all(|p| !p.starts_with('.')), "{walked:?}");
}

/// Runs `flip` in a loop on a thread of its own while `read` runs on another, for two
/// seconds; fails if a read does not come back within ten (a read blocked for good).
fn race(flip: impl FnMut() + Send + 'static, mut read: impl FnMut() + Send + 'static) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let flipper = {
        let stop = stop.clone();
        let mut flip = flip;
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                flip();
            }
        })
    };
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while std::time::Instant::now() < deadline {
            read();
        }
        let _ = done.send(());
    });
    let ended = finished.recv_timeout(std::time::Duration::from_secs(10));
    stop.store(true, Ordering::Relaxed);
    let _ = flipper.join();
    match ended {
        Ok(()) => {}
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!("a read blocked"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
            panic!("a read broke the rule (its panic is above)")
        }
    }
}

#[test]
fn a_folder_swapped_for_a_symlink_never_leads_out() {
    let folder = hostile("swap");
    let served = folder.dir.join("served");
    std::fs::create_dir_all(served.join("real")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(served.join("real/file.md"), "inside").unwrap_or_else(|e| panic!("{e}"));
    let (real, parked, outside) = (
        served.join("real"),
        folder.dir.join("parked"),
        folder.dir.join("outside"),
    );
    let root = folder.root.clone();
    race(
        move || {
            let _ = std::fs::rename(&real, &parked);
            let _ = std::os::unix::fs::symlink(&outside, &real);
            let _ = std::fs::remove_file(&real);
            let _ = std::fs::rename(&parked, &real);
        },
        move || {
            if let Ok(text) = service::read_text_blocking(&root, "real/file.md") {
                assert_eq!(text, "inside", "read through the swapped-in symlink");
            }
        },
    );
}

#[test]
fn a_file_that_grows_after_its_check_is_cut_at_the_limit() {
    let folder = Folder::new("grow");
    let path = folder.dir.join("served/grow.txt");
    std::fs::write(&path, "small").unwrap_or_else(|e| panic!("{e}"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{e}"));
    let root = folder.root.clone();
    race(
        move || {
            let _ = file.set_len(index::MAX_FILE_BYTES + 4096);
            let _ = file.set_len(5);
        },
        move || {
            if let Ok(text) = service::read_text_blocking(&root, "grow.txt") {
                assert!(
                    text.len() as u64 <= index::MAX_FILE_BYTES,
                    "read {} bytes, past the limit",
                    text.len()
                );
            }
        },
    );
}

#[test]
fn a_fifo_swapped_in_does_not_block_a_read() {
    let folder = Folder::new("fifo");
    let (pipe, regular, at) = (
        folder.dir.join("pipe"),
        folder.dir.join("regular"),
        folder.dir.join("served/data.txt"),
    );
    let made = std::process::Command::new("mkfifo")
        .arg(&pipe)
        .status()
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    assert!(made.success());
    std::fs::write(&regular, "data").unwrap_or_else(|e| panic!("{e}"));
    let root = folder.root.clone();
    race(
        move || {
            let _ = std::fs::rename(&regular, &at);
            let _ = std::fs::rename(&at, &regular);
            let _ = std::fs::rename(&pipe, &at);
            let _ = std::fs::rename(&at, &pipe);
        },
        move || {
            let _ = service::read_text_blocking(&root, "data.txt");
        },
    );
}
