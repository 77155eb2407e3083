//! The page index: which objects of which pages are present, keyed by tenant, key prefix and page
//! hash.
//!
//! Each object key is parsed into `(prefix, page hash, suffix)`. A *namespace* is one
//! `(tenant, prefix)` pair and numbers the suffixes it has seen (at most 128 per namespace); a
//! page is one `(namespace, page hash)` entry holding a 128-bit mask of the suffixes present. A
//! query resolves its layout's suffixes to a mask once, then answers each page with one hash
//! probe and one mask test, whatever the layout and whether or not events carry group ids.
//!
//! Memory is bounded: pages live in a slab of fixed capacity, and a full index evicts with
//! CLOCK (second chance, the reference bit set by queries that hit a page), never by wiping.
//!
//! # Residency per medium
//! A page holds two masks, the objects with a memory replica (`cpu`, or a medium the event did
//! not name) and those with a disk replica; an object is present when it is in either. A
//! removal never leaves its object present: when the stream had shown the object on the other
//! medium too, the object becomes a *suspect* (absent for queries, remembered with the medium
//! that may still hold it, in a bounded side table) until a verification answer read after the
//! removal confirms it or any later event about it decides. See
//! the crate docs for why.

mod hashing;
mod hits;
mod limits;
mod lookup;
mod object_set;
mod reconcile;
mod sample;
pub(crate) mod shared;
mod suspects;
mod table;

use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;

use hashbrown::HashTable;

use crate::frame::Medium;
use crate::hash::PageHash;
use crate::layout::{parse_object_key, HitPolicy, Layout, ObjectKey};

/// The tenant Mooncake uses when none is configured, and the one events without a tenant mean.
pub const DEFAULT_TENANT: &str = "default";

/// Limits and seeds of an [`Index`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexConfig {
    /// The most pages held at once; a full index evicts (CLOCK) to make room.
    pub max_pages: usize,
    /// The most `(tenant, key prefix)` pairs; objects of further pairs are counted and ignored
    /// until the index is next cleared (a clear forgets the pairs too).
    pub max_namespaces: usize,
    /// Seeds the hash of the page table, so hostile keys cannot be aimed at one bucket.
    pub seed: u64,
}

pub use self::hits::{IndexHits, MapCover};
pub use self::limits::{MAX_PREFIX_LEN, MAX_SUFFIXES, MAX_TENANT_LEN, MAX_TRAILING_POOLS};
pub(crate) use self::object_set::{ObjectSet, Reconciled};
pub(crate) use self::shared::PageTable;
use self::shared::{Claims, PageWords, Shared, SharedNamespaces};

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            max_pages: 1 << 20,
            max_namespaces: 1024,
            seed: 0x5eed_1dc0_ffee_0001,
        }
    }
}

/// One `(tenant, key prefix)` pair and the suffixes seen in it.
#[derive(Debug)]
struct Namespace {
    tenant: String,
    prefix: Option<String>,
    suffixes: Vec<String>,
    /// The slot after the last suffix found: where the next object of a page most likely is
    /// (see `Index::intern_suffix`).
    next_suffix: u32,
    /// The mask that makes a page complete under a watched layout (0: not watched).
    complete_mask: u128,
}

/// The objects of one page that a removal left unproven on their other medium.
#[derive(Debug)]
struct SuspectPage {
    ns: u32,
    hash: PageHash,
    /// The suspect objects' suffix bits.
    slots: u128,
    /// Of those, the ones whose remaining medium is disk (the others: memory).
    disk: u128,
    /// The write stamp of the latest suspension on this page.
    stamp: u64,
}

/// What one event did to the index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The object is now in the state the event says (`stored` and `removed` are idempotent).
    Done,
    /// The key does not parse as `{P}_{H}{S}`: it can never be an expected key.
    Unparsed,
    /// The namespace table or the namespace's suffix table is full; the object is not tracked
    /// (its page can only miss).
    Untracked,
}

/// A page that became complete or incomplete under a watched layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Delta {
    /// The namespace number (see [`Index::namespace`]).
    pub namespace: u32,
    /// The page hash.
    pub page: PageHash,
    /// `true`: every watched object is now present; `false`: one no longer is.
    pub complete: bool,
}

