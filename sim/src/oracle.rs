//! The reference oracle: two plain exact-key histories, and the rule that says which hits are
//! justified.
//!
//! # Two histories
//! Every state change of the master arrives as a [`Record`] with a *history position* `p` (a
//! counter that never restarts, not even with the master).
//! - The **event history** `E` is what the master's events say, applied in creation order:
//!   `stored` makes an object present, `removed` (with or without a key) and `cleared` make it
//!   absent, and a restart makes everything absent. Events the master's queue later dropped are
//!   in `E`: they were real changes, only their messages were lost.
//! - The **true state** `T` is what the master holds: `E`, plus removals that emit nothing
//!   (silent removals), minus per-medium removals that leave a replica behind.
//!
//! For every object the oracle keeps the positions where `E` and `T` changed, so it answers
//! "present at position `p`?" for any `p`.
//!
//! # What a correct session may claim: the safety rule
//! Let `L` be the batch the session applied last ([`hicache_index::Session::last_applied_seq`],
//! resolved to the most recent message with that sequence that was fed to it), and `a` the
//! history position of `L`'s last event (`a = 0` when nothing is applied). Let `s_1..s_k` be the
//! history positions at which the master answered the snapshots the session applied
//! ([`hicache_index::Effect::Resynced`]) since its last full clear ([`hicache_index::Effect::Cleared`]
//! for any reason but a publisher's tenant clear).
//!
//! A required object `X` of a reported hit is **justified** iff
//! - **(A)** `X` is present in `E` at position `a`, or
//! - **(B)** `X` belongs to the default tenant and for some snapshot `s_i`, `X` is present in `T`
//!   at `s_i` and `E` has no removal of `X` in `(s_i, a]`.
//!
//! A hit with an unjustified object is a **false hit**.
//!
//! **Why a correct session never breaks it.** Since its last clear, a correct session applied
//! every batch from its baseline to `L` with no sequence gap (a gap forces a clear), so it saw
//! every event created between them: if its stream knowledge says `X` is present, the last event
//! about `X` up to `a` is a store, which is (A). The only other source of presence is a snapshot,
//! taken from `T` at `s_i` (it never adds anything not in `T`). A correct session applies a
//! snapshot only when its stream covers every batch the master assigned after it (the anchor:
//! the stream begins at or before the snapshot's watermark + 1, or began before the fetch was
//! asked for), so every event created after `s_i` is applied after the snapshot's keys (live, or
//! replayed from the resync buffer); a removal of `X` in `(s_i, a]` therefore removed it again,
//! unless a later store brought it back, which is (A). A snapshot that cannot be anchored, or a
//! stream that turns out to begin too late, must lead to a clear. Removals after `a` are not yet applied:
//! the index may lag the stream, and a tail removal lost with a gap stays undetectable until the
//! next batch reveals the gap; the rule allows for both by comparing at `a`, not now. A restart
//! is a removal of everything at its position, so knowledge of the old master stays justified
//! only until the session applies a batch of the new one.
//!
//! **Why it catches a session that misses gaps.** A session that applies batch `L` after a gap
//! without clearing keeps `X` after the lost `removed` of `X` (position in `(…, a]`): `X` is absent
//! in `E` at `a`, and a snapshot does not help either (it predates the removal, or does not
//! contain `X`). The planted-bug test shows it.
//!
//! **Staleness** is the separate figure for justified hits whose objects are absent in `T` now:
//! presence learned from events that a silent removal made stale. Verification bounds it.

use crate::master::{Change, ObjId, Record, TENANTS};
use crate::util::IdSet;

/// One entry of a history log: a position, the presence from then on, and the object's previous
/// entry (a per-object chain through one flat log, newest first).
#[derive(Copy, Clone, Debug)]
struct Entry {
    pos: u64,
    present: bool,
    prev: u32,
}

const NONE: u32 = u32::MAX;

/// A history of many objects in one append-only log; each object's entries are chained from
/// its newest one.
#[derive(Debug, Default)]
struct History {
    log: Vec<Entry>,
    head: Vec<u32>,
}

impl History {
    fn grow(&mut self, need: usize) {
        if self.head.len() < need {
            self.head.resize(need, NONE);
        }
    }

    fn push(&mut self, obj: ObjId, pos: u64, present: bool) {
        let prev = self.head[obj as usize];
        self.head[obj as usize] = self.log.len() as u32;
        self.log.push(Entry { pos, present, prev });
    }

