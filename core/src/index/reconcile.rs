//! Reconciling with the master's key list: sets of objects named exactly, and bringing the
//! index to the objects a key list holds without forgetting the ones it holds already.

use super::*;

/// Objects named exactly, as the index names them: `(namespace, page hash)` and a mask of the
/// namespace's suffixes.
#[derive(Debug, Default)]
pub(crate) struct ObjectSet {
    pages: HashTable<(u32, PageHash, u128)>,
}

impl ObjectSet {
    /// Returns the mask of the set's objects of page `hash` in namespace `ns` (`h`: its table
    /// hash).
    fn mask(&self, h: u64, ns: u32, hash: &PageHash) -> u128 {
        self.pages
            .find(h, |(n, p, _)| *n == ns && p == hash)
            .map_or(0, |(_, _, mask)| *mask)
    }

    fn insert(&mut self, seed: u64, ns: u32, hash: PageHash, bit: u128) {
        let h = page_table_hash(seed, ns, &hash);
        match self.pages.entry(
            h,
            |(n, p, _)| *n == ns && *p == hash,
            |(n, p, _)| page_table_hash(seed, *n, p),
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => e.get_mut().2 |= bit,
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((ns, hash, bit));
            }
        }
    }
}

/// What [`Index::reconcile`] changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// Objects the index held that the key list does not: removed.
    pub removed: usize,
    /// Objects the key list holds that the index did not: stored.
    pub restored: usize,
    /// The index holds objects of another tenant, which the key list does not cover.
    pub other_tenants: bool,
}

impl Index {
    /// Adds the object `key` of `tenant` to `set`, its namespace and suffix numbered as a store
    /// would number them; returns `false` (and adds nothing) when the key does not parse as an
    /// object key or a table is full (such an object is never tracked, so it needs no name).
    pub(crate) fn list_key(&mut self, tenant: &str, key: &str, set: &mut ObjectSet) -> bool {
        let Some(parsed) = parse_object_key(key) else {
            return false;
        };
        let Some((ns, slot)) = self.intern(tenant, parsed.prefix, parsed.suffix) else {
            return false;
        };
        set.insert(self.config.seed, ns, parsed.page_hash, 1u128 << slot);
        true
    }

    /// Adds the object `key` of `tenant` to `set` when the index numbers its namespace and
    /// suffix; otherwise neither the index nor a set [`Index::list_key`] made can hold it, and
    /// nothing is added.
    pub(crate) fn name_key(&self, tenant: &str, key: &str, set: &mut ObjectSet) {
        let Some(parsed) = parse_object_key(key) else {
            return;
        };
        let Some(ns) = self.find_namespace(tenant, parsed.prefix) else {
            return;
        };
        let suffixes = &self.namespaces[ns as usize].suffixes;
        if let Some(slot) = suffixes.iter().position(|s| s == parsed.suffix) {
            set.insert(self.config.seed, ns, parsed.page_hash, 1u128 << slot);
        }
    }

    /// Brings the objects of `tenant` to `listed`, leaving those in `kept` as they are (a newer
    /// event decided them): an object held and not listed is removed, one listed and not held
    /// is stored (in memory, as a key-list line is). Objects present all along stay present
    /// throughout: a query never misses them for this call.
    pub(crate) fn reconcile(
        &mut self,
        tenant: &str,
        listed: &ObjectSet,
        kept: &ObjectSet,
    ) -> Reconciled {
        let mut done = Reconciled::default();
        let seed = self.config.seed;
        // Held and not listed: removed, one object at a time, as a removal event would.
        for idx in 0..self.len {
            let page = self.shared.pages.get(idx);
            let present = page.present();
            if present == 0 {
                continue;
            }
            if self.namespaces[page.ns as usize].tenant != tenant {
                done.other_tenants = true;
                continue;
            }
            let h = page_table_hash(seed, page.ns, &page.hash);
            let mut gone =
                present & !listed.mask(h, page.ns, &page.hash) & !kept.mask(h, page.ns, &page.hash);
            while gone != 0 {
                let bit = gone & gone.wrapping_neg();
                gone &= gone - 1;
                self.clear_bit(idx, h, bit, true);
                done.removed += 1;
            }
        }
        // Listed and not held: stored.
        for &(ns, hash, mask) in listed.pages.iter() {
            let h = page_table_hash(seed, ns, &hash);
            let held = self
                .find(h, ns, &hash)
                .map_or(0, |idx| self.shared.pages.present(idx));
            let mut missing = mask & !held & !kept.mask(h, ns, &hash);
            while missing != 0 {
                let bit = missing & missing.wrapping_neg();
                missing &= missing - 1;
                self.unsuspect(h, ns, &hash, bit);
                self.set_bit(h, ns, hash, bit, None);
                done.restored += 1;
            }
        }
        done
    }
}
