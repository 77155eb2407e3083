//! Suspects: objects whose other medium the stream cannot prove, until verification answers.

use super::hashing::page_table_hash;
use super::*;

/// Pages of capacity per suspect page the side table may hold (and at least 16): a full table
/// costs under 3 bytes per page.
pub(super) const PAGES_PER_SUSPECT_PAGE: usize = 64;

impl Index {
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
                out.push(ns.object_key(&s.hash, take_lowest(&mut bits)));
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
    pub(crate) fn confirm_suspect(&mut self, tenant: &str, key: &str, stamp: u64) -> bool {
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
    pub(crate) fn drop_suspect(&mut self, tenant: &str, key: &str) -> bool {
        match self.find_suspect(tenant, key) {
            Some((h, ns, hash, bit)) => {
                self.unsuspect(h, ns, &hash, bit);
                true
            }
            None => false,
        }
    }

    /// Finds a suspect object by key: its table hash, namespace, page hash and suffix bit.
    pub(super) fn find_suspect(
        &self,
        tenant: &str,
        key: &str,
    ) -> Option<(u64, u32, PageHash, u128)> {
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
    pub(super) fn suspect(&mut self, h: u64, ns: u32, hash: PageHash, bit: u128, on_disk: bool) {
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
    pub(super) fn unsuspect(&mut self, h: u64, ns: u32, hash: &PageHash, bits: u128) {
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

    pub(super) fn max_suspect_pages(&self) -> usize {
        (self.config.max_pages / PAGES_PER_SUSPECT_PAGE).max(16)
    }
}
