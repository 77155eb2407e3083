//! Fuzz target `object_key`: see `hicache_index_tests::fuzz::object_key` for what it checks.
#![no_main]

use hicache_index_tests::fuzz::{self, meter::Meter};

#[global_allocator]
static ALLOCATOR: Meter = Meter;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz::object_key(data));
