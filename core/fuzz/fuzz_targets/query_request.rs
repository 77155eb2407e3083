//! Fuzz target `query_request`: see `hicache_index_tests::fuzz::query_request` for what it checks.
#![no_main]

use hicache_index_tests::fuzz::{self, meter::Meter};

#[global_allocator]
static ALLOCATOR: Meter = Meter;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::query_request(data));
