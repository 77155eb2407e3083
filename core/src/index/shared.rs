//! The page table the writer shares with readers: page slots behind a per-slot version
//! (seqlock), an open-addressed index of `AtomicU32` bucket words over them, and one state word
//! that clears (and the session's query flags) move.
//!
//! # The protocol
//! There is one writer (the [`super::Index`], which takes `&mut self` for every change) and any
//! number of readers, which never wait, never write anything but a page's CLOCK reference bit,
//! and never see a page that was not in the table at some point during their read:
//! - **A slot** holds one page: its namespace, its 32-byte hash and its memory and disk masks,
//!   as 18 `AtomicU32` words behind a version word. The writer makes the version odd, fences
//!   (Release), stores the words (Relaxed) and stores the next even version (Release). A reader
//!   loads the version (Acquire), the words (Relaxed), fences (Acquire) and loads the version
//!   again: equal and even, the words are one version's; otherwise it reads again, a few times,
//!   then takes the page as a miss. A reader compares the namespace and hash it read with the
//!   ones it asked for, so a slot reused for another page is a miss, never a hit.
//! - **A bucket** is `0` (empty) or `tag << index_bits | slot + 1`: linear probing from the
//!   page's home bucket, the tag (the hash's low bits) skipping most foreign slots unread. The
//!   writer stores a bucket (Release) only after the slot it names is written; a reader loads it
//!   with Acquire, so the slot's words it then reads are at least that new. A removal shifts
//!   later entries back (no tombstones); a reader that raced a shift may miss, never hit wrongly,
//!   since it always checks the slot.
//! - **The state word** is `generation << (FLAG_BITS + 1) | changing << FLAG_BITS | flags`.
//!   A change that removes (a batch holding anything but keyed stores, any other input that
//!   removes, a clear) sets the changing bit and moves the generation before it writes, and
//!   moves the generation again when it ends ([`PageTable::begin_change`],
//!   [`PageTable::end_change`]): a query that overlaps it in any way reads again, so it never
//!   combines pages from before and after a removal. Batches of stores only move nothing
//!   (adds only add: what a query sees is the state before, after, or a part of the way
//!   between two batches, each page of which is in the state after). A clear empties every bucket and
//!   then bumps the generation (Release); whatever a reader reads after the new generation is of
//!   the new one. A query loads the state before its first probe (Acquire) and again after its
//!   last (after an Acquire fence): if it changed, the answer may mix two generations (or two
//!   readings of the session's flags) and is thrown away (retried, then a miss). A clear is
//!   thus atomic for readers, and a flag the writer sets before it changes pages (the session's
//!   "snapshot unproven") is seen by every query that sees those pages.
//!
//! Slots live in chunks of [`CHUNK_SLOTS`], allocated on first use (so an index sized for a
//! million pages costs little until it holds them); the bucket array is allocated whole.
//!
//! # Why this design
//! Measured first (`cargo bench -p hicache-index --bench readside`: one writer thread feeding
//! pre-encoded batches, one query thread): behind the session's `std::sync::RwLock`, a 256-page
//! hash query had p99 5.1 ms while ingesting against p50 38 µs, because a descheduled writer
//! holding the lock, or one that retakes it batch after batch, stalls every reader. Considered:
//! - *a fair hand-over* (parking_lot's `unlock_fair`): bounds the wait to one hold, but a writer
//!   descheduled while holding still stalls readers for a scheduler slice;
//! - *left-right* (two copies, readers on one while the writer changes the other): readers never
//!   wait, but it doubles the memory per page (about 180 B at TP 8, over the 96 B budget);
//! - *RCU of the whole table*: a copy per change, out of the question at a million pages;
//! - *per-slot versions* (kept): readers never wait and the memory stays one copy (72 B a slot,
//!   5.3 B of buckets, 8 B of write stamps, 1 bit of CLOCK reference per page). What it gives
//!   up: a query beside the writer sees each page as of some moment during the query, not the
//!   whole table as of one moment; a clear or a change of the session's flags makes the query
//!   read again, and a page whose writes keep racing its read is a miss.
//!
//! The protocol is model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p
//! hicache-index --release --lib loom`) and exercised at the session level by the differential
//! quickcheck with a concurrent writer (`hicache-index-tests`, `differential.rs`).

use alloc::boxed::Box;
use alloc::string::String;

use once_cell::race::OnceBox;

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32, Ordering};

#[cfg(not(loom))]
use core::sync::atomic::{fence, AtomicU32, Ordering};

use super::table::{namespace_hash, page_table_hash};
use super::MAX_SUFFIXES;
use crate::hash::PageHash;

/// Slots per chunk of the slab.
pub(crate) const CHUNK_SLOTS: usize = 1024;

