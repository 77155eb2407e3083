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
//! - **Removals** (a keyed removal, an eviction) are written in the page's slot before its
//!   bucket is unlinked, and move the removal count to odd first and to even when the input
//!   ends ([`PageTable::begin_removal`], [`PageTable::end_change`]). A query that overlapped
//!   none (the same even count at its start and end) keeps its answer: stores only add, so
//!   every page it claims was in the table at its end. One that overlapped some checks again,
//!   after reading every page, that the slot of each page it claims holds the version it read
//!   there ([`Claims`], in a buffer on the query's stack: a *double collect*). If so, the pages
//!   were in the table together: let `k` be the latest write the query read; every write before
//!   `k` happens before the check (the query acquired `k`), so a slot written after the
//!   version the query read, and before `k`, would show a new version. Each claimed slot thus
//!   held what the query read once the writer had made write `k`: a point of the stream's own
//!   history (the events of a batch apply in the master's order). Otherwise it reads again.
//!   A slot's version would come back to the same value only after 2^31 writes to that one
//!   slot during one query.
//! - **The state word** is `generation << (FLAG_BITS + 1) | changing << FLAG_BITS | flags`.
//!   A change that must be read again (a batch holding an event that names no object, whose
//!   removals are of unknown extent and end in a clear; a clear) sets the changing bit and
//!   moves the generation before it writes, and moves the generation again when it ends
//!   ([`PageTable::begin_change`], [`PageTable::end_change`]): a query that overlaps it in any
//!   way reads again, so it never claims a page the clear takes. A clear empties every bucket and
//!   then bumps the generation (Release); whatever a reader reads after the new generation is of
//!   the new one. A query loads the state before its first probe (Acquire) and again after its
//!   last (after an Acquire fence): if it changed, the answer may mix two generations (or two
//!   readings of the session's flags) and is thrown away (retried, then `Busy`). The state a
//!   query checks also counts the turns of the generation and of the removal count
//!   ([`State`]), so a query descheduled for a whole turn of either still reads again. A clear is
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
//!   up: a clear, a batch of doubt or a change of the session's flags makes a query read again,
//!   and so does a removal or a store written in a page it claims while it reads; a page whose
//!   writes keep racing its read is a miss.
//!
//! Removals were first bracketed like clears, a batch that removes making every query that
//! overlapped it read again. With every other batch removing, 4.2 % of the bench's queries
//! read three times in a row and fell back to the session's lock (`QueryError::Busy`). The
//! double collect keeps the answers of queries whose pages the removals did not touch.
//!
//! Tried to make a cold probe cheaper, and not kept (the read-side bench, the same 256-page
//! hash query, queries alternating between the two variants so that both see the same
//! machine; this virtualised host moves the p50 between 15 and 30 µs within a minute):
//! - *warming a group of pages first* with plain loads (their home buckets, then the slots
//!   those name, values thrown away, groups of 8 to 32 pages): p50 at best 20 % lower, p99 no
//!   better and with groups of 32 worse. A plain load holds its place in the reorder buffer
//!   until its data comes, so it overlaps little more than the probes themselves do;
//! - *a prefetch instruction* (`_mm_prefetch`, tried with `unsafe`, which this crate forbids),
//!   two and one groups of 4 to 16 pages ahead: p50 15–20 % lower, p99 not consistently lower;
//! - *huge pages* for the table (glibc's `glibc.malloc.hugetlb=1`): no difference.
//!
//! The same query over the same 256 pages every time (their memory cached) has p50 10–11 µs
//! and p99 15–29 µs in the bench; cold, p50 15–26 µs. The tail is the query's own execution:
//! its CPU time (which excludes steal, but not interrupts) has about the p99 of its wall
//! time, writer or not.
//!
//! The protocol is model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p
//! hicache-index --release --lib loom`) and exercised at the session level by the differential
//! quickcheck with a concurrent writer (`hicache-index-tests`, `differential.rs`).

use alloc::boxed::Box;

use once_cell::race::OnceBox;

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32, Ordering};

#[cfg(not(loom))]
use core::sync::atomic::{fence, AtomicU32, Ordering};

use super::table::page_table_hash;
use crate::hash::PageHash;

