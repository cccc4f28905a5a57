//! `cargo +nightly fuzz run redis_entry`: see `otpmcp::fuzzing::redis_entry`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::redis_entry(data));
