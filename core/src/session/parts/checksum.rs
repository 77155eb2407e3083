//! The checksum term of one key: what the resync's `seen` map is keyed by, and how a
//! verification round checks that its answer names every key it asked about.

/// An order-independent checksum term of one key (FNV-1a, then mixed): a round's answer names
/// every key asked about, each once, when the sums of the terms agree (and the counts).
pub(in crate::session) fn key_checksum(key: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}