    fn newest(&self, obj: ObjId) -> Option<&Entry> {
        let i = *self.head.get(obj as usize)?;
        self.log.get(i as usize)
    }

    /// The entries of `obj`, newest first.
    fn entries(&self, obj: ObjId) -> impl Iterator<Item = &Entry> + '_ {
        let mut i = self.head.get(obj as usize).copied().unwrap_or(NONE);
        core::iter::from_fn(move || {
            let e = self.log.get(i as usize)?;
            i = e.prev;
            Some(e)
        })
    }

    /// The newest entry of `obj` at or before `pos`.
    fn at(&self, obj: ObjId, pos: u64) -> Option<&Entry> {
        self.entries(obj).find(|e| e.pos <= pos)
    }

    fn describe(&self, obj: ObjId) -> Vec<(u64, bool)> {
        let mut v: Vec<(u64, bool)> = self
            .entries(obj)
            .take(8)
            .map(|e| (e.pos, e.present))
            .collect();
        v.reverse();
        v
    }
}

/// The event history and the true state, per object (see the module docs).
#[derive(Debug)]
pub struct Oracle {
    e: History,
    t: History,
    last_store: Vec<u64>,
    tenant: Vec<u8>,
    e_present: Vec<IdSet>,
    t_present: Vec<IdSet>,
    position: u64,
}

impl Default for Oracle {
    fn default() -> Self {
        Oracle::new()
    }
}

impl Oracle {
    /// Makes an oracle that has seen nothing.
    pub fn new() -> Oracle {
        Oracle {
            e: History::default(),
            t: History::default(),
            last_store: Vec::new(),
            tenant: Vec::new(),
            e_present: (0..TENANTS.len()).map(|_| IdSet::new()).collect(),
            t_present: (0..TENANTS.len()).map(|_| IdSet::new()).collect(),
            position: 0,
        }
    }

    /// Returns the position of the latest record.
    pub fn position(&self) -> u64 {
        self.position
    }

    fn grow(&mut self, obj: ObjId) {
        let need = obj as usize + 1;
        if self.last_store.len() < need {
            self.e.grow(need);
            self.t.grow(need);
            self.last_store.resize(need, 0);
            self.tenant.resize(need, 0);
        }
    }

    /// Logs an event-history change; every `stored` is logged, even a repeated one, so that
    /// "stored since position `p`" can be answered.
    fn set_e(&mut self, obj: ObjId, pos: u64, present: bool) {
        if present || self.e_now(obj) {
            self.e.push(obj, pos, present);
        }
        let set = &mut self.e_present[self.tenant[obj as usize] as usize];
        if present {
            set.insert(obj);
        } else {
            set.remove(obj);
        }
    }

    fn set_t(&mut self, obj: ObjId, pos: u64, present: bool) {
        if self.t_now(obj) != present {
            self.t.push(obj, pos, present);
        }
        let set = &mut self.t_present[self.tenant[obj as usize] as usize];
        if present {
            set.insert(obj);
        } else {
            set.remove(obj);
        }
    }

    /// Learns one change; records MUST come in position order.
    pub fn apply(&mut self, record: &Record) {
        debug_assert!(record.pos > self.position, "records come in order");
        self.position = record.pos;
        let pos = record.pos;
        match record.change {
            Change::Stored { obj, tenant } => {
                self.grow(obj);
                self.tenant[obj as usize] = tenant;
                self.last_store[obj as usize] = pos;
                self.set_e(obj, pos, true);
                self.set_t(obj, pos, true);
            }
            Change::Removed { obj } => {
                self.grow(obj);
                self.set_e(obj, pos, false);
                self.set_t(obj, pos, false);
            }
            Change::SilentlyRemoved { obj } => {
                self.grow(obj);
                self.set_t(obj, pos, false);
            }
            Change::StillPresent { obj } => {
                self.grow(obj);
                self.set_t(obj, pos, true);
            }
            Change::Cleared { tenant } => self.clear_tenant(tenant as usize, pos),
            Change::Restart => {
                for tenant in 0..TENANTS.len() {
                    self.clear_tenant(tenant, pos);
                }
            }
        }
    }

    fn clear_tenant(&mut self, tenant: usize, pos: u64) {
        for obj in self.e_present[tenant].as_slice().to_vec() {
            self.set_e(obj, pos, false);
        }
        for obj in self.t_present[tenant].as_slice().to_vec() {
            self.set_t(obj, pos, false);
        }
    }

