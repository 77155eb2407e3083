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
//! A hit is judged against the master at the time of the query, not against what the session
//! applied: "the state as of the last batch applied" excused a session that rolled back to an
//! older batch (a late copy taken as a new baseline brings back stores that later events undid,
//! and the rule compared with that very batch).
//!
//! Let `P(X, p)` say that object `X` is present at history position `p` in the event history `E`
//! **or** in the true state `T` (a snapshot reads `T`). The one excuse of the stream itself is
//! its delay: let `h` be the position of the oldest event still **pending** for the session at
//! the time of the query (see [`crate::flight`]): unpublished in the master's queue, in flight
//! (in the network, or queued at the subscriber while the driver is stalled), lost and not yet
//! revealed by a later message, or handed or revealed less than the reorder window's
//! `max_delay` ago (plus the driver's timer lag, [`crate::options::DriverOptions::timer_lag`]:
//! the window's timer is handed over that much late). With nothing pending, `h` is one past
//! the latest position.
//!
//! A required object `X` of a reported hit is **justified** iff `P(X, p)` holds for some `p` in
//! `[h - 1, now]`: the master held it (or said so) at some moment the session could still be
//! reflecting, the state just before the oldest event it cannot know, or any later one.
//! A hit with an unjustified object is a **false hit**. A justified object with `P(X, now)`
//! false is an **excused** claim: the world counts them and the longest excuse (the age of
//! the oldest pending event at the time), so a bound is visible.
//!
//! **Why a correct session never breaks it.** Everything a correct session holds comes from
//! events it was handed or from a snapshot of `T` (read after the fetch was asked for; the
//! batches since were applied as they came and decide the keys they touched). A claim of `X`
//! rests on the last event about `X` it applied, or the snapshot: that was true at some
//! position; every later change of `X` it was not told of is pending, so that position is at or
//! after `h - 1`, or a later one is. Once the session is handed a message after a loss, the loss
//! is no longer pending: a correct session sees the gap (in the sequence or the event ids) and
//! forgets, so the rule no longer excuses it.
//!
//! **The one class no stream signal can reveal** (issue 26, item 5). A restart behind a proxy
//! whose first message handed continues exactly what the session knew of the old run (the next
//! sequence and the next event id after that run's newest message handed, and, when the
//! session took a snapshot of that run whose status point lies beyond it, consistent with that
//! point as a snapshot's proof reads it: see [`crate::flight::Flight::handed`]) is
//! indistinguishable from a continuation. The world marks such restarts, with everything the
//! session missed around them (the old run's lost last events, the new run's lost first
//! messages: no signal reveals those either), from the last thing it knew of the old run up to
//! that message ([`Oracle::mark_invisible`], undone by [`Oracle::unmark_invisible`] when a
//! later message of the new run contradicts the status point): for `E` the removals there
//! remove nothing, so what they took away counts as silently removed, stale, and is bounded by
//! verification like any silent removal (the staleness check at the end asserts that bound).
//!
//! **Silent removals** are not a class of the stream: the master changes without any event
//! (spec sections 4 and 10), so `E` keeps such an object and a claim of it is stale, not false;
//! verification bounds it (the staleness check), and the figure is counted apart.
//!
//! **What no longer excuses a claim** (issue 26; each excuse below was given before and is not
//! any more, so the sweep finds what it hid):
//! - *A restart "continued" by any later message of its new run.* Only the first message the
//!   session is handed of a run can hide the restart before it: once the new run's stream has
//!   shown itself (a sequence going back), a later batch of it that happens to number on from
//!   the old run's last one (twin runs: the same batch sizes) hides nothing. Before, any such
//!   message marked the restart invisible, excusing a session that took a reconnect's first
//!   batch, numbered below the last one seen, for a new stream (restart-heavy seed 28).
//! - *Grace for a batch whose place was passed.* With a reorder window, a message first handed
//!   after a later position's grace ran out (the session had to move on) gets no grace of its
//!   own: it must never be applied. Before, its late arrival excused a rollback to before it
//!   for a whole `max_delay`.
//! - *A loss nothing reveals, once the master is idle.* A loss at the tail of a burst (or a
//!   restart of a master that then stays idle) is revealed by no later message; it stayed
//!   pending, and excused every claim since, forever. Once the master has been idle and
//!   reachable for [`crate::world::IDLE_BOUND`] and tells its counters (`/kv_events/status`)
//!   to a session that resyncs (it reads them before each key list), the session can learn the
//!   run's position, and such a loss no longer excuses a claim. Without status counters, or
//!   without the master's HTTP side, nothing can reveal it: it still excuses (counted as
//!   `unrevealed_at_idle`), and the liveness checks do not demand what it may have stored.
//! - *Snapshot lines next to other keys.* The liveness check no longer skips the objects whose
//!   key-list line sat next to a line that is no HiCache key (a careful session confirms such a
//!   line with `/batch_query_keys` instead of dropping it, issue 26 item 4): every page the
//!   master holds must come back.
//!
//! **Why it catches a session that misses gaps.** A session that applies a batch after a gap
//! without forgetting keeps `X` after the lost `removed` of `X`; the batch it was handed revealed
//! the loss, so `h` is past the removal and `P(X, ·)` is false from there on. The planted-bug
//! tests show it for each class.
//!
//! **Segments** (issue 27, [`crate::options::WorldKind::Segments`]): a client that goes away
//! takes its segment's objects out of the master's listing without an event. An object hidden
//! at a client's active TTL ([`Change::Hidden`]) or gone with a segment that closed
//! ([`Change::Unmounted`]) is absent in `T` and, like any silent removal, stays in `E`: a claim
//! of it is stale, not false. A hidden object listed again when its stalled client resumes
//! ([`Change::Restored`]) is present in `T` again without any event: the one change by which
//! `T` becomes true without `E`. The master's `/metrics` moves with each of them, so a session
//! that watches them is held to a bound ([`Oracle::unlisted_since`] says since when an object
//! is unlisted, the world checks the bound), and must know the restored objects again once it
//! has reconciled ([`Oracle::restored_since_store`] says which ones only a reconcile brings
//! back).
//!
//! **Staleness** is the separate figure for justified hits whose objects are absent in `T` now:
//! presence learned from events that a silent removal (or a hidden restart) made stale.
//! Verification bounds it.

