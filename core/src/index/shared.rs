//! The page table the writer shares with readers: page slots behind a per-slot version
//! (seqlock), an open-addressed index of `AtomicU32` bucket words over them, and one state word
//! that clears (and the session's query flags) move; and the namespace directory readers
//! resolve a layout in.
//!
//! # The protocol
//! There is one writer (the [`super::Index`], which takes `&mut self` for every change) and any
//! number of readers, which never wait, never write anything but a page's CLOCK reference bit
//! (and the namespace directory's read lock, see [`namespaces`]), and never see a page that was
//! not in the table at some point during their read. Each part has its own rule, in its own
//! module:
//! - **A slot** ([`slots`]) holds one page: its namespace, its 32-byte hash and its memory and
//!   disk masks, as `AtomicU32` words behind a version word (a seqlock; 48 bytes while the
//!   page's objects fit 32 mask bits, the masks of the others in its chunk's wide words, under
//!   the same version). A reader that reads
//!   it gets one version's words, or reads again, or takes the page as a miss; it compares the
//!   namespace and hash it read with the ones it asked for, so a slot reused for another page
//!   is a miss, never a hit.
//! - **A bucket** ([`buckets`]) names a slot; the writer links a slot only once it is written
//!   (Release), and a reader that follows a bucket (Acquire) reads the slot at least that new.
//!   A removal shifts later entries back; a reader that raced a shift may miss, never hit
//!   wrongly, since it always checks the slot.
//! - **The state word** ([`state`]) holds the generation, a changing bit and the session's
//!   flags; beside it, the removal count. A query loads them before its first probe and checks
//!   them after its last ([`PageTable::still`]).
//! - **The claims** ([`claims`]): the slot and version of each page a query claims, checked
//!   again when removals overlapped it.
//!
//! What they guarantee together:
//! - **Removals** (a keyed removal, an eviction) are written in the page's slot before its
//!   bucket is unlinked, and move the removal count to odd first and to even when the input
//!   ends ([`PageTable::begin_removal`], [`PageTable::end_change`]). A query that overlapped
//!   none (the same even count at its start and end) keeps its answer: stores only add, so
//!   every page it claims was in the table at its end. One that overlapped some checks again,
//!   after reading every page, that the slot of each page it claims holds the version it read
//!   there ([`Claims`]: a *double collect*). If so, the pages were in the table together: let
//!   `k` be the latest write the query read; every write before `k` happens before the check
//!   (the query acquired `k`), so a slot written after the version the query read, and before
//!   `k`, would show a new version. Each claimed slot thus held what the query read once the
//!   writer had made write `k`: a point of the stream's own history (the events of a batch
//!   apply in the master's order). Otherwise it reads again.
//! - **Changes that must be read again** (a clear; a batch holding an event that names no
//!   object, whose removals are of unknown extent and end in a clear) set the changing bit and
//!   move the generation before they write, and move it again when they end
//!   ([`PageTable::begin_change`], [`PageTable::end_change`]): a query that overlaps one in any
//!   way reads again, so it never claims a page a clear takes. A clear empties the buckets and
//!   then moves the generation (Release): whatever a reader reads after the new generation is
//!   of the new one. If the state moved, the answer may mix two generations (or two readings
//!   of the session's flags) and is thrown away (retried, then `Busy`). A clear is thus atomic
//!   for readers, and a flag the writer sets before it changes pages (the session's "snapshot
//!   unproven") is seen by every query that sees those pages.
//! - **Namespace numbers** are reused after a clear ([`namespaces`]): the directory is replaced
//!   inside the clear's bracket, so a query that resolved a number before it and probes pages
//!   stored under the reused number after it sees the state move, and reads again.
//!
//! Slots live in chunks of [`slots::CHUNK_SLOTS`], allocated on first use (so an index sized for a
//! million pages costs little until it holds them); the bucket array is allocated whole. A
//! clear costs what the table holds, not its capacity ([`PageTable::clear`]).
//!
//! # Why this design
//! Behind the session's lock, a reader waits for a writer that holds it: a writer descheduled
//! while holding it, or one that retakes it batch after batch, stalls every reader. A fair
//! hand-over still stalls readers for a scheduler slice; two copies (left-right) double the
//! memory per page; a copy of the table per change (RCU) is out of the question at a million
//! pages. Per-slot versions let readers never wait and keep one copy of every page. What they
//! give up: a clear, a batch of doubt or a change of the session's flags makes a query read
//! again, and so does a removal or a store written in a page it claims while it reads; a page
//! whose writes keep racing its read is a miss. Removals are checked by the double collect
//! rather than bracketed, so a stream that keeps removing does not make every query read
//! again. The measurements behind these choices, what was tried and not kept, and the figures
//! are in `docs/design/read-side.md`.
//!
//! The protocol is model-checked with loom (`RUSTFLAGS="--cfg loom" cargo test -p
//! hicache-index --release --lib loom`) and exercised at the session level by the differential
//! quickcheck with a concurrent writer (`hicache-index-tests`, `differential.rs`).

