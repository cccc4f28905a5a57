//! `cargo +nightly fuzz run headers`: see `otpmcp::fuzzing::headers`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::headers(data));