/// Counters the index keeps itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexCounters {
    /// Pages evicted to make room.
    pub evictions: u64,
    /// Keys that did not parse.
    pub unparsed_keys: u64,
    /// Objects not tracked because a table was full.
    pub untracked_objects: u64,
    /// Events whose group id did not name the key's logical key.
    pub group_id_mismatches: u64,
    /// Removals of one medium from an object the stream had shown on the other too: the object
    /// became a suspect (absent until verified).
    pub suspended_objects: u64,
    /// Suspects a verification answer brought back as present.
    pub suspects_confirmed: u64,
    /// Suspects not kept because the suspect table was full (they stay absent).
    pub suspects_dropped: u64,
}

/// The page index (see the module docs).
#[derive(Debug)]
pub struct Index {
    config: IndexConfig,
    /// The pages and namespaces, shared with readers (see [`shared`]).
    shared: Arc<Shared>,
    /// Slots in use or freed: the slab's high-water mark.
    len: usize,
    /// Per slot, the index's write stamp when its page last changed (guards verification
    /// removals).
    touched: Vec<u64>,
    free: Vec<u32>,
    namespaces: Vec<Namespace>,
    ns_table: HashTable<u32>,
    /// The namespace of the last store: consecutive events nearly always share it.
    last_ns: Option<u32>,
    watched_layouts: Vec<Layout>,
    deltas: Vec<Delta>,
    clock_hand: usize,
    live_pages: usize,
    live_objects: usize,
    stamp: u64,
    verify_cursor: usize,
    verify_slot: u32,
    suspects: HashTable<SuspectPage>,
    counters: IndexCounters,
}

impl Namespace {
    /// Formats the key `{P}_{H}{S}` (or `{H}{S}`) of the object of page `hash` in `slot`.
    fn object_key(&self, hash: &PageHash, slot: u32) -> String {
        let (prefix, suffix) = (self.prefix.as_deref(), &self.suffixes[slot as usize]);
        let mut key = String::with_capacity(prefix.map_or(0, |p| p.len() + 1) + 64 + suffix.len());
        if let Some(p) = prefix {
            key.push_str(p);
            key.push('_');
        }
        let mut hex = [0u8; 64];
        hash.write_hex(&mut hex);
        key.push_str(core::str::from_utf8(&hex).expect("hex digits are ASCII"));
        key.push_str(suffix);
        key
    }
}

/// Takes the lowest set bit out of `bits` and returns its position (`bits` MUST not be 0).
fn take_lowest(bits: &mut u128) -> u32 {
    let slot = bits.trailing_zeros();
    *bits &= *bits - 1;
    slot
}

/// The index's writer side for benches and tests that measure the index alone, without a
/// session (feature `internals`; it switches visibility only). A session is the only writer
/// otherwise.
#[cfg(feature = "internals")]
impl Index {
    /// Makes an empty index, as a session does with `config`.
    pub fn standalone(config: IndexConfig) -> Index {
        Index::new(config)
    }

    /// Marks `key` present on `medium`, as a `stored` event does (no group id checked).
    pub fn store_object(&mut self, tenant: &str, key: &str, medium: Option<Medium>) {
        let _ = self.store(tenant, key, None, medium);
    }

    /// Takes `medium` away from `key`, as a `removed` event does, and ends the change.
    pub fn remove_object(&mut self, tenant: &str, key: &str, medium: Option<Medium>) {
        let _ = self.remove_replica(tenant, key, medium);
        self.settle();
    }

    /// Forgets every page and namespace, as a clear does, and ends the change; returns the
    /// pages and objects forgotten.
    pub fn clear_all(&mut self) -> (usize, usize) {
        let forgotten = self.clear();
        self.settle();
        forgotten
    }
}

