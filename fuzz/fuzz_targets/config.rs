//! `cargo +nightly fuzz run config`: see `otpmcp::fuzzing::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::config(data));
