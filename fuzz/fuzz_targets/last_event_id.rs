//! `cargo +nightly fuzz run last_event_id`: see `otpmcp::fuzzing::last_event_id`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| otpmcp::fuzzing::last_event_id(data));
