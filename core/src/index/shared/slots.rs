//! The slab of page slots: each slot one page's words behind a version (a seqlock), in chunks
//! allocated on first use, with one CLOCK reference bit per slot.
//!
//! A slot holds the masks of a page's first [`NARROW_BITS`] objects (suffix slots) itself:
//! 12 words, 48 bytes. The masks of the objects past them live in the chunk's wide words,
//! allocated the first time a page of the chunk has one (a layout of more than 32 objects a
//! page, MHA at TP 32 and up): another 24 bytes a slot of that chunk, read and written under
//! the slot's own version like its other words. A reader that does not see the wide words yet
//! reads those objects as absent: a miss, never a hit.
//!
//! The writer makes a slot's version odd, fences (Release), stores the words (Relaxed) and
//! stores the next even version (Release). A reader loads the version (Acquire), the words
//! (Relaxed), fences (Acquire) and loads the version again: equal and even, the words are one
//! version's; otherwise it reads again, [`READ_ATTEMPTS`] times, then takes the page as a miss.
//! A reader compares the namespace and hash it read with the ones it asked for, so a slot
//! reused for another page is a miss, never a hit. A slot's version comes back to the same
//! value only after 2^31 writes to that slot.

use alloc::boxed::Box;

use once_cell::race::OnceBox;

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32, Ordering};

#[cfg(not(loom))]
use core::sync::atomic::{fence, AtomicU32, Ordering};

use crate::hash::PageHash;

/// Slots per chunk of the slab.
pub(crate) const CHUNK_SLOTS: usize = 1024;

/// Objects a slot's own mask words hold; the others are in its chunk's wide words.
pub(crate) const NARROW_BITS: u32 = 32;

/// How often a reader reads a slot again that a write raced, before it takes it as a miss.
#[cfg(not(loom))]
const READ_ATTEMPTS: usize = 4;

/// Under loom, one reading and one retry: retries only multiply the interleavings explored.
#[cfg(loom)]
const READ_ATTEMPTS: usize = 2;

/// One page as the writer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PageWords {
    /// The namespace number.
    pub(crate) ns: u32,
    /// The page hash.
    pub(crate) hash: PageHash,
    /// Objects with a memory replica.
    pub(crate) cpu: u128,
    /// Objects with a disk replica.
    pub(crate) disk: u128,
}

impl PageWords {
    /// The objects present on any medium.
    pub(crate) fn present(&self) -> u128 {
        self.cpu | self.disk
    }
}

/// One page slot: a version and 11 words (see the module docs).
struct Slot {
    version: AtomicU32,
    ns: AtomicU32,
    hash: [AtomicU32; 8],
    /// The memory mask of the first [`NARROW_BITS`] objects.
    cpu: AtomicU32,
    /// The disk mask of the first [`NARROW_BITS`] objects.
    disk: AtomicU32,
}

/// The masks of a slot's objects past the first [`NARROW_BITS`], in its chunk's wide words.
struct Wide {
    cpu: [AtomicU32; 3],
    disk: [AtomicU32; 3],
}

impl Wide {
    fn new() -> Wide {
        Wide {
            cpu: zeroes(),
            disk: zeroes(),
        }
    }
}

fn zeroes<const N: usize>() -> [AtomicU32; N] {
    core::array::from_fn(|_| AtomicU32::new(0))
}

impl Slot {
    fn new() -> Slot {
        Slot {
            version: AtomicU32::new(0),
            ns: AtomicU32::new(0),
            hash: zeroes(),
            cpu: AtomicU32::new(0),
            disk: AtomicU32::new(0),
        }
    }

    /// Reports whether the slot's words name `(ns, words)` (Relaxed loads: the writer's own
    /// words, or a reader's between its two loads of the version).
    fn names(&self, ns: u32, words: &[u32; 8]) -> bool {
        self.ns.load(Ordering::Relaxed) == ns
            && self
                .hash
                .iter()
                .zip(words)
                .all(|(a, &w)| a.load(Ordering::Relaxed) == w)
    }
}

/// A chunk of slots, their CLOCK reference bits (one bit a slot) and, once a page of the chunk
/// has an object past the first [`NARROW_BITS`], their wide words.
struct Chunk {
    slots: Box<[Slot]>,
    referenced: Box<[AtomicU32]>,
    wide: OnceBox<Box<[Wide]>>,
}