mod buckets;
mod claims;
mod namespaces;
mod slots;
mod state;

pub(crate) use self::claims::{Claims, SlotAt, Spill, FEW_CLAIMS};
pub(crate) use self::namespaces::SharedNamespaces;
pub(crate) use self::slots::PageWords;
pub(crate) use self::state::{State, Still};

use self::buckets::Buckets;
use self::slots::Slots;
use self::state::StateWord;
use crate::hash::PageHash;

/// The shared page table (see the module docs): the slab, the buckets over it and the state
/// word, each with its own rule; what crosses them is here.
pub(crate) struct PageTable {
    slots: Slots,
    buckets: Buckets,
    state: StateWord,
}

impl core::fmt::Debug for PageTable {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageTable")
            .field("capacity", &self.slots.capacity())
            .field("buckets", &self.buckets.len())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl PageTable {
    /// Makes an empty table for `capacity` pages (at least one); `seed` seeds its hash.
    pub(crate) fn new(capacity: usize, seed: u64) -> PageTable {
        let capacity = capacity.clamp(1, u32::MAX as usize - 1);
        PageTable {
            slots: Slots::new(capacity),
            buckets: Buckets::new(capacity, seed),
            state: StateWord::new(),
        }
    }

    /// Returns the most pages the table holds.
    pub(crate) fn capacity(&self) -> usize {
        self.slots.capacity()
    }

    /// Returns the bytes allocated: buckets, the chunk directory and the chunks in use.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.buckets.len() * 4 + self.slots.allocated_bytes()
    }

    // ---- The state word (see `state`).

    /// Returns the state: the generation and the session's flags.
    pub(crate) fn state(&self) -> State {
        self.state.load()
    }

    /// Returns the flags of a state.
    pub(crate) fn flags_of(state: State) -> u32 {
        state.flags()
    }

    /// Reports whether a state was read while the writer was in the middle of a bracketed
    /// change: a query that starts then reads again later.
    pub(crate) fn is_changing(state: State) -> bool {
        state.is_changing()
    }

    /// Reports how a query that read `before` at its start may use what it read since (see
    /// [`Still`]).
    pub(crate) fn still(&self, before: State) -> Still {
        self.state.still(before)
    }

    /// Sets the session's query flags (a new state: queries under way are answered again).
    pub(crate) fn set_flags(&self, flags: u32) {
        self.state.set_flags(flags);
    }

    /// Marks the start of a removal of pages from their slots (a keyed removal, an eviction):
    /// a query that overlaps it checks the pages it claims again. Idempotent until
    /// [`PageTable::end_change`].
    pub(crate) fn begin_removal(&self) {
        self.state.begin_removal();
    }

    /// Marks the start of a change that must be read again (a clear, a batch of doubt).
    /// Idempotent while a change is under way: one move for a whole batch.
    pub(crate) fn begin_change(&self) {
        self.state.begin_change();
    }