use crate::master::{Change, ObjId, Record};
use crate::models::TENANTS;
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
    last_medium_removal: Vec<u64>,
    /// Per object, the position of its last hide or unmount (0: none).
    last_unlisted: Vec<u64>,
    /// Per object, the position of its last silent removal of another kind (0: none).
    last_silent: Vec<u64>,
    /// Per object, the position of its last restoration after a stall (0: none).
    last_restore: Vec<u64>,
    tenant: Vec<u8>,
    e_present: Vec<IdSet>,
    t_present: Vec<IdSet>,
    position: u64,
    /// Spans of positions whose removals the stream can never reveal (see
    /// [`Oracle::mark_invisible`]).
    invisible: Vec<(u64, u64)>,
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
            last_medium_removal: Vec::new(),
            last_unlisted: Vec::new(),
            last_silent: Vec::new(),
            last_restore: Vec::new(),
            tenant: Vec::new(),
            e_present: (0..TENANTS.len()).map(|_| IdSet::new()).collect(),
            t_present: (0..TENANTS.len()).map(|_| IdSet::new()).collect(),
            position: 0,
            invisible: Vec::new(),
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
            self.last_medium_removal.resize(need, 0);
            self.last_unlisted.resize(need, 0);
            self.last_silent.resize(need, 0);
            self.last_restore.resize(need, 0);
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
                self.last_silent[obj as usize] = pos;
            }
            Change::Hidden { obj } | Change::Unmounted { obj } => {
                self.grow(obj);
                self.set_t(obj, pos, false);
                self.last_unlisted[obj as usize] = pos;
            }
            Change::Restored { obj } => {
                self.grow(obj);
                self.set_t(obj, pos, true);
                self.last_restore[obj as usize] = pos;
            }
            Change::MediumRemoved { obj } => {
                self.grow(obj);
                self.last_medium_removal[obj as usize] = pos;
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

    /// Returns the position at which the master stopped listing `obj` when its client went
    /// away (hidden or unmounted, see the module docs), while it is still unlisted since
    /// then; `None` when it is listed, or absent for another reason.
    pub fn unlisted_since(&self, obj: ObjId) -> Option<u64> {
        let end = self.t_present_until(obj)?;
        let unlisted = self.last_unlisted.get(obj as usize).copied()?;
        (unlisted == end).then_some(end)
    }

    /// Reports whether `obj` is absent in the true state since a change that moved the master's
    /// signals (a silent removal, a hide, an unmount), not since an event or a restart.
    pub fn absent_by_signal(&self, obj: ObjId) -> bool {
        let Some(end) = self.t_present_until(obj) else {
            return false;
        };
        let i = obj as usize;
        self.last_silent.get(i) == Some(&end) || self.last_unlisted.get(i) == Some(&end)
    }

    /// Reports whether `obj` is present in the true state by a restoration after a stall,
    /// with no `stored` since: only a key list read after the restoration tells a session.
    pub fn restored_since_store(&self, obj: ObjId) -> bool {
        let restore = self.last_restore.get(obj as usize).copied().unwrap_or(0);
        restore > self.last_store(obj)
    }

    /// Reports whether `obj` was present in the event history at position `pos`.
    pub fn e_at(&self, obj: ObjId, pos: u64) -> bool {
        self.e.at(obj, pos).is_some_and(|e| e.present)
    }

    /// Reports whether `obj` was present in the true state at position `pos`.
    pub fn t_at(&self, obj: ObjId, pos: u64) -> bool {
        self.t.at(obj, pos).is_some_and(|e| e.present)
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

    /// Reports whether a per-medium `removed` of `obj` came after its last `stored`: a session
    /// may read it as absent everywhere (always safe), so liveness cannot demand it.
    pub fn medium_doubt(&self, obj: ObjId) -> bool {
        let removal = self
            .last_medium_removal
            .get(obj as usize)
            .copied()
            .unwrap_or(0);
        removal > self.last_store(obj)
    }

    /// Marks what happened strictly between positions `after` and `before` as invisible to the
    /// stream (a restart no signal reveals, with what was lost around it; see the module docs):
    /// for the event history, the removals there remove nothing.
    pub fn mark_invisible(&mut self, after: u64, before: u64) {
        self.invisible.push((after, before));
    }

    /// Undoes [`Oracle::mark_invisible`] of the same span: a later message revealed it.
    pub fn unmark_invisible(&mut self, after: u64, before: u64) {
        if let Some(i) = self.invisible.iter().position(|&s| s == (after, before)) {
            self.invisible.swap_remove(i);
        }
    }

    /// Reports whether `obj` is present now in the event history (invisible restarts apart) or
    /// in the true state.
    pub fn p_now(&self, obj: ObjId) -> bool {
        self.present_since(obj, self.position)
    }

    /// Applies the safety rule of the module docs to one required object: whether `P(obj, p)`
    /// holds for some position `p >= from`.
    pub fn present_since(&self, obj: ObjId, from: u64) -> bool {
        let scan = |h: &History, skip: &dyn Fn(&Entry) -> bool| {
            for e in h.entries(obj) {
                if skip(e) {
                    continue;
                }
                if e.pos > from {
                    if e.present {
                        return true;
                    }
                    continue;
                }
                return e.present;
            }
            false
        };
        let invisible = |e: &Entry| {
            !e.present
                && self
                    .invisible
                    .iter()
                    .any(|&(after, before)| after < e.pos && e.pos < before)
        };
        scan(&self.e, &invisible) || scan(&self.t, &|_| false)
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
    fn a_removal_still_pending_excuses_the_claim_and_a_known_one_does_not() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::Removed { obj: 0 }));
        // The removal at 2 is pending: the state at 1 may still be reflected.
        assert!(o.present_since(0, 1));
        assert!(!o.present_since(0, 2));
        assert!(!o.p_now(0));
    }

    #[test]
    fn silent_removal_keeps_the_event_history_present() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::SilentlyRemoved { obj: 0 }));
        assert!(o.e_now(0) && !o.t_now(0));
        assert!(o.p_now(0));
    }

    #[test]
    fn a_rollback_to_an_older_batch_is_not_excused() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::Removed { obj: 0 }));
        o.apply(&rec(3, Change::Stored { obj: 1, tenant: 0 }));
        // Nothing pending: a session that took the batch of position 1 back is wrong now.
        assert!(!o.present_since(0, 3));
        // A later presence counts: stored again at 4, removed at 5, pending from 5.
        o.apply(&rec(4, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(5, Change::Removed { obj: 0 }));
        assert!(o.present_since(0, 4));
        assert!(o.present_since(0, 3));
    }

    #[test]
    fn a_per_medium_removal_leaves_the_object_present() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::MediumRemoved { obj: 0 }));
        o.apply(&rec(3, Change::SilentlyRemoved { obj: 0 }));
        assert!(
            o.e_now(0) && !o.t_now(0),
            "stale once silently removed, not a false hit"
        );
    }

    #[test]
    fn an_invisible_restart_removes_nothing_from_the_event_history() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 1 }));
        o.apply(&rec(2, Change::Restart));
        assert!(!o.p_now(0));
        o.mark_invisible(1, 3);
        assert!(o.p_now(0) && !o.t_now(0), "stale, not a false hit");
        o.unmark_invisible(1, 3);
        assert!(!o.p_now(0));
    }

    #[test]
    fn a_removal_lost_behind_an_invisible_restart_is_stale_not_false() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        // Its removal died in the queue of the master that restarted at 3.
        o.apply(&rec(2, Change::Removed { obj: 0 }));
        o.apply(&rec(3, Change::Restart));
        o.apply(&rec(4, Change::Stored { obj: 1, tenant: 0 }));
        assert!(!o.present_since(0, 4));
        // The new run's message at 4 continued the old run's last one (at 1) exactly.
        o.mark_invisible(1, 4);
        assert!(
            o.present_since(0, 4) && !o.t_now(0),
            "stale, not a false hit"
        );
        // A removal before the span is as known as ever.
        let mut o2 = Oracle::new();
        o2.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o2.apply(&rec(2, Change::Removed { obj: 0 }));
        o2.apply(&rec(3, Change::Restart));
        o2.mark_invisible(2, 4);
        assert!(!o2.present_since(0, 4));
    }

    #[test]
    fn a_hidden_object_is_stale_and_comes_back_without_an_event() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 0 }));
        o.apply(&rec(2, Change::Hidden { obj: 0 }));
        assert!(o.e_now(0) && !o.t_now(0) && o.p_now(0), "stale, not false");
        assert_eq!(o.unlisted_since(0), Some(2));
        o.apply(&rec(3, Change::Restored { obj: 0 }));
        assert!(o.t_now(0) && o.e_now(0) && o.restored_since_store(0));
        assert_eq!(o.unlisted_since(0), None);
        o.apply(&rec(4, Change::Unmounted { obj: 0 }));
        assert_eq!(o.unlisted_since(0), Some(4));
        o.apply(&rec(5, Change::Stored { obj: 0, tenant: 0 }));
        assert!(!o.restored_since_store(0) && o.unlisted_since(0).is_none());
        // A silent removal of another kind is not a client going away.
        o.apply(&rec(6, Change::SilentlyRemoved { obj: 0 }));
        assert_eq!(o.unlisted_since(0), None);
    }

    #[test]
    fn restart_removes_everything_at_its_position() {
        let mut o = Oracle::new();
        o.apply(&rec(1, Change::Stored { obj: 0, tenant: 1 }));
        o.apply(&rec(2, Change::Restart));
        assert!(o.e_at(0, 1) && !o.e_at(0, 2) && !o.t_now(0));
    }
}