/// Low bits of the state word that carry the session's query flags.
pub(crate) const FLAG_BITS: u32 = 4;

/// The state word's bit that says the writer is in the middle of a change that removes (see
/// [`PageTable::begin_change`]); the generation sits above it.
const CHANGING: u32 = 1 << FLAG_BITS;

/// Where the generation starts in the state word.
const GENERATION_SHIFT: u32 = FLAG_BITS + 1;

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

/// One page slot: a version and 18 words (see the module docs).
struct Slot {
    version: AtomicU32,
    ns: AtomicU32,
    hash: [AtomicU32; 8],
    cpu: [AtomicU32; 4],
    disk: [AtomicU32; 4],
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
            cpu: zeroes(),
            disk: zeroes(),
        }
    }
}

/// A chunk of slots and their CLOCK reference bits (one bit a slot).
struct Chunk {
    slots: Box<[Slot]>,
    referenced: Box<[AtomicU32]>,
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

fn load_mask(words: &[AtomicU32; 4]) -> u128 {
    words.iter().enumerate().fold(0u128, |m, (i, w)| {
        m | u128::from(w.load(Ordering::Relaxed)) << (32 * i)
    })
}

fn store_mask(words: &[AtomicU32; 4], mask: u128) {
    for (i, w) in words.iter().enumerate() {
        w.store((mask >> (32 * i)) as u32, Ordering::Relaxed);
    }
}

/// What a reader found in one slot.
enum SlotRead {
    /// The slot holds the page asked for: its present objects and those with a memory replica.
    Page(u128, u128),
    /// The slot holds another page (or none).
    Other,
    /// Writes kept racing the read.
    Raced,
}

/// The shared page table (see the module docs).
pub(crate) struct PageTable {
    chunks: Box<[OnceBox<Chunk>]>,
    buckets: Box<[AtomicU32]>,
    /// Bits of a bucket word that hold `slot + 1`; the rest hold the tag.
    index_bits: u32,
    capacity: usize,
    seed: u64,
    state: AtomicU32,
}

impl core::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageTable")
            .field("capacity", &self.capacity)
            .field("buckets", &self.buckets.len())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl PageTable {
    /// Makes an empty table for `capacity` pages (at least one); `seed` seeds its hash.
    pub(crate) fn new(capacity: usize, seed: u64) -> PageTable {
        let capacity = capacity.clamp(1, u32::MAX as usize - 1);
        // Load factor at most 3/4: four buckets for every three pages.
        let buckets = capacity.saturating_add(capacity / 3).max(4);
        let index_bits = 32 - (capacity as u32 + 1).leading_zeros();
        PageTable {
            chunks: (0..capacity.div_ceil(CHUNK_SLOTS))
                .map(|_| OnceBox::new())
                .collect(),
            buckets: (0..buckets).map(|_| AtomicU32::new(0)).collect(),
            index_bits,
            capacity,
            seed,
            state: AtomicU32::new(0),
        }
    }

    /// Returns the most pages the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Returns the bytes allocated: buckets, the chunk directory and the chunks in use.
    pub(crate) fn allocated_bytes(&self) -> usize {
        let chunk = |c: &Chunk| {
            core::mem::size_of::<Chunk>()
                + c.slots.len() * core::mem::size_of::<Slot>()
                + c.referenced.len() * 4
        };
        self.buckets.len() * 4
            + self.chunks.len() * core::mem::size_of::<OnceBox<Chunk>>()
            + self
                .chunks
                .iter()
                .filter_map(OnceBox::get)
                .map(chunk)
                .sum::<usize>()
    }

    /// Returns the state word: the generation and the session's flags (see the module docs).
    pub(crate) fn state(&self) -> u32 {
        self.state.load(Ordering::Acquire)
    }

    /// Returns the flags of a state word.
    pub(crate) fn flags_of(state: u32) -> u32 {
        state & ((1 << FLAG_BITS) - 1)
    }

    /// Sets the session's query flags (a new state: queries under way are answered again).
    pub(crate) fn set_flags(&self, flags: u32) {
        let state = self.state.load(Ordering::Relaxed);
        let mask = (1 << FLAG_BITS) - 1;
        if state & mask == flags & mask {
            return;
        }
        let next = (state & !mask).wrapping_add(1 << GENERATION_SHIFT) | (flags & mask);
        self.state.store(next, Ordering::Release);
    }

    /// Reports whether a state word was read while the writer was in the middle of a change
    /// that removes: a query that starts then reads again later.
    pub(crate) fn is_changing(state: u32) -> bool {
        state & CHANGING != 0
    }

    /// Reports whether a query that read `before` at its start may use what it read since: the
    /// state did not move under it, and no change that removes was under way.
    pub(crate) fn still(&self, before: u32) -> bool {
        fence(Ordering::Acquire);
        before & CHANGING == 0 && self.state.load(Ordering::Relaxed) == before
    }

    /// Marks the start of a change that removes (or may be read as removing) pages: moves the
    /// generation and sets the changing bit before any of the change is written, so that a
    /// query that reads any of it, or that starts before [`PageTable::end_change`], reads
    /// again. Idempotent while a change is under way: one move for a whole batch.
    pub(crate) fn begin_change(&self) {
        let state = self.state.load(Ordering::Relaxed);
        if state & CHANGING != 0 {
            return;
        }
        self.state.store(
            state.wrapping_add(1 << GENERATION_SHIFT) | CHANGING,
            Ordering::Relaxed,
        );
        // Like a slot's odd version: the writes that follow are ordered after the store.
        fence(Ordering::Release);
    }

    /// Marks the end of the change [`PageTable::begin_change`] started (nothing if none is
    /// under way): moves the generation again, so a query that started before reads again.
    pub(crate) fn end_change(&self) {
        let state = self.state.load(Ordering::Relaxed);
        if state & CHANGING == 0 {
            return;
        }
        self.state.store(
            (state & !CHANGING).wrapping_add(1 << GENERATION_SHIFT),
            Ordering::Release,
        );
    }

    fn home(&self, h: u64) -> usize {
        ((u128::from(h) * self.buckets.len() as u128) >> 64) as usize
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
        if i + 1 == self.buckets.len() {
            0
        } else {
            i + 1
        }
    }

    fn slot(&self, idx: usize) -> Option<(&Chunk, &Slot)> {
        let chunk = self.chunks.get(idx / CHUNK_SLOTS)?.get()?;
        Some((chunk, chunk.slots.get(idx % CHUNK_SLOTS)?))
    }

    // ---- The reader's side.

    /// Returns a page's present objects and those of them with a memory replica; `(0, 0)` when
    /// the table does not hold it, or when writes kept racing the read (a miss is safe).
    pub(crate) fn probe(&self, ns: u32, hash: &PageHash) -> (u128, u128) {
        let h = page_table_hash(self.seed, ns, hash);
        let words = hash_words(hash);
        let (tag, mask) = (self.tag(h), self.index_mask());
        let mut i = self.home(h);
        for _ in 0..self.buckets.len() {
            let bucket = self.buckets[i].load(Ordering::Acquire);
            if bucket == 0 {
                return (0, 0);
            }
            if self.tag_of(bucket) == tag {
                let idx = (bucket & mask) as usize - 1;
                match self.read(idx, ns, &words) {
                    SlotRead::Page(present, cpu) => return (present, cpu),
                    SlotRead::Other => {}
                    SlotRead::Raced => return (0, 0),
                }
            }
            i = self.next(i);
        }
        (0, 0)
    }

    /// Reads slot `idx` for the page `(ns, words)` under its version (see the module docs).
    fn read(&self, idx: usize, ns: u32, words: &[u32; 8]) -> SlotRead {
        let Some((chunk, slot)) = self.slot(idx) else {
            return SlotRead::Other;
        };
        for _ in 0..READ_ATTEMPTS {
            let before = slot.version.load(Ordering::Acquire);
            if before & 1 == 1 {
                core::hint::spin_loop();
                continue;
            }
            let same = slot.ns.load(Ordering::Relaxed) == ns
                && slot
                    .hash
                    .iter()
                    .zip(words)
                    .all(|(a, &w)| a.load(Ordering::Relaxed) == w);
            let (cpu, disk) = (load_mask(&slot.cpu), load_mask(&slot.disk));
            fence(Ordering::Acquire);
            if slot.version.load(Ordering::Relaxed) != before {
                continue;
            }
            if !same {
                return SlotRead::Other;
            }
            let present = cpu | disk;
            if present != 0 {
                let (word, bit) = (&chunk.referenced[idx % CHUNK_SLOTS / 32], 1 << (idx % 32));
                if word.load(Ordering::Relaxed) & bit == 0 {
                    word.fetch_or(bit, Ordering::Relaxed);
                }
            }
            return SlotRead::Page(present, cpu);
        }
        SlotRead::Raced
    }

    // ---- The writer's side: only the index calls these, with `&mut` access to itself.

    /// Returns what slot `idx` holds (the writer's own last writes).
    pub(crate) fn get(&self, idx: usize) -> PageWords {
        let Some((_, slot)) = self.slot(idx) else {
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
        PageWords {
            ns: slot.ns.load(Ordering::Relaxed),
            hash: words_hash(&words),
            cpu: load_mask(&slot.cpu),
            disk: load_mask(&slot.disk),
        }
    }

    /// Returns the present objects of slot `idx`.
    pub(crate) fn present(&self, idx: usize) -> u128 {
        self.slot(idx)
            .map_or(0, |(_, s)| load_mask(&s.cpu) | load_mask(&s.disk))
    }

    /// Runs `write` between making slot `idx`'s version odd and even again.
    fn write(&self, idx: usize, write: impl FnOnce(&Slot)) {
        let chunk = self.chunks[idx / CHUNK_SLOTS].get_or_init(|| {
            let len = CHUNK_SLOTS.min(self.capacity - idx / CHUNK_SLOTS * CHUNK_SLOTS);
            Box::new(Chunk {
                slots: (0..len).map(|_| Slot::new()).collect(),
                referenced: (0..len.div_ceil(32)).map(|_| AtomicU32::new(0)).collect(),
            })
        });
        let slot = &chunk.slots[idx % CHUNK_SLOTS];
        let version = slot.version.load(Ordering::Relaxed);
        slot.version
            .store(version.wrapping_add(1) | 1, Ordering::Relaxed);
        fence(Ordering::Release);
        write(slot);
        slot.version
            .store((version | 1).wrapping_add(1), Ordering::Release);
    }

    /// Writes a whole page into slot `idx` (a new page, or a slot reused).
    pub(crate) fn put(&self, idx: usize, page: &PageWords) {
        let words = hash_words(&page.hash);
        self.write(idx, |slot| {
            slot.ns.store(page.ns, Ordering::Relaxed);
            for (a, w) in slot.hash.iter().zip(words) {
                a.store(w, Ordering::Relaxed);
            }
            store_mask(&slot.cpu, page.cpu);
            store_mask(&slot.disk, page.disk);
        });
    }

    /// Writes the masks of slot `idx`.
    pub(crate) fn set_masks(&self, idx: usize, cpu: u128, disk: u128) {
        self.write(idx, |slot| {
            store_mask(&slot.cpu, cpu);
            store_mask(&slot.disk, disk);
        });
    }

    /// Clears slot `idx`'s reference bit; returns whether it was set.
    pub(crate) fn take_referenced(&self, idx: usize) -> bool {
        let Some((chunk, _)) = self.slot(idx) else {
            return false;
        };
        let (word, bit) = (&chunk.referenced[idx % CHUNK_SLOTS / 32], 1 << (idx % 32));
        word.load(Ordering::Relaxed) & bit != 0
            && word.fetch_and(!bit, Ordering::Relaxed) & bit != 0
    }

    /// Finds the slot holding `(ns, hash)`, whose table hash is `h`.
    pub(crate) fn find(&self, h: u64, ns: u32, hash: &PageHash) -> Option<usize> {
        let words = hash_words(hash);
        let (tag, mask) = (self.tag(h), self.index_mask());
        let mut i = self.home(h);
        for _ in 0..self.buckets.len() {
            let bucket = self.buckets[i].load(Ordering::Relaxed);
            if bucket == 0 {
                return None;
            }
            if self.tag_of(bucket) == tag {
                let idx = (bucket & mask) as usize - 1;
                let (_, slot) = self.slot(idx).expect("a linked slot is allocated");
                if slot.ns.load(Ordering::Relaxed) == ns
                    && slot
                        .hash
                        .iter()
                        .zip(&words)
                        .all(|(a, &w)| a.load(Ordering::Relaxed) == w)
                {
                    return Some(idx);
                }
            }
            i = self.next(i);
        }
        None
    }

    /// Links slot `idx` (already written) under table hash `h`.
    pub(crate) fn link(&self, h: u64, idx: usize) {
        let entry = self.tag(h) | (idx as u32 + 1);
        let mut i = self.home(h);
        while self.buckets[i].load(Ordering::Relaxed) != 0 {
            i = self.next(i);
        }
        self.buckets[i].store(entry, Ordering::Release);
    }

    /// Unlinks slot `idx`, linked under table hash `h`, shifting later entries back.
    pub(crate) fn unlink(&self, h: u64, idx: usize) {
        let mask = self.index_mask();
        let mut hole = self.home(h);
        loop {
            let bucket = self.buckets[hole].load(Ordering::Relaxed);
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
            let bucket = self.buckets[j].load(Ordering::Relaxed);
            if bucket == 0 {
                break;
            }
            let page = self.get((bucket & mask) as usize - 1);
            let home = self.home(page_table_hash(self.seed, page.ns, &page.hash));
            // The entry at `j` may fill the hole unless its home lies cyclically in (hole, j].
            let stays = if hole <= j {
                hole < home && home <= j
            } else {
                hole < home || home <= j
            };
            if !stays {
                self.buckets[hole].store(bucket, Ordering::Release);
                hole = j;
            }
        }
        self.buckets[hole].store(0, Ordering::Release);
    }

    /// Empties every bucket, then moves to the next generation (see the module docs). Slots keep
    /// their words until they are reused; nothing links to them.
    pub(crate) fn clear(&self) {
        for b in self.buckets.iter() {
            b.store(0, Ordering::Relaxed);
        }
        let state = self.state.load(Ordering::Relaxed);
        self.state
            .store(state.wrapping_add(1 << GENERATION_SHIFT), Ordering::Release);
    }
}

/// One namespace as readers see it: its tenant, its prefix and its suffixes, each suffix set
/// once, in slot order.
pub(crate) struct SharedNamespace {
    tenant: String,
    prefix: Option<String>,
    suffixes: Box<[OnceBox<String>]>,
}

impl SharedNamespace {
    /// Returns the slot of `suffix`, if it has one.
    pub(crate) fn slot_of(&self, suffix: &str) -> Option<u32> {
        for (slot, s) in self.suffixes.iter().enumerate() {
            match s.get() {
                Some(s) if s == suffix => return Some(slot as u32),
                Some(_) => {}
                None => return None,
            }
        }
        None
    }
}

/// Namespaces in the first segment of the directory; segment `k` holds `NS_BASE << k`.
const NS_BASE: usize = 32;

/// Segments of the directory: enough for `u32::MAX / 2` namespaces.
const NS_SEGMENTS: usize = 27;

/// One segment of the namespace directory: its set-once entries and the open-addressed index
/// over them (twice as many buckets as entries).
struct NsSegment {
    entries: Box<[OnceBox<SharedNamespace>]>,
    buckets: Box<[AtomicU32]>,
}

/// The namespaces, append-only, for readers: segments of set-once entries, each with its own
/// open-addressed index, allocated on first use and doubling in size (so a high cap costs
/// nothing until namespaces come; a reader looks in at most a handful of segments).
pub(crate) struct SharedNamespaces {
    segments: [OnceBox<NsSegment>; NS_SEGMENTS],
    capacity: usize,
    seed: u64,
}

impl core::fmt::Debug for SharedNamespaces {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedNamespaces")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// Returns the segment of namespace `ns` and its place in it.
fn ns_segment(ns: usize) -> (usize, usize) {
    let n = ns / NS_BASE + 1;
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (k, ns - NS_BASE * ((1 << k) - 1))
}

impl SharedNamespaces {
    /// Makes an empty directory for `capacity` namespaces (nothing allocated yet).
    pub(crate) fn new(capacity: usize, seed: u64) -> SharedNamespaces {
        SharedNamespaces {
            segments: core::array::from_fn(|_| OnceBox::new()),
            capacity: capacity.min(u32::MAX as usize / 2),
            seed,
        }
    }

    /// Returns the bytes allocated.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.segments
            .iter()
            .filter_map(OnceBox::get)
            .map(|seg| {
                core::mem::size_of::<NsSegment>()
                    + seg.entries.len() * core::mem::size_of::<OnceBox<SharedNamespace>>()
                    + seg.buckets.len() * 4
                    + seg
                        .entries
                        .iter()
                        .filter_map(OnceBox::get)
                        .map(|n| {
                            core::mem::size_of::<SharedNamespace>()
                                + n.tenant.capacity()
                                + n.prefix.as_ref().map_or(0, String::capacity)
                                + n.suffixes.len() * core::mem::size_of::<OnceBox<String>>()
                                + n.suffixes
                                    .iter()
                                    .filter_map(OnceBox::get)
                                    .map(|s| s.capacity() + core::mem::size_of::<String>())
                                    .sum::<usize>()
                        })
                        .sum::<usize>()
            })
            .sum()
    }

    fn entry(&self, ns: u32) -> Option<&SharedNamespace> {
        let (k, i) = ns_segment(ns as usize);
        self.segments.get(k)?.get()?.entries.get(i)?.get()
    }

    /// Finds a namespace by tenant and prefix; returns its number and entry.
    pub(crate) fn find(
        &self,
        tenant: &str,
        prefix: Option<&str>,
    ) -> Option<(u32, &SharedNamespace)> {
        let h = namespace_hash(self.seed, tenant, prefix);
        for seg in self.segments.iter().map_while(OnceBox::get) {
            let len = seg.buckets.len();
            let mut i = (h % len as u64) as usize;
            for _ in 0..len {
                let bucket = seg.buckets[i].load(Ordering::Acquire);
                if bucket == 0 {
                    break;
                }
                let ns = bucket - 1;
                if let Some(entry) = self.entry(ns) {
                    if entry.tenant == tenant && entry.prefix.as_deref() == prefix {
                        return Some((ns, entry));
                    }
                }
                i = (i + 1) % len;
            }
        }
        None
    }

    /// Adds namespace `ns` (the next number; the writer only).
    pub(crate) fn add(&self, ns: u32, tenant: &str, prefix: Option<&str>) {
        if ns as usize >= self.capacity {
            return;
        }
        let (k, i) = ns_segment(ns as usize);
        let Some(cell) = self.segments.get(k) else {
            return;
        };
        let seg = cell.get_or_init(|| {
            let len = NS_BASE << k;
            Box::new(NsSegment {
                entries: (0..len).map(|_| OnceBox::new()).collect(),
                buckets: (0..2 * len).map(|_| AtomicU32::new(0)).collect(),
            })
        });
        let fresh = Box::new(SharedNamespace {
            tenant: tenant.into(),
            prefix: prefix.map(String::from),
            suffixes: (0..MAX_SUFFIXES).map(|_| OnceBox::new()).collect(),
        });
        if seg.entries[i].set(fresh).is_err() {
            return;
        }
        let len = seg.buckets.len();
        let mut b = (namespace_hash(self.seed, tenant, prefix) % len as u64) as usize;
        while seg.buckets[b].load(Ordering::Relaxed) != 0 {
            b = (b + 1) % len;
        }
        seg.buckets[b].store(ns + 1, Ordering::Release);
    }

    /// Adds suffix `slot` of namespace `ns` (the next slot; the writer only).
    pub(crate) fn add_suffix(&self, ns: u32, slot: u32, suffix: &str) {
        if let Some(s) = self.entry(ns).and_then(|n| n.suffixes.get(slot as usize)) {
            let _ = s.set(Box::new(suffix.into()));
        }
    }
}

/// What the index shares with its readers.
#[derive(Debug)]
pub(crate) struct Shared {
    /// The pages.
    pub(crate) pages: PageTable,
    /// The namespaces.
    pub(crate) namespaces: SharedNamespaces,
}

#[allow(dead_code)]
fn _assert_sync() {
    fn is_sync<T: Sync + Send>() {}
    is_sync::<Shared>();
}

/// The words of a page, for tests.
#[cfg(test)]
pub(crate) fn page(ns: u32, hash: PageHash, cpu: u128, disk: u128) -> PageWords {
    PageWords {
        ns,
        hash,
        cpu,
        disk,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn hash(i: u8) -> PageHash {
        PageHash([i; 32])
    }

    #[test]
    fn a_linked_page_is_found_and_an_unlinked_one_misses() {
        let t = PageTable::new(64, 7);
        let mut linked = Vec::new();
        for i in 0..40u8 {
            let idx = i as usize;
            t.put(idx, &page(1, hash(i), 1 << i, 0));
            t.link(page_table_hash(7, 1, &hash(i)), idx);
            linked.push(i);
        }
        for &i in &linked {
            assert_eq!(t.probe(1, &hash(i)), (1 << i, 1 << i));
            assert_eq!(t.probe(2, &hash(i)), (0, 0), "another namespace");
        }
        for i in (0..40u8).step_by(3) {
            t.unlink(page_table_hash(7, 1, &hash(i)), i as usize);
        }
        for i in 0..40u8 {
            let want = if i % 3 == 0 { (0, 0) } else { (1 << i, 1 << i) };
            assert_eq!(t.probe(1, &hash(i)), want, "page {i} after the shifts");
            assert_eq!(
                t.find(page_table_hash(7, 1, &hash(i)), 1, &hash(i))
                    .is_some(),
                i % 3 != 0
            );
        }
    }

    #[test]
    fn a_query_that_overlaps_a_change_that_removes_reads_again() {
        // The loom model's schedule, in one thread: page 1 read, then page 1 goes and page 2
        // comes in one change, then page 2 read.
        let t = PageTable::new(4, 7);
        t.put(0, &page(0, hash(1), 1, 0));
        t.link(page_table_hash(7, 0, &hash(1)), 0);
        t.put(1, &page(0, hash(2), 2, 0));
        let before = t.state();
        assert_eq!(t.probe(0, &hash(1)).0, 1);
        t.begin_change();
        t.unlink(page_table_hash(7, 0, &hash(1)), 0);
        t.link(page_table_hash(7, 0, &hash(2)), 1);
        let during = t.state();
        assert!(PageTable::is_changing(during));
        assert_eq!(t.probe(0, &hash(2)).0, 2);
        assert!(!t.still(before), "both pages read across the removal");
        assert!(!t.still(during), "a query that began during the change");
        t.end_change();
        let after = t.state();
        assert!(!PageTable::is_changing(after) && t.still(after));
        t.end_change();
        assert!(t.still(after), "end_change without a change moves nothing");
    }

    #[test]
    fn a_clear_moves_the_generation_and_empties_every_bucket() {
        let t = PageTable::new(8, 7);
        t.put(0, &page(0, hash(1), 0, 1));
        t.link(page_table_hash(7, 0, &hash(1)), 0);
        let before = t.state();
        assert!(t.still(before));
        t.clear();
        assert!(!t.still(before));
        assert_eq!(t.probe(0, &hash(1)), (0, 0));
        assert_eq!(PageTable::flags_of(t.state()), 0);
        let s = t.state();
        t.set_flags(5);
        assert!(!t.still(s));
        assert_eq!(PageTable::flags_of(t.state()), 5);
    }

    // ---- Review: a query's pages must come from one state of the index.

    use crate::index::{Index, IndexConfig};
    use crate::layout::{Layout, SglangParams};

    /// A two-object page layout (TP 2: `_0_k`, `_0_v`, ... whatever the layout names).
    fn review_layout() -> Layout {
        Layout::from_sglang(&SglangParams::new(4, 2)).expect("a valid layout")
    }

    fn store_page(index: &mut Index, layout: &Layout, page: &PageHash) {
        for pool in &layout.pools {
            for suffix in &pool.suffixes {
                let mut key = String::new();
                layout.write_object_key(page, suffix, &mut key);
                let _ = index.store("default", &key, None, None);
            }
        }
    }

    fn remove_one_object(index: &mut Index, layout: &Layout, page: &PageHash) {
        let mut key = String::new();
        layout.write_object_key(page, &layout.pools[0].suffixes[0], &mut key);
        let _ = index.remove("default", &key);
    }

    /// Runs a query the way [`crate::reader::Reader`] does (state, probes, `still`), with `between`
    /// run by the writer after the first page was probed and before the second is: returns
    /// the prefix the reader would answer, `None` when it would read again.
    fn query_with_writer_between(
        index: &mut Index,
        layout: &Layout,
        pages: [PageHash; 2],
        between: impl FnOnce(&mut Index),
    ) -> Option<usize> {
        let shared = index.shared();
        let before = shared.pages.state();
        let mut between = Some(between);
        let mut i = 0;
        let iter = core::iter::from_fn(|| {
            if i == 1 {
                (between.take().expect("once"))(index);
            }
            i += 1;
            pages.get(i - 1).copied()
        });
        let hits = shared.query("default", layout, iter, None);
        shared.pages.still(before).then_some(hits.prefix_pages)
    }

    #[test]
    fn a_query_never_mixes_pages_from_before_and_after_a_tenant_clear() {
        // A publisher's `cleared` names its tenant (the master always sends `tenant_id`):
        // the session applies it with `Index::clear_tenant`, which must be as atomic for
        // readers as `Index::clear`.
        let layout = review_layout();
        let (p0, p1) = (PageHash([1; 32]), PageHash([2; 32]));
        let mut index = Index::new(IndexConfig::default());
        store_page(&mut index, &layout, &p0);
        let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
            let _ = index.clear_tenant("default");
            store_page(index, &layout, &p1);
        });
        assert_ne!(
            answer,
            Some(2),
            "page 0 read before the tenant clear, page 1 stored after it: both claimed"
        );
        // The same with a whole clear is thrown away (the generation moved): the control.
        let mut index = Index::new(IndexConfig::default());
        store_page(&mut index, &layout, &p0);
        let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
            let _ = index.clear();
            store_page(index, &layout, &p1);
        });
        assert_ne!(answer, Some(2));
    }

    #[test]
    fn a_query_never_claims_two_pages_that_were_never_present_together() {
        // Page 0 loses an object (one input), then page 1 is stored (the next input): between
        // no two inputs are both pages full, so no answer of `Session::query` between two
        // calls is 2 (what the reader's docs promise it answers).
        let layout = review_layout();
        let (p0, p1) = (PageHash([1; 32]), PageHash([2; 32]));
        let mut index = Index::new(IndexConfig::default());
        store_page(&mut index, &layout, &p0);
        let answer = query_with_writer_between(&mut index, &layout, [p0, p1], |index| {
            remove_one_object(index, &layout, &p0);
            store_page(index, &layout, &p1);
        });
        assert_ne!(
            answer,
            Some(2),
            "page 0 was removed before page 1 was stored, yet both were claimed"
        );
    }

    #[test]
    fn namespaces_past_the_first_segments_are_found() {
        let dir = SharedNamespaces::new(1 << 20, 7);
        let names: Vec<String> = (0..300).map(|i| alloc::format!("t{i}")).collect();
        for (ns, t) in names.iter().enumerate() {
            dir.add(ns as u32, t, Some("p"));
            dir.add_suffix(ns as u32, 0, "_k");
        }
        for (ns, t) in names.iter().enumerate() {
            let (found, entry) = dir.find(t, Some("p")).expect("added");
            assert_eq!(found, ns as u32);
            assert_eq!(entry.slot_of("_k"), Some(0));
            assert!(dir.find(t, None).is_none());
        }
        assert_eq!(ns_segment(0), (0, 0));
        assert_eq!(ns_segment(NS_BASE), (1, 0));
        assert_eq!(ns_segment(3 * NS_BASE), (2, 0));
    }

    #[test]
    fn the_namespace_cap_costs_nothing_until_namespaces_come() {
        // Before the shared directory, namespaces grew on demand: a high cap (or `usize::MAX`
        // for "no cap", which now asks for 2^31 entries and 2^32 buckets, 32 GiB, at
        // `Session::new`) cost nothing up front. The slab's chunks are allocated on first use
        // for the same reason.
        let config = |max_namespaces| IndexConfig {
            max_pages: 1024,
            max_namespaces,
            ..IndexConfig::default()
        };
        let small = Index::new(config(1)).allocated_bytes();
        let high = Index::new(config(1 << 20)).allocated_bytes();
        assert!(
            high - small < 64 * 1024,
            "an empty index with room for 2^20 namespaces allocates {high} bytes, {small} with 1"
        );
    }
}

