//! Damage to a message's frames: truncation, garbling and corruption.

use hicache_index::decode;

use crate::rng::Rng;

/// Cuts the payload short (always rejected: msgpack containers announce their length).
pub(super) fn truncate(frames: &mut [Vec<u8>], rng: &mut Rng) {
    if let Some(payload) = frames.get_mut(2) {
        let keep = rng.index(payload.len());
        payload.truncate(keep);
    }
}

/// Replaces the payload by one that does not decode (valid msgpack of the wrong shape, or bytes
/// that are not msgpack), keeping the topic and the sequence frame: a batch whose sequence was
/// consumed and whose events are unknown.
pub(super) fn garble(frames: &mut [Vec<u8>], rng: &mut Rng) {
    if frames.len() < 3 {
        return;
    }
    let candidates: [&[u8]; 5] = [
        // [ts, "events", 0]: the events are a string.
        &[0x93, 0x01, 0xa6, b'e', b'v', b'e', b'n', b't', b's', 0x00],
        // [ts, [1, 2], 0]: events that are not maps.
        &[0x93, 0x01, 0x92, 0x01, 0x02, 0x00],
        // A map, not an array.
        &[0x81, 0xa1, b'k', 0x01],
        // Reserved marker bytes.
        &[0xc1, 0xc1, 0xc1],
        // Nothing at all.
        &[],
    ];
    let pick = candidates[rng.index(candidates.len())];
    if decode(&[&frames[0], &frames[1], pick]).is_err() {
        frames[2] = pick.to_vec();
    } else {
        truncate(frames, rng);
    }
}

/// Damages a message; returns whether it still decodes to the same batch. A damage that decodes
/// to a different batch is replaced by a truncation (see the module docs).
pub(super) fn corrupt(frames: &mut [Vec<u8>], rng: &mut Rng) -> bool {
    if rng.chance(0.2) {
        // A sequence frame of the wrong length.
        let len = [0usize, 1, 4, 7, 9, 16][rng.index(6)];
        frames[1] = vec![0x5a; len];
        return false;
    }
    let original = frames[2].clone();
    let flips = rng.range(1, 3);
    for _ in 0..flips {
        if frames[2].is_empty() {
            break;
        }
        let i = rng.index(frames[2].len());
        frames[2][i] ^= 1 << rng.below(8);
    }
    let verdict = {
        let before = decode(&[&frames[0], &frames[1], &original]);
        let after = decode(&[&frames[0], &frames[1], &frames[2]]);
        match (before, after) {
            (_, Err(_)) => Some(false),
            (Ok(a), Ok(b)) if a == b => Some(true),
            _ => None,
        }
    };
    match verdict {
        Some(same) => same,
        None => {
            frames[2] = original;
            truncate(frames, rng);
            false
        }
    }
}
