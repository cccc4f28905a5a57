//! `cargo +nightly fuzz run jsonrpc`: see `otpmcp::fuzzing::jsonrpc`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::jsonrpc(data));