    /// Marks the end of the change [`PageTable::begin_change`] started, and of the removal
    /// [`PageTable::begin_removal`] started (nothing if none is under way).
    pub(crate) fn end_change(&self) {
        self.state.end_change();
    }

    // ---- The reader's side.

    /// Returns a page's present objects and those of them with a memory replica; `(0, 0)` when
    /// the table does not hold it, or when writes kept racing the read (a miss is safe).
    #[cfg(test)]
    pub(crate) fn probe(&self, ns: u32, hash: &PageHash) -> (u128, u128) {
        let (present, cpu, _) = self.probe_at(ns, hash);
        (present, cpu)
    }

    /// Returns a page's present objects, those of them with a memory replica, and where it was
    /// read; `(0, 0, None)` when the table does not hold it, or when writes kept racing the
    /// read (a miss is safe).
    pub(crate) fn probe_at(&self, ns: u32, hash: &PageHash) -> (u128, u128, Option<SlotAt>) {
        self.buckets.probe(&self.slots, ns, hash, true)
    }

    /// Returns a page's present objects as [`PageTable::probe_at`] reads them, without setting
    /// its reference bit: a judge's look that must not change which page is evicted next.
    pub(crate) fn peek(&self, ns: u32, hash: &PageHash) -> u128 {
        self.buckets.probe(&self.slots, ns, hash, false).0
    }

    /// Reports whether slot `at.idx` still holds the version a query read there. Checked for
    /// every page a query claims, after it read them all: all unchanged, the pages were in the
    /// table together, as the writer had written them at one point (see the module docs).
    pub(crate) fn unchanged(&self, at: SlotAt) -> bool {
        self.slots.version(at.idx as usize) == Some(at.version)
    }

    // ---- The writer's side: only the index calls these, with `&mut` access to itself.

    /// Returns what slot `idx` holds (the writer's own last writes).
    pub(crate) fn get(&self, idx: usize) -> PageWords {
        self.slots.get(idx)
    }

    /// Returns the present objects of slot `idx`.
    pub(crate) fn present(&self, idx: usize) -> u128 {
        self.slots.present(idx)
    }

    /// Writes a whole page into slot `idx` (a new page, or a slot reused).
    pub(crate) fn put(&self, idx: usize, page: &PageWords) {
        self.slots.put(idx, page);
    }

    /// Writes the masks of slot `idx`.
    pub(crate) fn set_masks(&self, idx: usize, cpu: u128, disk: u128) {
        self.slots.set_masks(idx, cpu, disk);
    }

    /// Clears slot `idx`'s reference bit; returns whether it was set.
    pub(crate) fn take_referenced(&self, idx: usize) -> bool {
        self.slots.take_referenced(idx)
    }

    /// Finds the slot holding `(ns, hash)`, whose table hash is `h`.
    pub(crate) fn find(&self, h: u64, ns: u32, hash: &PageHash) -> Option<usize> {
        self.buckets.find(&self.slots, h, ns, hash)
    }

    /// Links slot `idx` (already written) under table hash `h`.
    pub(crate) fn link(&self, h: u64, idx: usize) {
        self.buckets.link(h, idx);
    }

    /// Unlinks slot `idx`, linked under table hash `h`, shifting later entries back.
    pub(crate) fn unlink(&self, h: u64, idx: usize) {
        self.buckets.unlink(&self.slots, h, idx);
    }

    /// Empties every bucket, then moves to the next generation (see the module docs). Slots keep
    /// their words until they are reused; nothing links to them. `used` is how many slots were
    /// written since the last clear: the clear costs what they hold, not the table's capacity
    /// (see [`Buckets::clear`]).
    pub(crate) fn clear(&self, used: usize) {
        self.buckets.clear(&self.slots, used);
        self.state.next_generation();
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
use self::namespaces::{ns_segment, NS_BASE};

#[cfg(test)]
mod tests;

#[cfg(all(test, loom))]
mod loom_model;
