//! Sampling for verification, and forgetting what it found stale.

use super::*;

/// What one call of [`Index::sample_keys`] covered.
///
/// A *sweep* is one pass of the verification cursor over the page slab, from the first slot of
/// its first page past its last page. Every object of the sampled tenant that is present when
/// a sweep begins and stays present until the cursor reaches it is sampled in that sweep;
/// objects stored after the cursor passed their slot are not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sampled {
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

impl Index {
    /// Collects up to `max` present object keys of `tenant` for verification, round-robin
    /// through the index so that repeated calls cover every page; returns the write stamp to pass
    /// back to [`Index::remove_stale`] and where the call began and ended (see [`Sampled`]).
    pub(crate) fn sample_keys(
        &mut self,
        tenant: &str,
        max: usize,
        out: &mut Vec<String>,
    ) -> Sampled {
        let len = self.len;
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
            let page = self.shared.pages.get(idx);
            let ns = &self.namespaces[page.ns as usize];
            if page.present() != 0 && ns.tenant == tenant {
                // Resume where the last round stopped within this page.
                let mut bits = page.present() & (!0u128).checked_shl(self.verify_slot).unwrap_or(0);
                while bits != 0 {
                    if out.len() >= max {
                        sampled.began_next = sampled.ended_sweep;
                        return sampled;
                    }
                    let slot = take_lowest(&mut bits);
                    out.push(ns.object_key(&page.hash, slot));
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
    pub(crate) fn remove_stale(&mut self, tenant: &str, key: &str, stamp: u64) -> bool {
        let Some(parsed) = parse_object_key(key) else {
            return false;
        };
        match self.locate(tenant, &parsed) {
            Some((idx, h, bit))
                if self.touched[idx] <= stamp && self.shared.pages.present(idx) & bit != 0 =>
            {
                self.clear_bit(idx, h, bit, false);
                true
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests;