/// The model test of the read/write protocol: every interleaving (up to a preemption bound)
/// and every reordering the memory model allows, explored by loom. Run with
/// `RUSTFLAGS="--cfg loom" cargo test -p hicache-index --release --lib loom`.
#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;

    const SEED: u64 = 3;

    fn hash(i: u8) -> PageHash {
        PageHash([i; 32])
    }

    /// A mask with `k` in every word: a read that mixed two writes shows two values.
    fn mask(k: u32) -> u128 {
        let k = u128::from(k);
        k | k << 32 | k << 64 | k << 96
    }

    fn h(i: u8) -> u64 {
        page_table_hash(SEED, 0, &hash(i))
    }

    /// A table holding page 1 in slot 0 with memory mask `mask(1)`.
    fn table() -> Arc<PageTable> {
        let t = PageTable::new(4, SEED);
        t.put(0, &page(0, hash(1), mask(1), 0));
        t.link(h(1), 0);
        Arc::new(t)
    }

    // A reader racing a slot's whole rewrite for another page (20 stores, each load free to
    // read either write) ran loom for over 20 minutes even with one preemption; that case is
    // left to the unit tests and the concurrent differential quickcheck.
    fn model(f: impl Fn() + Sync + Send + 'static) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(f);
    }

    #[test]
    fn loom_a_reader_sees_one_version_of_a_page_or_a_miss() {
        model(|| {
            let t = table();
            let w = Arc::clone(&t);
            let writer = loom::thread::spawn(move || {
                w.set_masks(0, mask(2), mask(3));
            });
            let (present, cpu) = t.probe(0, &hash(1));
            let seen = [(mask(1), mask(1)), (mask(2) | mask(3), mask(2)), (0, 0)];
            assert!(seen.contains(&(present, cpu)), "torn: {present:x} {cpu:x}");
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_a_query_that_keeps_its_state_never_mixes_two_generations() {
        model(|| {
            let t = table();
            let w = Arc::clone(&t);
            let writer = loom::thread::spawn(move || {
                w.clear();
                // The same page again after the clear, in another slot, with other masks.
                w.put(1, &page(0, hash(1), mask(5), 0));
                w.link(h(1), 1);
            });
            let before = t.state();
            let got = t.probe(0, &hash(1));
            if t.still(before) {
                let want = if before == 0 { mask(1) } else { mask(5) };
                assert!(
                    got == (want, want) || got == (0, 0),
                    "{got:x?} in state {before}"
                );
            }
            writer.join().unwrap();
        });
    }

    #[test]
    fn loom_a_flag_set_before_a_change_is_seen_by_a_query_that_sees_the_change() {
        model(|| {
            let t = table();
            let w = Arc::clone(&t);
            let writer = loom::thread::spawn(move || {
                w.set_flags(8);
                w.set_masks(0, mask(1), mask(9));
            });
            let before = t.state();
            let (present, _) = t.probe(0, &hash(1));
            if t.still(before) && present == mask(1) | mask(9) {
                assert_eq!(
                    PageTable::flags_of(before),
                    8,
                    "the change without its flag"
                );
            }
            writer.join().unwrap();
        });
    }
}
