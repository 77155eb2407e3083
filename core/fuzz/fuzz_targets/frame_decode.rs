//! Fuzz target `frame_decode`: see `hicache_index_tests::fuzz::decode_roundtrip` for what it checks.
#![no_main]

use hicache_index_tests::fuzz::{self, meter::Meter};

#[global_allocator]
static ALLOCATOR: Meter = Meter;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::decode_roundtrip(data));
