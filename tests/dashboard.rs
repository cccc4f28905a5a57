//! `GET /dashboard` on the admin listener: the feed resumes by `Last-Event-ID` like an MCP
//! stream, and the page, in headless Chromium (Debian's chromium and chromium-driver,
//! driven by Selenium from PyPI, both installed by the project's scripts), renders the
//! supervision tree and shows a restart without a reload. The screenshot is kept under
//! `target/tmp/dashboard/`.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{SseReader, TestServer, admin_on, sse_get, within};
use otpmcp::config::NonZeroDuration;
use otpmcp::supervisor::Child;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn dashboard_on(c: &mut otpmcp::Config) {
    admin_on(c);
    c.admin.dashboard_interval = NonZeroDuration::from_millis(200);
}

/// The next snapshot on `reader`: its id and content.
async fn snapshot(reader: &mut SseReader) -> (u64, Value) {
    loop {
        let frame = reader
            .next()
            .await
            .unwrap_or_else(|| panic!("the feed ended"));
        if frame.event.as_deref() == Some("snapshot") {
            let id = frame
                .id
                .as_deref()
                .and_then(|id| id.parse().ok())
                .unwrap_or_else(|| panic!("a snapshot without a numeric id: {frame:?}"));
            return (id, frame.json().unwrap_or_default());
        }
    }
}

#[tokio::test]
async fn the_feed_resumes_after_its_last_event_id() {
    let server = TestServer::start(dashboard_on).await;
    let mut client = server.client();
    client.initialize().await;
    let url = server.admin_url("/dashboard/events");

    let mut first = sse_get(&url, None).await;
    let retry = first.next().await.and_then(|f| f.retry);
    assert_eq!(retry, Some(1000), "a retry hint first");
    // The first connection gets the history first: snapshots from before the session.
    let (a, mut snap) = snapshot(&mut first).await;
    let mut last = a;
    while snap["sessions_total"] != 1 {
        let (n, next) = snapshot(&mut first).await;
        assert!(n > last, "ids increase");
        (last, snap) = (n, next);
    }
    drop(first);
    let names: Vec<&str> = snap["tree"]["children"]
        .as_array()
        .map(|c| c.iter().filter_map(|n| n["name"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names, ["event_store", "session_manager", "http_listener"]);
    assert_eq!(snap["tree"]["state"], "running");
    assert_eq!(snap["sessions_total"], 1);
    let short = client.session_id().to_string()[..8].to_owned();
    assert_eq!(snap["sessions"][0]["id"], short.as_str());
    assert!(
        !snap.to_string().contains(&client.session_id().to_string()),
        "the page never gets a whole session id"
    );
    assert_eq!(snap["backend"], "memory");
    assert!(snap["cluster"].is_null());

    // Reconnecting with the first id replays what came after it, in order.
    let mut again = sse_get(&url, Some(&a.to_string())).await;
    let _retry = again.next().await;
    let (next, _) = snapshot(&mut again).await;
    assert_eq!(next, a + 1, "nothing after {a} is missed");
    let (then, _) = snapshot(&mut again).await;
    assert_eq!(then, a + 2);
    server.shutdown().await;
}

#[tokio::test]
async fn the_page_is_self_contained() {
    let server = TestServer::start(dashboard_on).await;
    let resp = within("the page", reqwest::get(server.admin_url("/dashboard")))
        .await
        .unwrap_or_else(|e| panic!("GET /dashboard: {e}"));
    assert_eq!(resp.status(), 200);
    let csp = resp
        .headers()
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    assert!(csp.starts_with("default-src 'none'"), "{csp}");
    let page = resp.text().await.unwrap_or_default();
    assert!(page.contains("/dashboard/events"));
    for external in ["<link", "src=", "href=", "url(", "@import"] {
        assert!(!page.contains(external), "no external assets: {external}");
    }
    server.shutdown().await;
}

#[tokio::test]
#[ignore = "needs Chromium, chromedriver and Selenium (scripts/setup-clients); ./scripts/test runs it"]
async fn in_a_browser_the_tree_renders_and_a_restart_shows_without_a_reload() {
    let server = TestServer::start(dashboard_on).await;
    let mut client = server.client();
    client.initialize().await;
    let open = common::Client::send(client.get(None)).await;
    assert_eq!(open.status(), 200, "a standalone stream to show");

    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let shot = dir.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let root = env!("CARGO_MANIFEST_DIR");
    let mut driver = tokio::process::Command::new(format!("{root}/.cache/py/bin/python"))
        .arg(format!("{root}/tests/browser/dashboard.py"))
        .arg("--url")
        .arg(server.admin_url("/dashboard"))
        .arg("--screenshot")
        .arg(&shot)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| {
            panic!("the browser driver (./scripts/setup-clients installs it): {e}")
        });
    let mut lines =
        BufReader::new(driver.stdout.take().unwrap_or_else(|| panic!("stdout"))).lines();
    let mut stdin = driver.stdin.take().unwrap_or_else(|| panic!("stdin"));
    let mut next_line = async || {
        // Chromium's first start is slow on a loaded machine.
        tokio::time::timeout(Duration::from_secs(90), lines.next_line())
            .await
            .ok()
            .and_then(Result::ok)
            .flatten()
            .unwrap_or_else(|| panic!("the browser driver said nothing more"))
    };

    let rendered = next_line().await;
    assert_eq!(rendered, "rendered restarts=0", "the tree renders");
    // Some traffic for the rates and the screenshot.
    for text in ["a", "b", "c"] {
        client.echo(text).await;
    }
    assert!(server.app.inject_panic(Child::EventStore(0)).is_ok());
    stdin
        .write_all(b"panicked\n")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    stdin.flush().await.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        next_line().await,
        "restart-shown restarts=1",
        "the restart shows without a reload"
    );
    assert!(next_line().await.starts_with("screenshot "));
    let status = within("the browser driver to exit", driver.wait())
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success());
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "a screenshot of the page at {}",
        shot.display()
    );
    drop(open);
    server.shutdown().await;
}
