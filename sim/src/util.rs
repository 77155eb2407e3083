//! Small deterministic helpers: a fixed-key hasher for lookup tables, an id set with O(1)
//! insert, remove and random pick, and the transcript hash.

use core::hash::{BuildHasherDefault, Hasher};
use std::collections::HashMap;

/// A fast hasher with no random key (FxHash). Tables built on it are only ever probed, never
/// iterated into output, so their order cannot reach a transcript.
#[derive(Clone, Copy, Debug, Default)]
pub struct FxHasher {
    hash: u64,
}

const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(FX_SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.add(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }

    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }

    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }

    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }

    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with the fixed-key [`FxHasher`].
pub type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A set of small ids (`u32`) with O(1) insert, remove, membership and uniform random pick.
///
/// Iteration order depends only on the history of inserts and removes, so it is deterministic.
#[derive(Clone, Debug, Default)]
pub struct IdSet {
    items: Vec<u32>,
    slots: Vec<u32>,
}

const ABSENT: u32 = u32::MAX;

impl IdSet {
    /// Makes an empty set.
    pub fn new() -> IdSet {
        IdSet::default()
    }

    /// Returns the number of ids.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Reports whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Reports whether `id` is in the set.
    pub fn contains(&self, id: u32) -> bool {
        self.slots.get(id as usize).is_some_and(|&s| s != ABSENT)
    }

    /// Adds `id`; returns whether it was new.
    pub fn insert(&mut self, id: u32) -> bool {
        let i = id as usize;
        if i >= self.slots.len() {
            self.slots.resize(i + 1, ABSENT);
        }
        if self.slots[i] != ABSENT {
            return false;
        }
        self.slots[i] = self.items.len() as u32;
        self.items.push(id);
        true
    }

    /// Removes `id`; returns whether it was there.
    pub fn remove(&mut self, id: u32) -> bool {
        let i = id as usize;
        let Some(&slot) = self.slots.get(i) else {
            return false;
        };
        if slot == ABSENT {
            return false;
        }
        let last = *self.items.last().expect("a member makes the set non-empty");
        self.items.swap_remove(slot as usize);
        if last != id {
            self.slots[last as usize] = slot;
        }
        self.slots[i] = ABSENT;
        true
    }

    /// Returns the id at position `i` of the current order.
    pub fn get(&self, i: usize) -> Option<u32> {
        self.items.get(i).copied()
    }

    /// Returns the ids, in the set's (deterministic) order.
    pub fn as_slice(&self) -> &[u32] {
        &self.items
    }

    /// Removes every id.
    pub fn clear(&mut self) {
        for &id in &self.items {
            self.slots[id as usize] = ABSENT;
        }
        self.items.clear();
    }
}

/// A running FNV-1a hash of everything a run did that could differ between two runs of the same
/// seed: the effects, in order, and every query answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transcript {
    hash: u64,
    entries: u64,
}

impl Default for Transcript {
    fn default() -> Self {
        Transcript {
            hash: 0xcbf2_9ce4_8422_2325,
            entries: 0,
        }
    }
}

impl Transcript {
    /// Adds bytes.
    pub fn bytes(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.hash ^= u64::from(b);
            self.hash = self.hash.wrapping_mul(0x0100_0000_01b3);
        }
        self.entries += 1;
    }

    /// Adds a number.
    pub fn number(&mut self, n: u64) {
        self.bytes(&n.to_le_bytes());
    }

    /// Returns the hash so far.
    pub fn hash(&self) -> u64 {
        self.hash
    }

    /// Returns how many entries were added.
    pub fn entries(&self) -> u64 {
        self.entries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_set_keeps_members_after_swap_removal() {
        let mut s = IdSet::new();
        for id in [5, 1, 9, 3] {
            assert!(s.insert(id));
        }
        assert!(!s.insert(9));
        assert!(s.remove(5));
        assert!(!s.remove(5));
        assert!(s.contains(3) && s.contains(1) && s.contains(9) && !s.contains(5));
        assert_eq!(s.len(), 3);
        s.clear();
        assert!(s.is_empty() && !s.contains(3));
        assert!(s.insert(3));
    }
}