/// Slots per chunk of the slab.
pub(crate) const CHUNK_SLOTS: usize = 1024;

/// A clear sweeps every bucket when the slots used times this reach the buckets, and empties
/// the buckets from the home of each page held otherwise (see [`PageTable::clear`]). Measured
/// (`cargo bench -p hicache-index --bench clear`, 1M pages): a page held costs about 22 ns
/// (its bucket is a cache miss), a bucket swept about 0.2 ns.
#[cfg(not(loom))]
pub(crate) const SWEEP_ABOVE: usize = 128;

/// Under loom, small enough that a table of 16 pages empties from the homes and one of 4
/// sweeps.
#[cfg(loom)]
pub(crate) const SWEEP_ABOVE: usize = 8;

/// Low bits of the state word that carry the session's query flags.
pub(crate) const FLAG_BITS: u32 = 4;

/// The state word's bit that says the writer is in the middle of a bracketed change (see
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
    /// The slot holds the page asked for: its present objects, those with a memory replica, and
    /// the version read.
    Page(u128, u128, u32),
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
    /// How many removals the writer began and ended: odd while one is under way (see
    /// [`PageTable::begin_removal`]).
    removals: AtomicU32,
    /// How many times the state word's generation, or the removal count, went all the way
    /// round: stored after the word that wrapped, read before it (see [`State`]).
    turns: AtomicU32,
}

/// What a query reads of the state at its start, to check at its end ([`PageTable::still`]):
/// the state word, and how many turns its generation had made. The generation alone (27 bits)
/// comes back to the same value after 2^27 moves; a query descheduled that long would take the
/// table as unchanged. With the turns, the pair repeats only after 2^59 moves.
///
/// Why the order works: the writer stores the state word that wraps, then the turn; a query
/// loads the turns, then the word (Acquire both). A query that saw a turn sees the word that
/// wrapped, or a later one; one that ends on the word it began with after a whole turn read a
/// word stored after that turn, so it sees the turn too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State {
    word: u32,
    turns: u32,
    /// The removal count (see [`PageTable::begin_removal`]), loaded after the word.
    removals: u32,
}

/// Where a reader found a page it claims: the slot and the (even) version it read there, to be
/// checked again once the query has read every page ([`PageTable::unchanged`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotAt {
    idx: u32,
    version: u32,
}

/// How many claimed pages a query can check again after a removal overlapped it: more, and
/// such a query reads again instead (a query of more pages beside a stream that keeps
/// removing may answer [`crate::QueryError::Busy`]).
#[cfg(not(loom))]
pub(crate) const CLAIMS: usize = 512;

/// Under loom, a handful.
#[cfg(loom)]
pub(crate) const CLAIMS: usize = 4;

/// The slots of the pages a query claims, in a buffer the query owns (on its stack): what it
/// checks again when a removal overlapped it (see the module docs).
#[derive(Debug)]
pub(crate) struct Claims {
    slots: [SlotAt; CLAIMS],
    len: usize,
    overflowed: bool,
}

impl Claims {
    /// Makes an empty buffer.
    pub(crate) fn new() -> Claims {
        Claims {
            slots: [SlotAt::default(); CLAIMS],
            len: 0,
            overflowed: false,
        }
    }

