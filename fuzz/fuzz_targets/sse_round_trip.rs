//! `cargo +nightly fuzz run sse_round_trip`: see `otpmcp::fuzzing::sse_round_trip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::sse_round_trip(data));
