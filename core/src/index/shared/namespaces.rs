//! The namespace directory readers resolve a namespace number in: set-once entries in doubling
//! segments, allocated on first use, and replaced whole by an empty one when the index is
//! cleared (so the numbers and their memory are reclaimed).
//!
//! # Reclaiming
//! A clear gives the numbers back: the next namespace after it is number 0 again, perhaps of
//! another `(tenant, prefix)`. A reader that resolved number 0 before the clear must never
//! take a page stored under the new number 0 for one of the old namespace's (an ABA false hit).
//! Two rules make sure of it:
//! - the writer replaces the directory only inside a bracketed change (the clear's
//!   [`super::PageTable::begin_change`] comes first), so a query whose reading of the directory
//!   and of the pages straddles it sees the state word move and reads again; a query that read
//!   the directory entirely after the replacement resolves the new numbers only;
//! - a reader holds the directory's read lock while it resolves (a plan: a handful of string
//!   comparisons), never while it probes; the writer's replacement waits for those, so the old
//!   directory's strings are freed only once no reader reads them. A reader that finds the
//!   replacement under way does not wait: it resolves nothing (a miss), and the state it checks
//!   then makes it read again.

use alloc::boxed::Box;
use alloc::string::String;

use once_cell::race::OnceBox;

#[cfg(not(loom))]
use core::sync::atomic::{AtomicU32, Ordering};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, Ordering};

#[cfg(loom)]
use loom::sync::{RwLock, RwLockReadGuard};
#[cfg(not(loom))]
use spin::{RwLock, RwLockReadGuard};

use super::super::hashing::namespace_hash;
use super::super::limits::MAX_SUFFIXES;

/// Suffix cells in the first segment of a namespace; segment `k > 0` holds `SUFFIX_BASE << (k -
/// 1)`, so that the segments, each allocated on first use, cover [`MAX_SUFFIXES`] slots.
const SUFFIX_BASE: usize = 4;

/// Suffix segments of a namespace: 4, 4, 8, 16, 32 and 64 cells.
const SUFFIX_SEGMENTS: usize = 6;

const _: () = assert!(SUFFIX_BASE << (SUFFIX_SEGMENTS - 2) == MAX_SUFFIXES / 2);

/// Returns the segment of suffix `slot` and its place in it.
fn suffix_cell(slot: usize) -> (usize, usize) {
    if slot < SUFFIX_BASE {
        return (0, slot);
    }
    let k = (usize::BITS - 1 - slot.leading_zeros()) as usize;
    (
        k - SUFFIX_BASE.trailing_zeros() as usize + 1,
        slot - (1 << k),
    )
}

/// Returns how many cells suffix segment `k` holds.
fn suffix_segment_len(k: usize) -> usize {
    if k == 0 {
        SUFFIX_BASE
    } else {
        SUFFIX_BASE << (k - 1)
    }
}

/// Compares two suffixes byte by byte: they are a few bytes long, and the call `==` makes to
/// `memcmp` cost more than the comparison (2 % of a query that misses at page 8).
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| x == y)
}

/// One namespace as readers see it: its tenant, its prefix and its suffixes, each suffix set
/// once, in slot order, in segments allocated as the suffixes come (a namespace of a few
/// suffixes costs a few cells, not [`MAX_SUFFIXES`]).
pub(crate) struct SharedNamespace {
    tenant: String,
    prefix: Option<String>,
    suffixes: [OnceBox<Box<[OnceBox<String>]>>; SUFFIX_SEGMENTS],
}

impl SharedNamespace {
    /// Returns the slot of `suffix`, if it has one.
    pub(crate) fn slot_of(&self, suffix: &str) -> Option<u32> {
        self.slot_of_from(suffix, 0)
    }

    /// Returns the slot of `suffix`, if it has one, comparing the slots from `from` on first,
    /// then those before it. A layout's suffixes are mostly registered in the layout's own
    /// order (the writer gives them slots as its objects arrive), so a plan that asks for each
    /// suffix from the slot after the last one found finds each at its first comparison. From
    /// slot 0 every time, the plan of a 16-object page compared 136 strings: 10 % of a query
    /// that misses at page 8 (a profile of the query bench).
    pub(crate) fn slot_of_from(&self, suffix: &str, from: u32) -> Option<u32> {
        let from = from as usize;
        let mut slot = from;
        while let Some(s) = self.suffix_at(slot) {
            if same(s, suffix) {
                return u32::try_from(slot).ok();
            }
            slot += 1;
        }
        (0..from.min(slot))
            .find(|&s| self.suffix_at(s).is_some_and(|s| same(s, suffix)))
            .and_then(|s| u32::try_from(s).ok())
    }

    /// Returns the suffix in `slot`, if it is set.
    fn suffix_at(&self, slot: usize) -> Option<&str> {
        if slot >= MAX_SUFFIXES {
            return None;
        }
        let (k, i) = suffix_cell(slot);
        self.suffixes[k].get()?.get(i)?.get().map(String::as_str)
    }

    /// Returns the cell of suffix `slot`, allocating its segment (the writer only).
    fn cell(&self, slot: usize) -> Option<&OnceBox<String>> {
        if slot >= MAX_SUFFIXES {
            return None;
        }
        let (k, i) = suffix_cell(slot);
        let seg = self.suffixes[k]
            .get_or_init(|| Box::new((0..suffix_segment_len(k)).map(|_| OnceBox::new()).collect()));
        seg.get(i)
    }

    /// Returns the bytes the suffixes take.
    fn suffix_bytes(&self) -> usize {
        self.suffixes
            .iter()
            .filter_map(OnceBox::get)
            .map(|seg| {
                core::mem::size_of::<Box<[OnceBox<String>]>>()
                    + seg.len() * core::mem::size_of::<OnceBox<String>>()
                    + seg
                        .iter()
                        .filter_map(OnceBox::get)
                        .map(|s| s.capacity() + core::mem::size_of::<String>())
                        .sum::<usize>()
            })
            .sum()
    }
}

