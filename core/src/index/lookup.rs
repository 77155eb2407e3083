//! Queries: a plan per layout, and the probe of each page.

use super::hits::{IndexHits, MapCover};
use super::*;

/// A layout resolved against one namespace: the masks a query tests.
pub(super) struct Plan {
    pub(super) ns: u32,
    pub(super) all_mask: u128,
    pub(super) trailing: [(u128, u32); MAX_TRAILING_POOLS],
    pub(super) trailing_len: usize,
}

impl Index {
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
        map: Option<&mut [bool]>,
    ) -> IndexHits
    where
        I: Iterator<Item = PageHash>,
    {
        self.shared
            .query(tenant, layout, pages, map, None, MapCover::Every)
    }
}

impl Shared {
    /// [`Index::query`] on the shared table: every page is one atomic read of its slot (see
    /// [`super::shared`]). A reader running beside the writer MUST check the table's state
    /// before and after ([`PageTable::still`]) and drop the answer if it moved; `claims`, if
    /// given, receives the slot of every page the answer may claim (every page with all its
    /// all-pages objects), to be checked again when removals overlapped the query. `cover` says
    /// whether a map stops at the first miss, as the prefix does, or covers every page.
    pub(crate) fn query<I>(
        &self,
        tenant: &str,
        layout: &Layout,
        pages: I,
        mut map: Option<&mut [bool]>,
        mut claims: Option<&mut Claims>,
        cover: MapCover,
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
            let (present, cpu, at) = self.pages.probe_at(plan.ns, &hash);
            let page_all = present & plan.all_mask == plan.all_mask;
            if let (true, Some(claims), Some(at)) = (page_all, claims.as_deref_mut(), at) {
                claims.push(at);
            }
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
                if map.is_none() || cover == MapCover::UntilMiss {
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

    /// Reports whether the shared table holds the object `key` of `tenant` (on any medium):
    /// [`Index::contains_key`] as a reader sees it. One read of the page's slot, which leaves
    /// its reference bit alone (the eviction order is the queries' to set); a reader
    /// running beside the writer reads one state of that object, or `false` while a clear
    /// replaces the directory (a miss is safe).
    pub(crate) fn holds_object(&self, tenant: &str, key: &str) -> bool {
        let Some(parsed) = parse_object_key(key) else {
            return false;
        };
        let Some((ns, bit)) = self.namespaces.read().and_then(|directory| {
            let (ns, entry) = directory.find(tenant, parsed.prefix)?;
            Some((ns, 1u128 << entry.slot_of(parsed.suffix)?))
        }) else {
            return false;
        };
        self.pages.peek(ns, &parsed.page_hash) & bit != 0
    }

    /// Resolves `layout` in `tenant`'s namespace, under the directory's read lock (dropped
    /// before any page is probed); `None` when nothing can hit, or while a clear replaces the
    /// directory (a miss, and the state the query checks makes it read again).
    pub(super) fn plan(&self, tenant: &str, layout: &Layout) -> Option<Plan> {
        let directory = self.namespaces.read()?;
        let (ns, entry) = directory.find(tenant, layout.key_prefix.as_deref())?;
        let mut plan = Plan {
            ns,
            all_mask: 0,
            trailing: [(0, 0); MAX_TRAILING_POOLS],
            trailing_len: 0,
        };
        // Each suffix is looked for from the slot after the last one found (see
        // `slot_of_from`).
        let mut next = 0;
        for pool in &layout.pools {
            let mut mask = 0u128;
            for suffix in &pool.suffixes {
                let slot = entry.slot_of_from(suffix, next)?;
                next = slot + 1;
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
}