    /// Forgets what was recorded (a query that reads again).
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.overflowed = false;
    }

    /// Reports whether every slot recorded still holds the version read there (and none was
    /// left unrecorded for want of room).
    pub(crate) fn unchanged(&self, pages: &PageTable) -> bool {
        !self.overflowed && self.slots[..self.len].iter().all(|&at| pages.unchanged(at))
    }

    /// Records a slot a claimed page was read in.
    pub(crate) fn push(&mut self, at: SlotAt) {
        match self.slots.get_mut(self.len) {
            Some(slot) => {
                *slot = at;
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }
}

/// How a query may use what it read (see [`PageTable::still`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Still {
    /// Nothing it reads moved under it: the answer stands.
    Yes,
    /// Only removals overlapped it: the answer stands if every slot it claims a page from is
    /// [`PageTable::unchanged`].
    IfUnchanged,
    /// The state moved: the answer may mix two states, and is read again.
    No,
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
            removals: AtomicU32::new(0),
            turns: AtomicU32::new(0),
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

    /// Returns the state: the generation and the session's flags (see the module docs).
    pub(crate) fn state(&self) -> State {
        let turns = self.turns.load(Ordering::Acquire);
        let word = self.state.load(Ordering::Acquire);
        let removals = self.removals.load(Ordering::Acquire);
        State {
            word,
            turns,
            removals,
        }
    }

    /// Returns the flags of a state.
    pub(crate) fn flags_of(state: State) -> u32 {
        state.word & ((1 << FLAG_BITS) - 1)
    }

    /// Stores the next state word (Release), and counts a turn of the generation after a word
    /// that wrapped (the writer only).
    fn move_state(&self, current: u32, next: u32) {
        self.state.store(next, Ordering::Release);
        if next >> GENERATION_SHIFT < current >> GENERATION_SHIFT {
            self.turn();
        }
    }

    /// Counts a turn of the state word's generation or of the removal count (the writer only,
    /// after storing the word that wrapped).
    fn turn(&self) {
        let turns = self.turns.load(Ordering::Relaxed);
        self.turns.store(turns.wrapping_add(1), Ordering::Release);
    }

    /// Moves the removal count on by one (the writer only).
    fn move_removals(&self, current: u32) {
        let next = current.wrapping_add(1);
        self.removals.store(next, Ordering::Release);
        if next == 0 {
            self.turn();
        }
    }

    /// Sets the session's query flags (a new state: queries under way are answered again).
    pub(crate) fn set_flags(&self, flags: u32) {
        let state = self.state.load(Ordering::Relaxed);
        let mask = (1 << FLAG_BITS) - 1;
        if state & mask == flags & mask {
            return;
        }
        let next = (state & !mask).wrapping_add(1 << GENERATION_SHIFT) | (flags & mask);
        self.move_state(state, next);
    }

    /// Reports whether a state word was read while the writer was in the middle of a change
    /// that is bracketed: a query that starts then reads again later.
    pub(crate) fn is_changing(state: State) -> bool {
        state.word & CHANGING != 0
    }

    /// Reports how a query that read `before` at its start may use what it read since:
    /// [`Still::Yes`] when the state did not move under it and no removal overlapped it;
    /// [`Still::IfUnchanged`] when removals overlapped it, but nothing else did: the pages it
    /// claims stand if their slots are [`PageTable::unchanged`]; [`Still::No`] when a change
    /// that must be read again (a clear, a change of the flags, a change the writer brackets)
    /// overlapped it.
    pub(crate) fn still(&self, before: State) -> Still {
        // The removal count before the turns: a count that came round to the same value was
        // stored after its turn (see `State`).
        let removals = self.removals.load(Ordering::Acquire);
        fence(Ordering::Acquire);
        let same = before.word & CHANGING == 0
            && self.state.load(Ordering::Acquire) == before.word
            && self.turns.load(Ordering::Acquire) == before.turns;
        if !same {
            Still::No
        } else if removals == before.removals && removals & 1 == 0 {
            Still::Yes
        } else {
            Still::IfUnchanged
        }
    }

    /// Reports whether slot `at.idx` still holds the version a query read there. Checked for
    /// every page a query claims, after it read them all: all unchanged, the pages were in the
    /// table together, as the writer had written them at one point (see the module docs).
    pub(crate) fn unchanged(&self, at: SlotAt) -> bool {
        self.slot(at.idx as usize)
            .is_some_and(|(_, slot)| slot.version.load(Ordering::Relaxed) == at.version)
    }

    /// Marks the start of a removal of pages from their slots (a keyed removal, an eviction):
    /// moves the removal count to odd before any of it is written, so that a query that
    /// overlaps it checks the pages it claims again ([`Still::IfUnchanged`]). Idempotent until
    /// [`PageTable::end_change`].
    pub(crate) fn begin_removal(&self) {
        let removals = self.removals.load(Ordering::Relaxed);
        if removals & 1 == 1 {
            return;
        }
        self.move_removals(removals);
        // Like a slot's odd version: the writes that follow are ordered after the store.
        fence(Ordering::Release);
    }

    /// Marks the start of a change that must be read again (a clear, a batch of doubt): moves the
    /// generation and sets the changing bit before any of the change is written, so that a
    /// query that reads any of it, or that starts before [`PageTable::end_change`], reads
    /// again. Idempotent while a change is under way: one move for a whole batch.
    pub(crate) fn begin_change(&self) {
        let state = self.state.load(Ordering::Relaxed);
        if state & CHANGING != 0 {
            return;
        }
        self.move_state(state, state.wrapping_add(1 << GENERATION_SHIFT) | CHANGING);
        // Like a slot's odd version: the writes that follow are ordered after the store.
        fence(Ordering::Release);
    }

    /// Marks the end of the change [`PageTable::begin_change`] started, and of the removal
    /// [`PageTable::begin_removal`] started (nothing if none is under way): moves the generation
    /// (or the removal count) again, so a query that started before reads again (or checks
    /// its pages again).
    pub(crate) fn end_change(&self) {
        let removals = self.removals.load(Ordering::Relaxed);
        if removals & 1 == 1 {
            self.move_removals(removals);
        }
        let state = self.state.load(Ordering::Relaxed);
        if state & CHANGING == 0 {
            return;
        }
        self.move_state(
            state,
            (state & !CHANGING).wrapping_add(1 << GENERATION_SHIFT),
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
    #[cfg(test)]
    pub(crate) fn probe(&self, ns: u32, hash: &PageHash) -> (u128, u128) {
        let (present, cpu, _) = self.probe_at(ns, hash);
        (present, cpu)
    }

    /// [`PageTable::probe`], and where the page was read when the table holds it.
    pub(crate) fn probe_at(&self, ns: u32, hash: &PageHash) -> (u128, u128, Option<SlotAt>) {
        let h = page_table_hash(self.seed, ns, hash);
        let words = hash_words(hash);
        let (tag, mask) = (self.tag(h), self.index_mask());
        let mut i = self.home(h);
        for _ in 0..self.buckets.len() {
            let bucket = self.buckets[i].load(Ordering::Acquire);
            if bucket == 0 {
                return (0, 0, None);
            }
            if self.tag_of(bucket) == tag {
                let idx = (bucket & mask) as usize - 1;
                match self.read(idx, ns, &words) {
                    SlotRead::Page(present, cpu, version) => {
                        let at = SlotAt {
                            idx: idx as u32,
                            version,
                        };
                        return (present, cpu, Some(at));
                    }
                    SlotRead::Other => {}
                    SlotRead::Raced => return (0, 0, None),
                }
            }
            i = self.next(i);
        }
        (0, 0, None)
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
            return SlotRead::Page(present, cpu, before);
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
    ///
    /// `used` is how many slots were written since the last clear (slots `0..used`; the pages
    /// held are among them): the clear costs what they hold, not the table's capacity. Few
    /// slots used, it empties the buckets from each held page's home on; many, every bucket (a
    /// sequential sweep beats that many scattered reads).
    pub(crate) fn clear(&self, used: usize) {
        if used.saturating_mul(SWEEP_ABOVE) >= self.buckets.len() {
            for b in self.buckets.iter() {
                b.store(0, Ordering::Relaxed);
            }
        } else {
            for idx in 0..used.min(self.capacity) {
                // A slot is linked exactly while its page holds an object.
                if self.present(idx) != 0 {
                    let page = self.get(idx);
                    self.empty_from(self.home(page_table_hash(self.seed, page.ns, &page.hash)));
                }
            }
        }
        let state = self.state.load(Ordering::Relaxed);
        self.move_state(state, state.wrapping_add(1 << GENERATION_SHIFT));
    }

    /// Empties bucket `i` and the buckets after it up to the first empty one. Linear probing
    /// keeps every bucket from an entry's home to its own non-empty, and this keeps that true
    /// (what it empties ends at an empty bucket): run from the home of every page held, it
    /// takes every entry, and empties each bucket once. The table is never full: it ends.
    fn empty_from(&self, mut i: usize) {
        while self.buckets[i].load(Ordering::Relaxed) != 0 {
            self.buckets[i].store(0, Ordering::Relaxed);
            i = self.next(i);
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

mod namespaces;
pub(crate) use self::namespaces::SharedNamespaces;
#[cfg(test)]
use self::namespaces::{ns_segment, NS_BASE};

#[cfg(test)]
mod tests;

#[cfg(all(test, loom))]
mod loom_model;
