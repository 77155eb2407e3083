//! The hashes of the index's tables: a page's `(namespace, page hash)` and a namespace's
//! `(tenant, prefix)`, seeded so that hostile keys cannot be aimed at one bucket.

use crate::hash::PageHash;

/// The page table's hash of `(namespace, page hash)`: page hashes are already uniform, so 16 of
/// their bytes mixed with the seed and the namespace suffice.
pub(super) fn page_table_hash(seed: u64, ns: u32, hash: &PageHash) -> u64 {
    let b = &hash.0;
    let lo = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let hi = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    mix(
        lo ^ seed,
        hi ^ u64::from(ns).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )
}

/// The namespace table's hash of `(tenant, prefix)`.
pub(super) fn namespace_hash(seed: u64, tenant: &str, prefix: Option<&str>) -> u64 {
    let mut h = seed;
    for part in [Some(tenant), prefix] {
        h = mix(h, 0x100 + part.map_or(0, str::len) as u64);
        for chunk in part.unwrap_or("").as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = mix(h, u64::from_le_bytes(word));
        }
    }
    h
}

/// A 64-bit mixing function (folded 128-bit multiply).
pub(super) fn mix(a: u64, b: u64) -> u64 {
    let full =
        u128::from(a ^ 0xa076_1d64_78bd_642f).wrapping_mul(u128::from(b ^ 0xe703_7ed1_a0b4_28db));
    (full as u64) ^ ((full >> 64) as u64)
}
