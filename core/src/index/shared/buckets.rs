//! The open-addressed index over the slots: `AtomicU32` bucket words, linear probing, no
//! tombstones.
//!
//! A bucket is `0` (empty) or `tag << index_bits | slot + 1`: linear probing from the page's
//! home bucket, the tag (the hash's low bits) skipping most foreign slots unread. The writer
//! stores a bucket (Release) only after the slot it names is written; a reader loads it with
//! Acquire, so the slot's words it then reads are at least that new. A removal shifts later
//! entries back (no tombstones); a reader that raced a shift may miss, never hit wrongly, since
//! it always checks the slot. The table is never full (four buckets for every three slots), so
//! every probe and every run of non-empty buckets ends.

use alloc::boxed::Box;

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, Ordering};

use crate::hash::PageHash;

use super::super::hashing::page_table_hash;
use super::claims::SlotAt;
use super::slots::{hash_words, SlotRead, Slots};

/// A clear sweeps every bucket when the slots used times this reach the buckets, and empties
/// the buckets from the home of each page held otherwise (see [`Buckets::clear`]). Measured
/// (`cargo bench -p hicache-index-bench --bench clear`, 1M pages): a page held costs about 12-22 ns
/// (its bucket is a cache miss), a bucket swept about 0.2 ns.
#[cfg(not(loom))]
pub(crate) const SWEEP_ABOVE: usize = 128;

/// Under loom, small enough that a table of 16 pages empties from the homes and one of 4
/// sweeps.
#[cfg(loom)]
pub(crate) const SWEEP_ABOVE: usize = 8;

/// The bucket words (see the module docs).
pub(super) struct Buckets {
    pub(super) words: Box<[AtomicU32]>,
    /// Bits of a bucket word that hold `slot + 1`; the rest hold the tag.
    index_bits: u32,
    seed: u64,
}

impl Buckets {
    /// Makes the empty buckets for `capacity` slots (at least one); `seed` seeds the table
    /// hash.
    pub(super) fn new(capacity: usize, seed: u64) -> Buckets {
        // Load factor at most 3/4: four buckets for every three pages.
        let len = capacity.saturating_add(capacity / 3).max(4);
        Buckets {
            words: (0..len).map(|_| AtomicU32::new(0)).collect(),
            index_bits: 32 - (capacity as u32 + 1).leading_zeros(),
            seed,
        }
    }

    /// Returns how many buckets there are.
    pub(super) fn len(&self) -> usize {
        self.words.len()
    }