impl Index {
    /// Makes an empty index; the page table is sized for `config.max_pages` up front.
    pub(crate) fn new(config: IndexConfig) -> Index {
        let cap = config.max_pages.clamp(1, u32::MAX as usize - 1);
        Index {
            shared: Arc::new(Shared {
                pages: PageTable::new(cap, config.seed),
                namespaces: SharedNamespaces::new(config.max_namespaces, config.seed),
            }),
            len: 0,
            touched: Vec::new(),
            free: Vec::new(),
            namespaces: Vec::new(),
            ns_table: HashTable::new(),
            last_ns: None,
            watched_layouts: Vec::new(),
            deltas: Vec::new(),
            clock_hand: 0,
            live_pages: 0,
            live_objects: 0,
            stamp: 0,
            verify_cursor: 0,
            verify_slot: 0,
            suspects: HashTable::new(),
            counters: IndexCounters::default(),
            config: IndexConfig {
                max_pages: cap,
                ..config
            },
        }
    }

    /// Returns the configuration.
    pub fn config(&self) -> &IndexConfig {
        &self.config
    }

    /// Returns the number of pages with at least one object present.
    pub fn page_count(&self) -> usize {
        self.live_pages
    }

    /// Returns the number of objects present.
    pub fn object_count(&self) -> usize {
        self.live_objects
    }

    /// Returns the index's own counters.
    pub fn counters(&self) -> IndexCounters {
        self.counters
    }

    /// Returns the write stamp: it grows with every change.
    pub fn stamp(&self) -> u64 {
        self.stamp
    }

    /// Returns the tenant and key prefix of a namespace number.
    pub fn namespace(&self, namespace: u32) -> Option<(&str, Option<&str>)> {
        let ns = self.namespaces.get(namespace as usize)?;
        Some((ns.tenant.as_str(), ns.prefix.as_deref()))
    }

    /// Watches a layout for page-level deltas: a page of its prefix is complete when every
    /// suffix of every pool is present. Deltas are collected until [`Index::drain_deltas`].
    pub(crate) fn watch_layout(&mut self, layout: &Layout) {
        if self.watched_layouts.iter().any(|l| l == layout) {
            return;
        }
        self.watched_layouts.push(layout.clone());
        for ns in 0..self.namespaces.len() {
            self.refresh_complete_mask(ns);
        }
    }