impl Chunk {
    /// Returns the memory and disk masks of `slot`, slot `idx` (Relaxed loads: the writer's own
    /// words, or a reader's between its two loads of the version).
    #[inline]
    fn masks(&self, idx: usize, slot: &Slot) -> (u128, u128) {
        let (mut cpu, mut disk) = (
            u128::from(slot.cpu.load(Ordering::Relaxed)),
            u128::from(slot.disk.load(Ordering::Relaxed)),
        );
        if let Some(wide) = self.wide.get().and_then(|w| w.get(idx % CHUNK_SLOTS)) {
            cpu |= load_wide(&wide.cpu);
            disk |= load_wide(&wide.disk);
        }
        (cpu, disk)
    }

    /// Stores the memory and disk masks of slot `idx` (inside a write of the slot).
    fn store_masks(&self, idx: usize, cpu: u128, disk: u128) {
        let slot = &self.slots[idx % CHUNK_SLOTS];
        slot.cpu.store(cpu as u32, Ordering::Relaxed);
        slot.disk.store(disk as u32, Ordering::Relaxed);
        let wide = if (cpu | disk) >> NARROW_BITS != 0 {
            Some(
                self.wide
                    .get_or_init(|| Box::new((0..self.slots.len()).map(|_| Wide::new()).collect())),
            )
        } else {
            self.wide.get()
        };
        if let Some(wide) = wide {
            let wide = &wide[idx % CHUNK_SLOTS];
            store_wide(&wide.cpu, cpu);
            store_wide(&wide.disk, disk);
        }
    }

    /// Returns the word and the bit of slot `idx`'s reference bit.
    fn reference_bit(&self, idx: usize) -> (&AtomicU32, u32) {
        (&self.referenced[idx % CHUNK_SLOTS / 32], 1 << (idx % 32))
    }
}

/// The words of a page hash.
pub(crate) fn hash_words(hash: &PageHash) -> [u32; 8] {
    core::array::from_fn(|i| {
        let b = &hash.0[i * 4..i * 4 + 4];
        u32::from_le_bytes([b[0], b[1], b[2], b[3]])
    })
}

fn words_hash(words: &[u32; 8]) -> PageHash {
    let mut h = [0u8; 32];
    for (chunk, w) in h.chunks_mut(4).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    PageHash(h)
}

/// Loads the mask bits past the first [`NARROW_BITS`] from their wide words.
fn load_wide(words: &[AtomicU32; 3]) -> u128 {
    words.iter().enumerate().fold(0u128, |m, (i, w)| {
        m | u128::from(w.load(Ordering::Relaxed)) << (NARROW_BITS as usize * (i + 1))
    })
}

/// Stores the mask bits past the first [`NARROW_BITS`] in their wide words.
fn store_wide(words: &[AtomicU32; 3], mask: u128) {
    for (i, w) in words.iter().enumerate() {
        w.store(
            (mask >> (NARROW_BITS as usize * (i + 1))) as u32,
            Ordering::Relaxed,
        );
    }
}

/// What a reader found in one slot.
pub(super) enum SlotRead {
    /// The slot holds the page asked for: its present objects, those with a memory replica, and
    /// the version read.
    Page(u128, u128, u32),
    /// The slot holds another page (or none).
    Other,
    /// Writes kept racing the read.
    Raced,
}

/// The slab (see the module docs).
pub(super) struct Slots {
    chunks: Box<[OnceBox<Chunk>]>,
    capacity: usize,
}

impl Slots {
    /// Makes a slab of `capacity` slots (no chunk allocated yet).
    pub(super) fn new(capacity: usize) -> Slots {
        Slots {
            chunks: (0..capacity.div_ceil(CHUNK_SLOTS))
                .map(|_| OnceBox::new())
                .collect(),
            capacity,
        }
    }

    /// Returns how many slots the slab has.
    pub(super) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Returns the bytes allocated: the chunk directory and the chunks in use.
    pub(super) fn allocated_bytes(&self) -> usize {
        let chunk = |c: &Chunk| {
            core::mem::size_of::<Chunk>()
                + c.slots.len() * core::mem::size_of::<Slot>()
                + c.referenced.len() * 4
                + c.wide.get().map_or(0, |w| {
                    core::mem::size_of::<Box<[Wide]>>() + w.len() * core::mem::size_of::<Wide>()
                })
        };
        self.chunks.len() * core::mem::size_of::<OnceBox<Chunk>>()
            + self
                .chunks
                .iter()
                .filter_map(OnceBox::get)
                .map(chunk)
                .sum::<usize>()
    }

    #[inline]
    fn slot(&self, idx: usize) -> Option<(&Chunk, &Slot)> {
        let chunk = self.chunks.get(idx / CHUNK_SLOTS)?.get()?;
        Some((chunk, chunk.slots.get(idx % CHUNK_SLOTS)?))
    }

    // ---- The reader's side.

