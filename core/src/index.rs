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
//! removal confirms it ([`Index::confirm_suspect`]) or any later event about it decides. See
//! the crate docs for why.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use hashbrown::HashTable;

use crate::frame::Medium;
use crate::hash::PageHash;
use crate::layout::{parse_object_key, HitPolicy, Layout, ObjectKey};

/// Suffix slots per namespace: the width of a page's presence mask.
pub const MAX_SUFFIXES: usize = 128;

/// Trailing-page pools a query can honour; a layout with more answers no hits.
pub const MAX_TRAILING_POOLS: usize = 8;

/// The longest tenant the index tracks; objects of longer ones are counted as untracked.
pub const MAX_TENANT_LEN: usize = 256;

/// The longest key prefix the index tracks; objects under longer ones are counted as untracked.
pub const MAX_PREFIX_LEN: usize = 1024;

/// The tenant Mooncake uses when none is configured, and the one events without a tenant mean.
pub const DEFAULT_TENANT: &str = "default";

/// Limits and seeds of an [`Index`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexConfig {
    /// The most pages held at once; a full index evicts (CLOCK) to make room.
    pub max_pages: usize,
    /// The most `(tenant, key prefix)` pairs; objects of further pairs are counted and ignored.
    pub max_namespaces: usize,
    /// Seeds the hash of the page table, so hostile keys cannot be aimed at one bucket.
    pub seed: u64,
}

impl Default for IndexConfig {
    fn default() -> Self {
        IndexConfig {
            max_pages: 1 << 20,
            max_namespaces: 1024,
            seed: 0x5eed_1dc0_ffee_0001,
        }
    }
}

/// One logical page: its identity and which of its namespace's suffixes are present, per medium.
#[derive(Debug)]
struct Page {
    hash: PageHash,
    ns: u32,
    referenced: AtomicBool,
    /// Objects with a memory replica (or one on a medium the event did not name).
    cpu: u128,
    /// Objects with a disk replica.
    disk: u128,
    /// The index's write stamp when this page last changed (guards verification removals).
    touched: u64,
}

impl Page {
    /// The objects present on any medium.
    #[inline]
    fn present(&self) -> u128 {
        self.cpu | self.disk
    }
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

/// One `(tenant, key prefix)` pair and the suffixes seen in it.
#[derive(Debug)]
struct Namespace {
    tenant: String,
    prefix: Option<String>,
    suffixes: Vec<String>,
    /// The mask that makes a page complete under a watched layout (0: not watched).
    complete_mask: u128,
}

/// What one event did to the index.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The object is now in the state the event says (`stored` and `removed` are idempotent).
    Applied,
    /// The key does not parse as `{P}_{H}{S}`: it can never be an expected key.
    Unparsed,
    /// The namespace table or the namespace's suffix table is full; the object is not tracked
    /// (its page can only miss).
    Untracked,
}

/// A page that became complete or incomplete under a watched layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delta {
    /// The namespace number (see [`Index::namespace`]).
    pub namespace: u32,
    /// The page hash.
    pub page: PageHash,
    /// `true`: every watched object is now present; `false`: one no longer is.
    pub complete: bool,
}

/// The answer of [`Index::query`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexHits {
    /// Leading pages fully present, honouring trailing-page policies.
    pub prefix_pages: usize,
    /// Pages hashed and probed.
    pub pages_checked: usize,
    /// Of the prefix pages, how many have a memory replica of every all-pages object (or one
    /// on a medium the events did not name).
    pub memory_pages: usize,
    /// Of the prefix pages, how many have an all-pages object present only on disk.
    pub disk_only_pages: usize,
}

/// What one call of [`Index::sample_keys`] covered.
///
/// A *sweep* is one pass of the verification cursor over the page slab, from the first slot of
/// its first page past its last page. Every object of the sampled tenant that is present when
/// a sweep begins and stays present until the cursor reaches it is sampled in that sweep;
/// objects stored after the cursor passed their slot are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sampled {
    /// The write stamp to pass back to [`Index::remove_stale`].
    pub stamp: u64,
    /// The call began where a sweep begins (the first slot of the first page).
    pub began_sweep: bool,
    /// The cursor went past the last page during the call: a sweep ended in it.
    pub ended_sweep: bool,
    /// A sweep ended and the call went on into the next one (the cursor did not stop at the
    /// first slot of the first page): that sweep began with this call.
    pub began_next: bool,
    /// The cursor passed a page holding objects of another tenant (which are not sampled).
    pub other_tenants: bool,
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
    table: HashTable<u32>,
    pages: Vec<Page>,
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