    /// Takes the page-level deltas collected since the last call.
    pub(crate) fn drain_deltas(&mut self) -> alloc::vec::Drain<'_, Delta> {
        self.deltas.drain(..)
    }

    /// Marks `key` present on `medium` (idempotent). `None` names no medium: it marks an absent
    /// object present in memory and leaves a present one's media as they are.
    pub(crate) fn store(
        &mut self,
        tenant: &str,
        key: &str,
        group_id: Option<&[u8]>,
        medium: Option<Medium>,
    ) -> Applied {
        let Some(parsed) = parse_object_key(key) else {
            self.counters.unparsed_keys += 1;
            return Applied::Unparsed;
        };
        if let Some(group) = group_id {
            let logical = &key[..key.len() - parsed.suffix.len()];
            if group.strip_prefix(b"sglang-hicache:") != Some(logical.as_bytes()) {
                self.counters.group_id_mismatches += 1;
            }
        }
        let Some((ns, slot)) = self.intern(tenant, parsed.prefix, parsed.suffix) else {
            self.counters.untracked_objects += 1;
            return Applied::Untracked;
        };
        let h = self.table_hash(ns, &parsed.page_hash);
        // A store decides a suspect: the object is present again.
        self.unsuspect(h, ns, &parsed.page_hash, 1u128 << slot);
        self.set_bit(h, ns, parsed.page_hash, 1u128 << slot, medium);
        Applied::Done
    }

    /// Marks `key` absent on every medium (idempotent).
    pub(crate) fn remove(&mut self, tenant: &str, key: &str) -> Applied {
        self.remove_replica(tenant, key, None)
    }

    /// Takes `medium` away from `key` (`None`: every medium); idempotent.
    ///
    /// The object is absent afterwards whatever it held: a removal is a per-medium removal from
    /// a current publisher but the last one from an older publisher, and the event does not say
    /// which. When the stream had shown the object on the other medium, it becomes a suspect,
    /// to be confirmed by `Index::confirm_suspect` (see the crate docs).
    pub(crate) fn remove_replica(
        &mut self,
        tenant: &str,
        key: &str,
        medium: Option<Medium>,
    ) -> Applied {
        let Some(parsed) = parse_object_key(key) else {
            self.counters.unparsed_keys += 1;
            return Applied::Unparsed;
        };
        let Some(ns) = self.find_namespace(tenant, parsed.prefix) else {
            return Applied::Done;
        };
        let Some(slot) = self.namespaces[ns as usize]
            .suffixes
            .iter()
            .position(|s| s == parsed.suffix)
        else {
            return Applied::Done;
        };
        let bit = 1u128 << slot;
        let h = self.table_hash(ns, &parsed.page_hash);
        // Any later event decides a suspect; a removal leaves it absent.
        self.unsuspect(h, ns, &parsed.page_hash, bit);
        let Some(idx) = self.find(h, ns, &parsed.page_hash) else {
            return Applied::Done;
        };
        let page = self.shared.pages.get(idx);
        let remaining_disk = match medium {
            Some(Medium::Disk) => (page.cpu & bit != 0).then_some(false),
            Some(Medium::Cpu | Medium::Other) => (page.disk & bit != 0).then_some(true),
            None => None,
        };
        self.clear_bit(idx, h, bit, true);
        if let Some(on_disk) = remaining_disk {
            self.suspect(h, ns, parsed.page_hash, bit, on_disk);
        }
        Applied::Done
    }

    /// Sets one object's bit for `medium`, making room for its page if needed.
    fn set_bit(&mut self, h: u64, ns: u32, hash: PageHash, bit: u128, medium: Option<Medium>) {
        let idx = match self.find(h, ns, &hash) {
            Some(idx) => idx,
            None => self.insert_page(h, ns, hash),
        };
        self.stamp += 1;
        let mut page = self.shared.pages.get(idx);
        let before = page.present();
        let masks = (page.cpu, page.disk);
        match medium {
            Some(Medium::Disk) => page.disk |= bit,
            Some(Medium::Cpu | Medium::Other) => page.cpu |= bit,
            None if before & bit == 0 => page.cpu |= bit,
            None => {}
        }
        if (page.cpu, page.disk) != masks {
            // A store that changes nothing writes nothing: the slot's version stays, and a
            // query that claims the page need not read again.
            self.shared.pages.set_masks(idx, page.cpu, page.disk);
        }
        self.touched[idx] = self.stamp;
        if before & bit == 0 {
            self.live_objects += 1;
            self.note_change(ns, hash, before, before | bit);
        }
    }

    /// Reports whether the exact object `key` of `tenant` is present.
    pub fn contains_key(&self, tenant: &str, key: &str) -> bool {
        let Some(parsed) = parse_object_key(key) else {
            return false;
        };
        self.locate(tenant, &parsed)
            .is_some_and(|(idx, _, bit)| self.shared.pages.present(idx) & bit != 0)
    }

    /// Forgets every page of `tenant`; returns the pages and objects forgotten. Atomic for
    /// readers, like [`Index::clear`]: a query that overlaps it reads again.
    pub(crate) fn clear_tenant(&mut self, tenant: &str) -> (usize, usize) {
        self.begin_change();
        let mut forgotten = (0, 0);
        for idx in 0..self.len {
            let page = self.shared.pages.get(idx);
            if page.present() != 0 && self.namespaces[page.ns as usize].tenant == tenant {
                forgotten.0 += 1;
                forgotten.1 += page.present().count_ones() as usize;
                self.forget_page(idx);
                self.free.push(idx as u32);
            }
        }
        // Every medium: the tenant's suspects go too.
        let namespaces = &self.namespaces;
        self.suspects
            .retain(|s| namespaces[s.ns as usize].tenant != tenant);
        self.stamp += 1;
        forgotten
    }

    /// Forgets every page, and the namespaces with them (their numbers are free again, so a
    /// store that once saw many prefixes cannot fill the namespace table for good); returns
    /// the pages and objects forgotten.
    ///
    /// No deltas are collected: the caller reports one clear instead of a delta per page.
    pub(crate) fn clear(&mut self) -> (usize, usize) {
        // First: a number reused after the clear is then never read as the old one (see
        // `shared::namespaces`).
        self.begin_change();
        let forgotten = (self.live_pages, self.live_objects);
        if !self.namespaces.is_empty() {
            self.shared.namespaces.reclaim();
            self.namespaces.clear();
            self.ns_table.clear();
            self.last_ns = None;
        }
        self.shared.pages.clear(self.len);
        self.len = 0;
        self.touched.clear();
        self.free.clear();
        self.deltas.clear();
        self.clock_hand = 0;
        self.live_pages = 0;
        self.live_objects = 0;
        self.verify_cursor = 0;
        self.verify_slot = 0;
        self.suspects.clear();
        self.stamp += 1;
        forgotten
    }

    /// Marks the start of a change that readers must read again after: a clear, or a batch
    /// holding an event that names no object (see [`shared`]). Clears call it themselves;
    /// keyed removals need none (they move the removal count). Idempotent until
    /// [`Index::settle`].
    pub(crate) fn begin_change(&mut self) {
        self.shared.pages.begin_change();
    }

    /// Ends the change [`Index::begin_change`] (or a removal) started, if any. A writer whose
    /// index is read by a [`crate::Reader`] MUST call it once its input is applied (the
    /// session does, at the end of every input); until then such queries ask under its lock.
    pub(crate) fn settle(&mut self) {
        self.shared.pages.end_change();
    }

    /// Returns a handle on what the index shares with readers (see [`shared`]).
    pub(crate) fn shared(&self) -> Arc<Shared> {
        Arc::clone(&self.shared)
    }

    /// Returns the bytes the index has allocated (tables, slab, namespaces).
    pub fn allocated_bytes(&self) -> usize {
        let ns: usize = self
            .namespaces
            .iter()
            .map(|n| {
                // The struct itself is in the vector's capacity, counted below.
                n.tenant.capacity()
                    + n.prefix.as_ref().map_or(0, String::capacity)
                    + n.suffixes
                        .iter()
                        .map(|s| s.capacity() + core::mem::size_of::<String>())
                        .sum::<usize>()
            })
            .sum();
        self.shared.pages.allocated_bytes()
            + self.shared.namespaces.allocated_bytes()
            + self.ns_table.allocation_size()
            + self.suspects.allocation_size()
            + self.touched.capacity() * core::mem::size_of::<u64>()
            + self.free.capacity() * core::mem::size_of::<u32>()
            + self.namespaces.capacity() * core::mem::size_of::<Namespace>()
            + ns
    }

    /// Finds the slab slot, table hash and suffix bit of a parsed key, if its page is held.
    fn locate(&self, tenant: &str, parsed: &ObjectKey<'_>) -> Option<(usize, u64, u128)> {
        let ns = self.find_namespace(tenant, parsed.prefix)?;
        let slot = self.namespaces[ns as usize]
            .suffixes
            .iter()
            .position(|s| s == parsed.suffix)?;
        let h = self.table_hash(ns, &parsed.page_hash);
        let idx = self.find(h, ns, &parsed.page_hash)?;
        Some((idx, h, 1u128 << slot))
    }

    /// Clears one suffix bit of a held page on every medium, freeing the page when nothing is
    /// left. `touch` marks the page as changed by the stream (verification's own removals do
    /// not).
    fn clear_bit(&mut self, idx: usize, h: u64, bit: u128, touch: bool) {
        self.stamp += 1;
        let mut page = self.shared.pages.get(idx);
        let before = page.present();
        page.cpu &= !bit;
        page.disk &= !bit;
        if touch {
            self.touched[idx] = self.stamp;
        }
        let after = page.present();
        if before == after {
            return;
        }
        // A removal of a page's objects is written in its slot: a query that overlaps it
        // checks its claims again (the slot's version moved), it need not read again.
        self.shared.pages.begin_removal();
        self.shared.pages.set_masks(idx, page.cpu, page.disk);
        self.live_objects -= 1;
        let (ns, hash) = (page.ns, page.hash);
        self.note_change(ns, hash, before, after);
        if after == 0 {
            self.unlink(idx, h);
            self.live_pages -= 1;
            self.free.push(idx as u32);
        }
    }

    /// Records a delta when a change crosses a watched layout's completeness.
    fn note_change(&mut self, ns: u32, page: PageHash, before: u128, after: u128) {
        let mask = self.namespaces[ns as usize].complete_mask;
        if mask == 0 {
            return;
        }
        let (was, is) = (before & mask == mask, after & mask == mask);
        if was != is {
            self.deltas.push(Delta {
                namespace: ns,
                page,
                complete: is,
            });
        }
    }
}
