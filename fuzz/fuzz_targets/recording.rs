//! `cargo +nightly fuzz run recording`: see `otpmcp::fuzzing::recording`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::recording(data));