/// Pages of capacity per suspect page the side table may hold (and at least 16): a full table
/// costs under 3 bytes per page.
const PAGES_PER_SUSPECT_PAGE: usize = 64;

impl Index {
    /// Makes an empty index; the page table is sized for `config.max_pages` up front.
    pub fn new(config: IndexConfig) -> Index {
        let cap = config.max_pages.max(1);
        Index {
            table: HashTable::with_capacity(cap),
            pages: Vec::with_capacity(cap),
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
    pub fn watch_layout(&mut self, layout: &Layout) {
        if self.watched_layouts.iter().any(|l| l == layout) {
            return;
        }
        self.watched_layouts.push(layout.clone());
        for ns in 0..self.namespaces.len() {
            self.refresh_complete_mask(ns);
        }
    }

    /// Takes the page-level deltas collected since the last call.
    pub fn drain_deltas(&mut self) -> alloc::vec::Drain<'_, Delta> {
        self.deltas.drain(..)
    }

    /// Marks `key` present on `medium` (idempotent). `None` names no medium: it marks an absent
    /// object present in memory and leaves a present one's media as they are.
    pub fn store(
        &mut self,
        tenant: &str,
        key: &str,
        group_id: Option<&str>,
        medium: Option<Medium>,
    ) -> Applied {
        let Some(parsed) = parse_object_key(key) else {
            self.counters.unparsed_keys += 1;
            return Applied::Unparsed;
        };
        if let Some(group) = group_id {
            let logical = &key[..key.len() - parsed.suffix.len()];
            if group.strip_prefix("sglang-hicache:") != Some(logical) {
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
        Applied::Applied
    }

    /// Marks `key` absent on every medium (idempotent).
    pub fn remove(&mut self, tenant: &str, key: &str) -> Applied {
        self.remove_replica(tenant, key, None)
    }

    /// Takes `medium` away from `key` (`None`: every medium); idempotent.
    ///
    /// The object is absent afterwards whatever it held: a removal is a per-medium removal from
    /// a current publisher but the last one from an older publisher, and the event does not say
    /// which. When the stream had shown the object on the other medium, it becomes a suspect,
    /// to be confirmed by [`Index::confirm_suspect`] (see the crate docs).
    pub fn remove_replica(&mut self, tenant: &str, key: &str, medium: Option<Medium>) -> Applied {
        let Some(parsed) = parse_object_key(key) else {
            self.counters.unparsed_keys += 1;
            return Applied::Unparsed;
        };
        let Some(ns) = self.find_namespace(tenant, parsed.prefix) else {
            return Applied::Applied;
        };
        let Some(slot) = self.namespaces[ns as usize]
            .suffixes
            .iter()
            .position(|s| s == parsed.suffix)
        else {
            return Applied::Applied;
        };
        let bit = 1u128 << slot;
        let h = self.table_hash(ns, &parsed.page_hash);
        // Any later event decides a suspect; a removal leaves it absent.
        self.unsuspect(h, ns, &parsed.page_hash, bit);
        let Some(idx) = self.find(h, ns, &parsed.page_hash) else {
            return Applied::Applied;
        };
        let page = &self.pages[idx];
        let remaining_disk = match medium {
            Some(Medium::Disk) => (page.cpu & bit != 0).then_some(false),
            Some(Medium::Cpu | Medium::Other) => (page.disk & bit != 0).then_some(true),
            None => None,
        };
        self.clear_bit(idx, h, bit, true);
        if let Some(on_disk) = remaining_disk {
            self.suspect(h, ns, parsed.page_hash, bit, on_disk);
        }
        Applied::Applied
    }

    /// Returns the number of suspect objects (see the module docs).
    pub fn suspect_count(&self) -> usize {
        self.suspects
            .iter()
            .map(|s| s.slots.count_ones() as usize)
            .sum()
    }

    /// Collects up to `max` keys of `tenant`'s suspects into `out` (after what it holds) for
    /// verification; returns how many it added.
    pub fn sample_suspects(&self, tenant: &str, max: usize, out: &mut Vec<String>) -> usize {
        let start = out.len();
        for s in self.suspects.iter() {
            let ns = &self.namespaces[s.ns as usize];
            if ns.tenant != tenant {
                continue;
            }
            let mut bits = s.slots;
            while bits != 0 {
                if out.len() - start >= max {
                    return out.len() - start;
                }
                let slot = bits.trailing_zeros();
                bits &= bits - 1;
                out.push(object_key(
                    ns.prefix.as_deref(),
                    &s.hash,
                    &ns.suffixes[slot as usize],
                ));
            }
        }
        out.len() - start
    }

    /// Brings a suspect back as present on the medium that may still hold it, when a
    /// verification found it present at the master; `stamp` is the write stamp when the keys
    /// were sampled (see [`Index::sample_keys`]). Only a suspect that was suspended before
    /// `stamp` and that no event touched since comes back: the answer was then read after its
    /// removal, and an event about it after the answer still applies. Returns whether it came
    /// back.
    pub fn confirm_suspect(&mut self, tenant: &str, key: &str, stamp: u64) -> bool {
        let Some((h, ns, hash, bit)) = self.find_suspect(tenant, key) else {
            return false;
        };
        let Some(s) = self.suspects.find(h, |s| s.ns == ns && s.hash == hash) else {
            return false;
        };
        if s.stamp > stamp {
            return false;
        }
        let medium = if s.disk & bit != 0 {
            Medium::Disk
        } else {
            Medium::Cpu
        };
        self.unsuspect(h, ns, &hash, bit);
        self.set_bit(h, ns, hash, bit, Some(medium));
        self.counters.suspects_confirmed += 1;
        true
    }

    /// Forgets a suspect that a verification found absent; returns whether it was one.
    pub fn drop_suspect(&mut self, tenant: &str, key: &str) -> bool {
        match self.find_suspect(tenant, key) {
            Some((h, ns, hash, bit)) => {
                self.unsuspect(h, ns, &hash, bit);
                true
            }
            None => false,
        }
    }

    /// Finds a suspect object by key: its table hash, namespace, page hash and suffix bit.
    fn find_suspect(&self, tenant: &str, key: &str) -> Option<(u64, u32, PageHash, u128)> {
        if self.suspects.is_empty() {
            return None;
        }
        let parsed = parse_object_key(key)?;
        let ns = self.find_namespace(tenant, parsed.prefix)?;
        let slot = self.namespaces[ns as usize]
            .suffixes
            .iter()
            .position(|s| s == parsed.suffix)?;
        let bit = 1u128 << slot;
        let h = self.table_hash(ns, &parsed.page_hash);
        let s = self
            .suspects
            .find(h, |s| s.ns == ns && s.hash == parsed.page_hash)?;
        (s.slots & bit != 0).then_some((h, ns, parsed.page_hash, bit))
    }

    /// Records a suspect object, unless the table is full (it then stays absent).
    fn suspect(&mut self, h: u64, ns: u32, hash: PageHash, bit: u128, on_disk: bool) {
        let stamp = self.stamp;
        let disk = if on_disk { bit } else { 0 };
        if let Some(s) = self.suspects.find_mut(h, |s| s.ns == ns && s.hash == hash) {
            s.slots |= bit;
            s.disk = (s.disk & !bit) | disk;
            s.stamp = stamp;
        } else if self.suspects.len() < self.max_suspect_pages() {
            let seed = self.config.seed;
            self.suspects.insert_unique(
                h,
                SuspectPage {
                    ns,
                    hash,
                    slots: bit,
                    disk,
                    stamp,
                },
                |s| page_table_hash(seed, s.ns, &s.hash),
            );
        } else {
            self.counters.suspects_dropped += 1;
            return;
        }
        self.counters.suspended_objects += 1;
    }

    /// Forgets the suspects among `bits` of a page.
    fn unsuspect(&mut self, h: u64, ns: u32, hash: &PageHash, bits: u128) {
        if self.suspects.is_empty() {
            return;
        }
        if let Ok(mut entry) = self
            .suspects
            .find_entry(h, |s| s.ns == ns && s.hash == *hash)
        {
            let s = entry.get_mut();
            s.slots &= !bits;
            s.disk &= !bits;
            if s.slots == 0 {
                entry.remove();
            }
        }
    }

    fn max_suspect_pages(&self) -> usize {
        (self.config.max_pages / PAGES_PER_SUSPECT_PAGE).max(16)
    }

    /// Sets one object's bit for `medium`, making room for its page if needed.
    fn set_bit(&mut self, h: u64, ns: u32, hash: PageHash, bit: u128, medium: Option<Medium>) {
        let idx = match self.find(h, ns, &hash) {
            Some(idx) => idx,
            None => self.insert_page(h, ns, hash),
        };
        self.stamp += 1;
        let page = &mut self.pages[idx];
        let before = page.present();
        match medium {
            Some(Medium::Disk) => page.disk |= bit,
            Some(Medium::Cpu | Medium::Other) => page.cpu |= bit,
            None if before & bit == 0 => page.cpu |= bit,
            None => {}
        }
        page.touched = self.stamp;
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
            .is_some_and(|(idx, _, bit)| self.pages[idx].present() & bit != 0)
    }

    /// Forgets every page of `tenant`; returns the pages and objects forgotten.
    pub fn clear_tenant(&mut self, tenant: &str) -> (usize, usize) {
        let mut forgotten = (0, 0);
        for idx in 0..self.pages.len() {
            let page = &self.pages[idx];
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

    /// Forgets every page; returns the pages and objects forgotten.
    ///
    /// No deltas are collected: the caller reports one clear instead of a delta per page.
    pub fn clear(&mut self) -> (usize, usize) {
        let forgotten = (self.live_pages, self.live_objects);
        self.table.clear();
        self.pages.clear();
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

    /// Answers how many leading pages of `pages` are fully present for `layout` in `tenant`.
    ///
    /// Hashing is driven by the iterator: in prefix mode (`map` is `None`) the query stops at
    /// the first page that misses an all-pages object, so later pages are never hashed. With a
    /// map, every page up to the map's length is probed and `map[i]` says whether page `i` has
    /// all objects of all pools.
    pub fn query<I>(
        &self,
        tenant: &str,
        layout: &Layout,
        pages: I,
        mut map: Option<&mut [bool]>,
    ) -> IndexHits
    where
        I: Iterator<Item = PageHash>,
    {
        let mut hits = IndexHits::default();
        let Some(plan) = self.plan(tenant, layout) else {
            if let Some(map) = map {
                map.fill(false);
            }
            return hits;
        };
        let trailing = &plan.trailing[..plan.trailing_len];
        let mut runs = [0u32; MAX_TRAILING_POOLS];
        let mut all_ok = true;
        let (mut memory, mut disk_only) = (0usize, 0usize);
        for (i, hash) in pages.enumerate() {
            if let Some(map) = map.as_deref() {
                if i >= map.len() {
                    break;
                }
            }
            hits.pages_checked = i + 1;
            let (present, cpu) = self.probe(plan.ns, &hash);
            let page_all = present & plan.all_mask == plan.all_mask;
            let mut page_full = page_all;
            for (run, &(mask, _)) in runs.iter_mut().zip(trailing) {
                if present & mask == mask {
                    *run += 1;
                } else {
                    *run = 0;
                    page_full = false;
                }
            }
            if let Some(map) = map.as_deref_mut() {
                map[i] = page_full;
            }
            all_ok &= page_all;
            if !all_ok {
                if map.is_none() {
                    break;
                }
                continue;
            }
            if cpu & plan.all_mask == plan.all_mask {
                memory += 1;
            } else {
                disk_only += 1;
            }
            let n = i + 1;
            let trailing_ok = runs
                .iter()
                .zip(trailing)
                .all(|(&run, &(_, w))| run as usize >= (w as usize).min(n));
            if trailing_ok {
                hits.prefix_pages = n;
                hits.memory_pages = memory;
                hits.disk_only_pages = disk_only;
            }
        }
        if let Some(map) = map {
            let from = hits.pages_checked.min(map.len());
            map[from..].fill(false);
        }
        hits
    }

    /// Collects up to `max` present object keys of `tenant` for verification, round-robin
    /// through the index so that repeated calls cover every page; returns the write stamp to pass
    /// back to [`Index::remove_stale`] and where the call began and ended (see [`Sampled`]).
    pub fn sample_keys(&mut self, tenant: &str, max: usize, out: &mut Vec<String>) -> Sampled {
        let len = self.pages.len();
        let mut sampled = Sampled {
            stamp: self.stamp,
            began_sweep: self.verify_cursor == 0 && self.verify_slot == 0,
            ended_sweep: false,
            began_next: false,
            other_tenants: false,
        };
        // A round that starts inside a page comes back to it for the slots before the cursor.
        let limit = len + usize::from(self.verify_slot > 0);
        let mut visited = 0;
        while out.len() < max && visited < limit && len > 0 {
            let idx = self.verify_cursor % len;
            let page = &self.pages[idx];
            let ns = &self.namespaces[page.ns as usize];
            if page.present() != 0 && ns.tenant == tenant {
                // Resume where the last round stopped within this page.
                let mut bits = page.present() & (!0u128).checked_shl(self.verify_slot).unwrap_or(0);
                while bits != 0 {
                    if out.len() >= max {
                        sampled.began_next = sampled.ended_sweep;
                        return sampled;
                    }
                    let slot = bits.trailing_zeros();
                    bits &= bits - 1;
                    out.push(object_key(
                        ns.prefix.as_deref(),
                        &page.hash,
                        &ns.suffixes[slot as usize],
                    ));
                    self.verify_slot = slot + 1;
                }
            } else if page.present() != 0 {
                sampled.other_tenants = true;
            }
            self.verify_cursor = (idx + 1) % len;
            self.verify_slot = 0;
            sampled.ended_sweep |= self.verify_cursor == 0;
            visited += 1;
        }
        sampled.began_next = sampled.ended_sweep && self.verify_cursor != 0;
        sampled
    }

    /// Removes `key` of `tenant` when a verification found it absent, unless its page changed
    /// after `stamp` (the write stamp when the keys were sampled): a store that raced the check
    /// wins. Returns whether the object was removed.
    pub fn remove_stale(&mut self, tenant: &str, key: &str, stamp: u64) -> bool {
        let Some(parsed) = parse_object_key(key) else {
            return false;
        };
        match self.locate(tenant, &parsed) {
            Some((idx, h, bit))
                if self.pages[idx].touched <= stamp && self.pages[idx].present() & bit != 0 =>
            {
                self.clear_bit(idx, h, bit, false);
                true
            }
            _ => false,
        }
    }

    /// Returns the bytes the index has allocated (tables, slab, namespaces).
    pub fn allocated_bytes(&self) -> usize {
        let ns: usize = self
            .namespaces
            .iter()
            .map(|n| {
                core::mem::size_of::<Namespace>()
                    + n.tenant.capacity()
                    + n.prefix.as_ref().map_or(0, String::capacity)
                    + n.suffixes
                        .iter()
                        .map(|s| s.capacity() + core::mem::size_of::<String>())
                        .sum::<usize>()
            })
            .sum();
        self.table.allocation_size()
            + self.ns_table.allocation_size()
            + self.suspects.allocation_size()
            + self.pages.capacity() * core::mem::size_of::<Page>()
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
        let page = &mut self.pages[idx];
        let before = page.present();
        page.cpu &= !bit;
        page.disk &= !bit;
        if touch {
            page.touched = self.stamp;
        }
        let after = page.present();
        if before == after {
            return;
        }
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

    /// Returns a page's present objects and those of them with a memory replica.
    fn probe(&self, ns: u32, hash: &PageHash) -> (u128, u128) {
        let h = self.table_hash(ns, hash);
        match self.find(h, ns, hash) {
            Some(idx) => {
                let page = &self.pages[idx];
                if !page.referenced.load(Ordering::Relaxed) {
                    page.referenced.store(true, Ordering::Relaxed);
                }
                (page.present(), page.cpu)
            }
            None => (0, 0),
        }
    }

    fn plan(&self, tenant: &str, layout: &Layout) -> Option<Plan> {
        let ns = self.find_namespace(tenant, layout.key_prefix.as_deref())?;
        let suffixes = &self.namespaces[ns as usize].suffixes;
        let mut plan = Plan {
            ns,
            all_mask: 0,
            trailing: [(0, 0); MAX_TRAILING_POOLS],
            trailing_len: 0,
        };
        for pool in &layout.pools {
            let mut mask = 0u128;
            for suffix in &pool.suffixes {
                let slot = suffixes.iter().position(|s| s == suffix)?;
                mask |= 1u128 << slot;
            }
            match pool.hit_policy {
                HitPolicy::AllPages => plan.all_mask |= mask,
                HitPolicy::TrailingPages(w) => {
                    let entry = plan.trailing.get_mut(plan.trailing_len)?;
                    *entry = (mask, w.max(1));
                    plan.trailing_len += 1;
                }
            }
        }
        (plan.all_mask != 0).then_some(plan)
    }

    fn table_hash(&self, ns: u32, hash: &PageHash) -> u64 {
        page_table_hash(self.config.seed, ns, hash)
    }

    fn find(&self, h: u64, ns: u32, hash: &PageHash) -> Option<usize> {
        let pages = &self.pages;
        self.table
            .find(h, |&i| {
                let p = &pages[i as usize];
                p.ns == ns && p.hash == *hash
            })
            .map(|&i| i as usize)
    }

    fn insert_page(&mut self, h: u64, ns: u32, hash: PageHash) -> usize {
        let blank = Page {
            hash,
            ns,
            referenced: AtomicBool::new(false),
            cpu: 0,
            disk: 0,
            touched: 0,
        };
        let idx = if let Some(idx) = self.free.pop() {
            idx as usize
        } else if self.pages.len() < self.config.max_pages {
            self.pages.len()
        } else {
            self.evict_one()
        };
        if idx == self.pages.len() {
            self.pages.push(blank);
        } else {
            self.pages[idx] = blank;
        }
        let pages = &self.pages;
        let seed = self.config.seed;
        self.table.insert_unique(h, idx as u32, |&i| {
            let p = &pages[i as usize];
            page_table_hash(seed, p.ns, &p.hash)
        });
        self.live_pages += 1;
        idx
    }

    /// Drops a held page: its objects, its table entry and (when watched) a delta. The caller
    /// decides what becomes of the slot.
    fn forget_page(&mut self, idx: usize) {
        let page = &self.pages[idx];
        let (ns, hash, present) = (page.ns, page.hash, page.present());
        self.live_objects -= present.count_ones() as usize;
        self.live_pages -= 1;
        self.note_change(ns, hash, present, 0);
        self.pages[idx].cpu = 0;
        self.pages[idx].disk = 0;
        let h = self.table_hash(ns, &hash);
        self.unlink(idx, h);
    }

    fn unlink(&mut self, idx: usize, h: u64) {
        if let Ok(entry) = self.table.find_entry(h, |&i| i as usize == idx) {
            entry.remove();
        }
    }

    /// Evicts one page by CLOCK and returns its slot, which the caller reuses at once.
    fn evict_one(&mut self) -> usize {
        loop {
            let idx = self.clock_hand;
            self.clock_hand = (idx + 1) % self.pages.len();
            let page = &self.pages[idx];
            if page.present() == 0 || page.referenced.swap(false, Ordering::Relaxed) {
                continue;
            }
            self.forget_page(idx);
            self.counters.evictions += 1;
            return idx;
        }
    }

    fn find_namespace(&self, tenant: &str, prefix: Option<&str>) -> Option<u32> {
        let namespaces = &self.namespaces;
        self.ns_table
            .find(namespace_hash(self.config.seed, tenant, prefix), |&i| {
                let ns = &namespaces[i as usize];
                ns.tenant == tenant && ns.prefix.as_deref() == prefix
            })
            .copied()
    }

    fn intern(&mut self, tenant: &str, prefix: Option<&str>, suffix: &str) -> Option<(u32, u32)> {
        if tenant.len() > MAX_TENANT_LEN || prefix.is_some_and(|p| p.len() > MAX_PREFIX_LEN) {
            return None;
        }
        let cached = self.last_ns.filter(|&i| {
            let ns = &self.namespaces[i as usize];
            ns.tenant == tenant && ns.prefix.as_deref() == prefix
        });
        let ns = match cached.or_else(|| self.find_namespace(tenant, prefix)) {
            Some(ns) => ns,
            None => {
                if self.namespaces.len() >= self.config.max_namespaces {
                    return None;
                }
                let ns = self.namespaces.len() as u32;
                self.namespaces.push(Namespace {
                    tenant: tenant.into(),
                    prefix: prefix.map(String::from),
                    suffixes: Vec::new(),
                    complete_mask: 0,
                });
                let (namespaces, seed) = (&self.namespaces, self.config.seed);
                self.ns_table
                    .insert_unique(namespace_hash(seed, tenant, prefix), ns, |&i| {
                        let n = &namespaces[i as usize];
                        namespace_hash(seed, &n.tenant, n.prefix.as_deref())
                    });
                self.refresh_complete_mask(ns as usize);
                ns
            }
        };
        self.last_ns = Some(ns);
        let slot = self.intern_suffix(ns as usize, suffix)?;
        Some((ns, slot))
    }

    fn intern_suffix(&mut self, ns: usize, suffix: &str) -> Option<u32> {
        let suffixes = &mut self.namespaces[ns].suffixes;
        if let Some(slot) = suffixes.iter().position(|s| s == suffix) {
            return Some(slot as u32);
        }
        if suffixes.len() >= MAX_SUFFIXES {
            return None;
        }
        suffixes.push(suffix.into());
        Some((suffixes.len() - 1) as u32)
    }

    /// Recomputes which suffix mask makes a page of namespace `ns` complete, giving the watched
    /// layouts' suffixes their slots now. A namespace whose table cannot hold them is unwatched.
    fn refresh_complete_mask(&mut self, ns: usize) {
        let prefix = self.namespaces[ns].prefix.as_deref();
        let wanted: Vec<String> = self
            .watched_layouts
            .iter()
            .filter(|l| l.key_prefix.as_deref() == prefix)
            .flat_map(|l| l.pools.iter().flat_map(|p| p.suffixes.iter().cloned()))
            .collect();
        let mut mask = 0u128;
        for suffix in &wanted {
            match self.intern_suffix(ns, suffix) {
                Some(slot) => mask |= 1u128 << slot,
                None => {
                    mask = 0;
                    break;
                }
            }
        }
        self.namespaces[ns].complete_mask = mask;
    }
}

/// A layout resolved against one namespace: the masks a query tests.
struct Plan {
    ns: u32,
    all_mask: u128,
    trailing: [(u128, u32); MAX_TRAILING_POOLS],
    trailing_len: usize,
}

/// The page table's hash of `(namespace, page hash)`: page hashes are already uniform, so 16 of
/// their bytes mixed with the seed and the namespace suffice.
fn page_table_hash(seed: u64, ns: u32, hash: &PageHash) -> u64 {
    let b = &hash.0;
    let lo = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let hi = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    mix(
        lo ^ seed,
        hi ^ u64::from(ns).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    )
}

/// The namespace table's hash of `(tenant, prefix)`.
fn namespace_hash(seed: u64, tenant: &str, prefix: Option<&str>) -> u64 {
    let mut h = seed;
    for part in [Some(tenant), prefix] {
        h = mix(h, 0x100 + part.map_or(0, str::len) as u64);
        for chunk in part.unwrap_or("").as_bytes().chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            h = mix(h, u64::from_le_bytes(word));
        }
    }
    h
}

/// A 64-bit mixing function (folded 128-bit multiply).
fn mix(a: u64, b: u64) -> u64 {
    let full =
        u128::from(a ^ 0xa076_1d64_78bd_642f).wrapping_mul(u128::from(b ^ 0xe703_7ed1_a0b4_28db));
    (full as u64) ^ ((full >> 64) as u64)
}

/// Formats an object key `{P}_{H}{S}` (or `{H}{S}`).
pub(crate) fn object_key(prefix: Option<&str>, hash: &PageHash, suffix: &str) -> String {
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
