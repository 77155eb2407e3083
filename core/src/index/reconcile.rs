//! Reconciling with the master's key list: sets of objects named exactly, and bringing the
//! index to the objects a key list holds without forgetting the ones it holds already.

use super::hashing::page_table_hash;
use super::object_set::{ObjectSet, Reconciled};
use super::*;

impl Index {
    /// Returns how many page slots the index has used (the range [`Index::reconcile_removals`]
    /// walks).
    pub(crate) fn slots(&self) -> usize {
        self.len
    }

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
        if let Some((ns, hash, bit)) = self.name(tenant, key) {
            set.insert(self.config.seed, ns, hash, bit);
        }
    }

    /// Names the object `key` of `tenant` as the index numbers it (namespace, page hash and
    /// suffix bit), when it numbers its namespace and suffix.
    fn name(&self, tenant: &str, key: &str) -> Option<(u32, PageHash, u128)> {
        let parsed = parse_object_key(key)?;
        let ns = self.find_namespace(tenant, parsed.prefix)?;
        let suffixes = &self.namespaces[ns as usize].suffixes;
        let slot = suffixes.iter().position(|s| s == parsed.suffix)?;
        Some((ns, parsed.page_hash, 1u128 << slot))
    }

    /// Reports whether `set` holds the object `key` of `tenant` (a set [`Index::list_key`]
    /// made names every object it holds so).
    pub(crate) fn is_named(&self, tenant: &str, key: &str, set: &ObjectSet) -> bool {
        self.name(tenant, key).is_some_and(|(ns, hash, bit)| {
            set.mask(page_table_hash(self.config.seed, ns, &hash), ns, &hash) & bit != 0
        })
    }

    /// Removes, from the page slots `from..from + max`, the objects of `tenant` held and neither
    /// in `listed` nor in `kept` (a newer event decided those); adds to `done`. Returns the next
    /// slot, `None` past the last: a caller brings a large index to a key list in slices,
    /// letting queries and events in between (each removal is one of its own, as an event's).
    pub(crate) fn reconcile_removals(
        &mut self,
        tenant: &str,
        listed: &ObjectSet,
        kept: &ObjectSet,
        (from, max): (usize, usize),
        done: &mut Reconciled,
    ) -> Option<usize> {
        let seed = self.config.seed;
        let end = from.saturating_add(max).min(self.len);
        for idx in from..end {
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
        (end < self.len).then_some(end)
    }

    /// Takes up to `max` pages out of `listed` (a set [`Index::list_key`] made) and stores
    /// their objects that the index does not hold and that are not in `kept` (in memory, as a
    /// key-list line is); returns whether `listed` has pages left. A caller brings a large key
    /// list in slices: the pages are taken out in place, never copied out all at once (a list
    /// of 1M pages copied out cost the writer one 53 ms step).
    pub(crate) fn reconcile_restores(
        &mut self,
        listed: &mut ObjectSet,
        max: usize,
        kept: &ObjectSet,
        done: &mut Reconciled,
    ) -> bool {
        let seed = self.config.seed;
        // The pages past the first `max` stay in the set (hashbrown's documented behaviour for
        // an `ExtractIf` dropped before its end). They are taken out first and restored after:
        // restoring while the extraction walks the set cost 1.6 ms a slice against 1.0 (1M
        // MLA pages, `testing/bench/benches/reconcile.rs`).
        let taken: Vec<_> = listed.pages.extract_if(|_| true).take(max).collect();
        for (ns, hash, mask) in taken {
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
        !listed.pages.is_empty()
    }
}
