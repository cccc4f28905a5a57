//! The committed fuzzing corpus (`fuzz/corpus/<target>/`), run through the fuzz targets'
//! bodies on the stable toolchain: every input a fuzzer once found interesting, or that
//! once crashed a decoder, stays a regression test even where `cargo fuzz` cannot run.

use std::path::Path;

fn replay(target: &str, run: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut inputs = 0;
    for entry in entries.flatten() {
        let data = std::fs::read(entry.path())
            .unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        let outcome = std::panic::catch_unwind(|| run(&data));
        assert!(
            outcome.is_ok(),
            "{target} fails on {}",
            entry.path().display()
        );
        inputs += 1;
    }
    assert!(inputs > 0, "{} holds no input", dir.display());
}

#[test]
fn last_event_id() {
    replay("last_event_id", otpmcp::fuzzing::last_event_id);
}

#[test]
fn jsonrpc() {
    replay("jsonrpc", otpmcp::fuzzing::jsonrpc);
}

#[test]
fn headers() {
    replay("headers", otpmcp::fuzzing::headers);
}

#[test]
fn config() {
    replay("config", otpmcp::fuzzing::config);
}

#[test]
fn sse_round_trip() {
    replay("sse_round_trip", otpmcp::fuzzing::sse_round_trip);
}

#[test]
fn redis_entry() {
    replay("redis_entry", otpmcp::fuzzing::redis_entry);
}

#[test]
fn recording() {
    replay("recording", otpmcp::fuzzing::recording);
}