    /// Returns a page's home bucket, from its table hash.
    pub(super) fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.words.len() as u128) >> 64) as usize
    }

    fn tag(&self, h: u64) -> u32 {
        (h as u32).checked_shl(self.index_bits).unwrap_or(0)
    }

    fn tag_of(&self, bucket: u32) -> u32 {
        bucket & !self.index_mask()
    }

    fn index_mask(&self) -> u32 {
        (1u32.checked_shl(self.index_bits).unwrap_or(0)).wrapping_sub(1)
    }

    fn next(&self, i: usize) -> usize {
        if i + 1 == self.words.len() {
            0
        } else {
            i + 1
        }
    }

    fn table_hash(&self, ns: u32, hash: &PageHash) -> u64 {
        page_table_hash(self.seed, ns, hash)
    }

    // ---- The reader's side.

    /// Returns a page's present objects, those of them with a memory replica, and where it was
    /// read; `(0, 0, None)` when no slot linked holds it, or when writes kept racing the read
    /// (a miss is safe).
    pub(super) fn probe(
        &self,
        slots: &Slots,
        ns: u32,
        hash: &PageHash,
        touch: bool,
    ) -> (u128, u128, Option<SlotAt>) {
        let h = self.table_hash(ns, hash);
        let words = hash_words(hash);
        let (tag, mask) = (self.tag(h), self.index_mask());
        let mut i = self.home(h);
        for _ in 0..self.words.len() {
            let bucket = self.words[i].load(Ordering::Acquire);
            if bucket == 0 {
                return (0, 0, None);
            }
            if self.tag_of(bucket) == tag {
                let idx = (bucket & mask) as usize - 1;
                match slots.read(idx, ns, &words, touch) {
                    SlotRead::Page(present, cpu, version) => {
                        return (present, cpu, Some(SlotAt::new(idx, version)));
                    }
                    SlotRead::Other => {}
                    SlotRead::Raced => return (0, 0, None),
                }
            }
            i = self.next(i);
        }
        (0, 0, None)
    }

    // ---- The writer's side.

    /// Finds the slot holding `(ns, hash)`, whose table hash is `h`.
    pub(super) fn find(&self, slots: &Slots, h: u64, ns: u32, hash: &PageHash) -> Option<usize> {
        let words = hash_words(hash);
        let (tag, mask) = (self.tag(h), self.index_mask());
        let mut i = self.home(h);
        for _ in 0..self.words.len() {
            let bucket = self.words[i].load(Ordering::Relaxed);
            if bucket == 0 {
                return None;
            }
            if self.tag_of(bucket) == tag {
                let idx = (bucket & mask) as usize - 1;
                if slots.holds(idx, ns, &words) {
                    return Some(idx);
                }
            }
            i = self.next(i);
        }
        None
    }

    /// Links slot `idx` (already written) under table hash `h`.
    pub(super) fn link(&self, h: u64, idx: usize) {
        let entry = self.tag(h) | (idx as u32 + 1);
        let mut i = self.home(h);
        while self.words[i].load(Ordering::Relaxed) != 0 {
            i = self.next(i);
        }
        self.words[i].store(entry, Ordering::Release);
    }

    /// Unlinks slot `idx`, linked under table hash `h`, shifting later entries back.
    pub(super) fn unlink(&self, slots: &Slots, h: u64, idx: usize) {
        let mask = self.index_mask();
        let mut hole = self.home(h);
        loop {
            let bucket = self.words[hole].load(Ordering::Relaxed);
            if bucket == 0 {
                return;
            }
            if (bucket & mask) as usize == idx + 1 {
                break;
            }
            hole = self.next(hole);
        }
        let mut j = hole;
        loop {
            j = self.next(j);
            let bucket = self.words[j].load(Ordering::Relaxed);
            if bucket == 0 {
                break;
            }
            let page = slots.get((bucket & mask) as usize - 1);
            let home = self.home(self.table_hash(page.ns, &page.hash));
            // The entry at `j` may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.words[hole].store(bucket, Ordering::Release);
                hole = j;
            }
        }
        self.words[hole].store(0, Ordering::Release);
    }

    /// Empties every bucket (Relaxed: a clear is a bracketed change, see the state word).
    ///
    /// `used` is how many slots were written since the last clear (slots `0..used`; the pages
    /// held are among them): the clear costs what they hold, not the table's capacity. Few
    /// slots used, it empties the buckets from each held page's home on; many, every bucket (a
    /// sequential sweep beats that many scattered reads).
    pub(super) fn clear(&self, slots: &Slots, used: usize) {
        if used.saturating_mul(SWEEP_ABOVE) >= self.words.len() {
            for b in self.words.iter() {
                b.store(0, Ordering::Relaxed);
            }
            return;
        }
        for idx in 0..used.min(slots.capacity()) {
            // A slot is linked exactly while its page holds an object.
            if slots.present(idx) != 0 {
                let page = slots.get(idx);
                self.empty_from(self.home(self.table_hash(page.ns, &page.hash)));
            }
        }
    }

    /// Empties bucket `i` and the buckets after it up to the first empty one. Linear probing
    /// keeps every bucket from an entry's home to its own non-empty, and this keeps that true
    /// (what it empties ends at an empty bucket): run from the home of every page held, it
    /// takes every entry, and empties each bucket once.
    fn empty_from(&self, mut i: usize) {
        while self.words[i].load(Ordering::Relaxed) != 0 {
            self.words[i].store(0, Ordering::Relaxed);
            i = self.next(i);
        }
    }
}
