//! The state of a reconcile: its key list's objects, the live events it keeps while the list is
//! read, and its progress through the slices that apply it (what the session does with it:
//! `session/reconcile.rs`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::frame::{EventKind, Seq};
use crate::index::{ObjectSet, Reconciled};
use crate::sequence::Point;

/// The most live object events a reconcile keeps while its key list is read; past it, it
/// forgets and resyncs instead.
const MAX_LIVE_EVENTS: usize = 1 << 20;

/// A reconcile under way (carried by
/// [`ResyncState::Fetching`](super::resync_state::ResyncState::Fetching)).
#[derive(Debug)]
pub(in crate::session) struct Reconcile {
    /// The sequence the stream stood at when the fetch was asked for: a status point before it
    /// is another run's.
    pub(in crate::session) at_ask: Option<Seq>,
    /// More live events came than it keeps ([`MAX_LIVE_EVENTS`]): what they decided cannot
    /// be told, so it falls back.
    pub(in crate::session) overflowed: bool,
    /// The fetch's status point, once its answer began.
    pub(in crate::session) point: Option<Point>,
    /// The objects the key list holds, numbered as the index numbers them (while it is
    /// applied, the pages not restored yet).
    pub(in crate::session) listed: ObjectSet,
    /// Every default-tenant object key a live batch touched since the fetch was asked, with
    /// the batch's sequence and whether the event stored it.
    pub(in crate::session) live: Vec<(String, Seq, bool)>,
    /// A live `cleared` of the default tenant came since the ask: the key list may describe
    /// the store before it, and a clear of every tenant renumbers the namespaces the list's
    /// objects are numbered by. The reconcile falls back, unless its list was applied already
    /// (the clear then came after it, and removed what it cleared).
    pub(in crate::session) cleared: bool,
    /// The key list was handed over whole (its doubted lines confirmed): it waits for the
    /// stream to reach the status point.
    pub(in crate::session) listed_all: bool,
    /// The objects live batches after the point touched (they decide them), once the list is
    /// whole and the stream reached the point: the list is applied, then the keys among them
    /// that were stored and that the list lacks are asked of the master.
    pub(in crate::session) kept: Option<ObjectSet>,
    /// The list is being applied, in slices.
    pub(in crate::session) applying: Option<Applying>,
    /// What applying the list changed, once every slice is applied: the stores are being
    /// asked about.
    pub(in crate::session) outcome: Option<Reconciled>,
}

/// A reconcile being applied, slice by slice.
#[derive(Debug)]
pub(in crate::session) struct Applying {
    /// The next page slot whose objects are compared with the list; `None` once all were.
    pub(in crate::session) next_slot: Option<usize>,
    pub(in crate::session) done: Reconciled,
}

impl Reconcile {
    /// Reports whether the key list still takes lines: not once it was handed over whole.
    pub(in crate::session) fn takes_lines(&self) -> bool {
        !self.listed_all
    }

    /// Reports whether the stores live batches make are asked of the master: once the list is
    /// whole and the stream reached the point, until the reconcile ends.
    pub(in crate::session) fn asks(&self) -> bool {
        self.kept.is_some()
    }

    /// Records a live default-tenant event of the batch `seq`.
    pub(super) fn saw(&mut self, seq: Seq, event: &crate::frame::Event<'_>) {
        match (event.kind, event.object_key) {
            (EventKind::Cleared, _) => self.cleared = true,
            // Once the list is applied, nothing decides by live events any more.
            _ if self.outcome.is_some() => {}
            (kind, Some(key)) if self.live.len() < MAX_LIVE_EVENTS => {
                self.live
                    .push((String::from(key), seq, kind == EventKind::Stored));
            }
            (_, Some(_)) => self.overflowed = true,
            _ => {}
        }
    }
}
