//! Objects named exactly, as a key list names them ([`ObjectSet`]), and what a reconcile with
//! them changed ([`Reconciled`]).

use hashbrown::HashTable;

use crate::hash::PageHash;

use super::hashing::page_table_hash;

/// Objects named exactly, as the index names them: `(namespace, page hash)` and a mask of the
/// namespace's suffixes.
#[derive(Debug, Default)]
pub(crate) struct ObjectSet {
    pub(super) pages: HashTable<(u32, PageHash, u128)>,
}

impl ObjectSet {
    /// Makes an empty set with room for `pages` pages (a key list of about the index's size
    /// then grows without rehashing under the writer).
    pub(crate) fn with_capacity(pages: usize) -> ObjectSet {
        ObjectSet {
            pages: HashTable::with_capacity(pages),
        }
    }

    /// Returns the mask of the set's objects of page `hash` in namespace `ns` (`h`: its table
    /// hash).
    pub(super) fn mask(&self, h: u64, ns: u32, hash: &PageHash) -> u128 {
        self.pages
            .find(h, |(n, p, _)| *n == ns && p == hash)
            .map_or(0, |(_, _, mask)| *mask)
    }

    pub(super) fn insert(&mut self, seed: u64, ns: u32, hash: PageHash, bit: u128) {
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

/// What a reconcile changed (`Index::reconcile_removals`, `Index::reconcile_restores`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reconciled {
    /// Objects the index held that the key list does not: removed.
    pub removed: usize,
    /// Objects the key list holds that the index did not: stored.
    pub restored: usize,
    /// The index holds objects of another tenant, which the key list does not cover.
    pub other_tenants: bool,
}