/// Namespaces in the first segment of the directory; segment `k` holds `NS_BASE << k`.
pub(super) const NS_BASE: usize = 32;

/// Segments of the directory: enough for `u32::MAX / 2` namespaces.
const NS_SEGMENTS: usize = 27;

/// One segment of the namespace directory: its set-once entries and the open-addressed index
/// over them (twice as many buckets as entries).
struct NsSegment {
    entries: Box<[OnceBox<SharedNamespace>]>,
    buckets: Box<[AtomicU32]>,
}

/// The namespaces, append-only between two clears, for readers: segments of set-once entries,
/// each with its own open-addressed index, allocated on first use and doubling in size (so a
/// high cap costs nothing until namespaces come; a reader looks in at most a handful of
/// segments).
pub(crate) struct Directory {
    segments: [OnceBox<NsSegment>; NS_SEGMENTS],
    capacity: usize,
    seed: u64,
}

impl core::fmt::Debug for Directory {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Directory")
            .field("capacity", &self.capacity)
            .finish_non_exhaustive()
    }
}

/// The directory readers resolve namespaces in, behind the lock that lets a clear replace it
/// (see the module docs).
pub(crate) struct SharedNamespaces {
    current: RwLock<Directory>,
}

impl core::fmt::Debug for SharedNamespaces {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SharedNamespaces").finish_non_exhaustive()
    }
}

impl SharedNamespaces {
    /// Makes an empty directory for `capacity` namespaces (nothing allocated yet).
    pub(crate) fn new(capacity: usize, seed: u64) -> SharedNamespaces {
        SharedNamespaces {
            current: RwLock::new(Directory::new(capacity, seed)),
        }
    }

    /// Returns the directory for a reader to resolve in; `None` while the writer replaces it
    /// (the reader does not wait: see the module docs). The guard MUST be dropped before the
    /// reader probes pages, so a clear never waits for a whole query.
    #[cfg(not(loom))]
    pub(crate) fn read(&self) -> Option<RwLockReadGuard<'_, Directory>> {
        self.current.try_read()
    }

    /// Under loom, its own lock.
    #[cfg(loom)]
    pub(crate) fn read(&self) -> Option<RwLockReadGuard<'_, Directory>> {
        self.current.try_read().ok()
    }

    /// Returns the directory for the writer (which alone replaces it, so never waits).
    fn writer(&self) -> RwLockReadGuard<'_, Directory> {
        self.read()
            .expect("only the writer replaces the directory, and not while it reads it")
    }

    /// Replaces the directory with an empty one: every number is free again (the writer only,
    /// inside a bracketed change, see the module docs). Waits for the readers resolving in the
    /// old one; its memory is freed after the lock is released.
    pub(crate) fn reclaim(&self) {
        let (capacity, seed) = {
            let dir = self.writer();
            (dir.capacity, dir.seed)
        };
        let fresh = Directory::new(capacity, seed);
        #[cfg(not(loom))]
        let old = core::mem::replace(&mut *self.current.write(), fresh);
        #[cfg(loom)]
        let old = core::mem::replace(&mut *self.current.write().expect("never poisoned"), fresh);
        drop(old);
    }

    /// Returns the bytes allocated.
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.writer().allocated_bytes()
    }

    /// Adds namespace `ns` (the next number; the writer only).
    pub(crate) fn add(&self, ns: u32, tenant: &str, prefix: Option<&str>) {
        self.writer().add(ns, tenant, prefix);
    }

    /// Adds suffix `slot` of namespace `ns` (the next slot; the writer only).
    pub(crate) fn add_suffix(&self, ns: u32, slot: u32, suffix: &str) {
        self.writer().add_suffix(ns, slot, suffix);
    }
}

/// Returns the segment of namespace `ns` and its place in it.
pub(super) fn ns_segment(ns: usize) -> (usize, usize) {
    let n = ns / NS_BASE + 1;
    let k = (usize::BITS - 1 - n.leading_zeros()) as usize;
    (k, ns - NS_BASE * ((1 << k) - 1))
}

impl Directory {
    /// Makes an empty directory for `capacity` namespaces (nothing allocated yet).
    fn new(capacity: usize, seed: u64) -> Directory {
        Directory {
            segments: core::array::from_fn(|_| OnceBox::new()),
            capacity: capacity.min(u32::MAX as usize / 2),
            seed,
        }
    }

    /// Returns the bytes allocated.
    fn allocated_bytes(&self) -> usize {
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
                                + n.suffix_bytes()
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
    fn add(&self, ns: u32, tenant: &str, prefix: Option<&str>) {
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
            suffixes: core::array::from_fn(|_| OnceBox::new()),
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
    fn add_suffix(&self, ns: u32, slot: u32, suffix: &str) {
        if let Some(s) = self.entry(ns).and_then(|n| n.cell(slot as usize)) {
            let _ = s.set(Box::new(suffix.into()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suffix_segments_cover_every_slot_once_in_order() {
        let mut seen = alloc::vec::Vec::new();
        for slot in 0..MAX_SUFFIXES {
            let (k, i) = suffix_cell(slot);
            assert!(
                k < SUFFIX_SEGMENTS && i < suffix_segment_len(k),
                "slot {slot}: {k}, {i}"
            );
            seen.push((k, i));
        }
        let mut sorted = seen.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted, seen, "in order, each once");
        let cells: usize = (0..SUFFIX_SEGMENTS).map(suffix_segment_len).sum();
        assert_eq!(cells, MAX_SUFFIXES);
    }
}