    /// Reads slot `idx` for the page `(ns, words)` under its version (see the module docs),
    /// and, with `touch`, sets its reference bit when it holds the page (a query's read; a
    /// judge's read leaves the eviction order alone).
    #[inline]
    pub(super) fn read(&self, idx: usize, ns: u32, words: &[u32; 8], touch: bool) -> SlotRead {
        let Some((chunk, slot)) = self.slot(idx) else {
            return SlotRead::Other;
        };
        for _ in 0..READ_ATTEMPTS {
            let before = slot.version.load(Ordering::Acquire);
            if before & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let same = slot.names(ns, words);
            let (cpu, disk) = chunk.masks(idx, slot);
            fence(Ordering::Acquire);
            if slot.version.load(Ordering::Relaxed) != before {
                continue;
            }
            if !same {
                return SlotRead::Other;
            }
            let present = cpu | disk;
            if touch && present != 0 {
                let (word, bit) = chunk.reference_bit(idx);
                if word.load(Ordering::Relaxed) & bit == 0 {
                    word.fetch_or(bit, Ordering::Relaxed);
                }
            }
            return SlotRead::Page(present, cpu, before);
        }
        SlotRead::Raced
    }

    /// Returns slot `idx`'s version (`None`: never written), for a query checking its claims
    /// again.
    pub(super) fn version(&self, idx: usize) -> Option<u32> {
        self.slot(idx)
            .map(|(_, slot)| slot.version.load(Ordering::Relaxed))
    }

    // ---- The writer's side: only the index calls these, with `&mut` access to itself.

    /// Returns what slot `idx` holds (the writer's own last writes).
    pub(super) fn get(&self, idx: usize) -> PageWords {
        let Some((chunk, slot)) = self.slot(idx) else {
            return PageWords {
                ns: 0,
                hash: PageHash([0; 32]),
                cpu: 0,
                disk: 0,
            };
        };
        let mut words = [0u32; 8];
        for (w, a) in words.iter_mut().zip(&slot.hash) {
            *w = a.load(Ordering::Relaxed);
        }
        let (cpu, disk) = chunk.masks(idx, slot);
        PageWords {
            ns: slot.ns.load(Ordering::Relaxed),
            hash: words_hash(&words),
            cpu,
            disk,
        }
    }

    /// Reports whether slot `idx` holds the page `(ns, words)` (the writer's own last writes).
    pub(super) fn holds(&self, idx: usize, ns: u32, words: &[u32; 8]) -> bool {
        let (_, slot) = self.slot(idx).expect("a linked slot is allocated");
        slot.names(ns, words)
    }

    /// Returns the present objects of slot `idx`.
    pub(super) fn present(&self, idx: usize) -> u128 {
        self.slot(idx).map_or(0, |(chunk, slot)| {
            let (cpu, disk) = chunk.masks(idx, slot);
            cpu | disk
        })
    }

    /// Runs `write` between making slot `idx`'s version odd and even again.
    fn write(&self, idx: usize, write: impl FnOnce(&Chunk, &Slot)) {
        let chunk = self.chunks[idx / CHUNK_SLOTS].get_or_init(|| {
            let len = CHUNK_SLOTS.min(self.capacity - idx / CHUNK_SLOTS * CHUNK_SLOTS);
            Box::new(Chunk {
                slots: (0..len).map(|_| Slot::new()).collect(),
                referenced: (0..len.div_ceil(32)).map(|_| AtomicU32::new(0)).collect(),
                wide: OnceBox::new(),
            })
        });
        let slot = &chunk.slots[idx % CHUNK_SLOTS];
        let version = slot.version.load(Ordering::Relaxed);
        slot.version
            .store(version.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        write(chunk, slot);
        slot.version
            .store((version | 1).wrapping_add(1), Ordering::Release);
    }

    /// Writes a whole page into slot `idx` (a new page, or a slot reused).
    pub(super) fn put(&self, idx: usize, page: &PageWords) {
        let words = hash_words(&page.hash);
        self.write(idx, |chunk, slot| {
            slot.ns.store(page.ns, Ordering::Relaxed);
            for (a, w) in slot.hash.iter().zip(words) {
                a.store(w, Ordering::Relaxed);
            }
            chunk.store_masks(idx, page.cpu, page.disk);
        });
    }

    /// Writes the masks of slot `idx`.
    pub(super) fn set_masks(&self, idx: usize, cpu: u128, disk: u128) {
        self.write(idx, |chunk, _| chunk.store_masks(idx, cpu, disk));
    }

    /// Clears slot `idx`'s reference bit; returns whether it was set.
    pub(super) fn take_referenced(&self, idx: usize) -> bool {
        let Some((chunk, _)) = self.slot(idx) else {
            return false;
        };
        let (word, bit) = chunk.reference_bit(idx);
        word.load(Ordering::Relaxed) & bit != 0
            && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }
}