    /// Reports whether `obj` is present in the event history now.
    pub fn e_now(&self, obj: ObjId) -> bool {
        self.e.newest(obj).is_some_and(|e| e.present)
    }

    /// Reports whether `obj` is present in the true state now.
    pub fn t_now(&self, obj: ObjId) -> bool {
        self.t.newest(obj).is_some_and(|e| e.present)
    }

    /// Returns the position whose change ended `obj`'s last presence in the true state, or
    /// `None` while it is present (or was never present).
    pub fn t_present_until(&self, obj: ObjId) -> Option<u64> {
        self.t.newest(obj).filter(|e| !e.present).map(|e| e.pos)
    }

    /// Reports whether `obj` was present in the event history at position `pos`.
    pub fn e_at(&self, obj: ObjId, pos: u64) -> bool {
        self.e.at(obj, pos).is_some_and(|e| e.present)
    }

    /// Reports whether `obj` was present in the true state at position `pos`.
    pub fn t_at(&self, obj: ObjId, pos: u64) -> bool {
        self.t.at(obj, pos).is_some_and(|e| e.present)
    }

    /// Reports whether the event history removed `obj` at some position in `(after, upto]`.
    pub fn e_removed_in(&self, obj: ObjId, after: u64, upto: u64) -> bool {
        if upto <= after {
            return false;
        }
        self.e
            .entries(obj)
            .skip_while(|e| e.pos > upto)
            .take_while(|e| e.pos > after)
            .any(|e| !e.present)
    }

    /// Reports whether `obj` is present in the event history at `pos` by a `stored` event created
    /// after position `since`: what a session that missed everything up to `since` and applied
    /// everything up to `pos` holds.
    pub fn e_stored_between(&self, obj: ObjId, since: u64, pos: u64) -> bool {
        self.e
            .at(obj, pos)
            .is_some_and(|e| e.present && e.pos > since)
    }

    /// Returns the position of the latest `stored` event of `obj` (0: never stored).
    pub fn last_store(&self, obj: ObjId) -> u64 {
        self.last_store.get(obj as usize).copied().unwrap_or(0)
    }

    /// Applies the safety rule of the module docs to one required object.
    ///
    /// `applied` is the position of the last event the session applied (0: none); `snapshots`
    /// the positions of the snapshots it applied since its last full clear; `default_tenant` says
    /// whether the object belongs to the tenant snapshots cover.
    pub fn justified(
        &self,
        obj: ObjId,
        applied: u64,
        snapshots: &[u64],
        default_tenant: bool,
    ) -> bool {
        if self.e_at(obj, applied) {
            return true;
        }
        default_tenant
            && snapshots
                .iter()
                .any(|&s| self.t_at(obj, s) && !self.e_removed_in(obj, s, applied))
    }

    /// Describes an object's histories (their last changes), for failure reports.
    pub fn describe(&self, obj: ObjId) -> String {
        format!(
            "E changes {:?}, T changes {:?}",
            self.e.describe(obj),
            self.t.describe(obj)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pos: u64, change: Change) -> Record {
        Record { pos, change }
    }

    #[test]
    fn removal_after_the_applied_point_is_lag_not_a_false_hit() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::Removed { obj: 0 }));
        assert!(o.justified(0, 1, &[], true));
        assert!(!o.justified(0, 2, &[], true));
    }

    #[test]
    fn silent_removal_keeps_the_event_history_present() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::SilentlyRemoved { obj: 0 }));
        assert!(o.e_now(0) && !o.t_now(0));
        assert!(o.justified(0, 2, &[], true));
    }

    #[test]
    fn snapshot_justifies_until_an_applied_removal() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::Removed { obj: 0 }));
        o.apply(&rec(3, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(4, Change::Removed { obj: 0 }));
        // A snapshot at 3 has the object; the session applied only up to 2.
        assert!(o.justified(0, 2, &[3], true));
        assert!(
            !o.justified(0, 2, &[3], false),
            "snapshots cover the default tenant"
        );
        // Once it applies the removal at 4, the snapshot no longer justifies it.
        assert!(!o.justified(0, 4, &[3], true));
    }

    #[test]
    fn restart_removes_everything_at_its_position() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 1 }));
        o.apply(&rec(2, Change::Restart));
        assert!(o.e_at(0, 1) && !o.e_at(0, 2) && !o.t_now(0));
    }
}
