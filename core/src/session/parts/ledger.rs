//! The confirmation ledger: a time at or after which every object the index holds was present
//! at the master, and the latest time any input carried (what the session does with it:
//! `session/ledger.rs`).

use crate::time::Instant;

/// A time at or after which every object the index holds was present at the master, and the
/// latest time any input carried.
#[derive(Debug)]
pub(in crate::session) struct Ledger {
    /// Meaningless while the index is empty (trivially confirmed).
    confirmed_at: Instant,
    latest: Instant,
}

impl Ledger {
    pub(in crate::session) fn new() -> Ledger {
        Ledger {
            confirmed_at: Instant::ZERO,
            latest: Instant::ZERO,
        }
    }

    /// Notes the time an input carried.
    pub(in crate::session) fn see(&mut self, now: Instant) {
        self.latest = self.latest.max(now);
    }

    /// Returns the latest time any input carried.
    pub(in crate::session) fn latest(&self) -> Instant {
        self.latest
    }

    /// Returns the confirmation, if the index holds objects (`holds`).
    pub(in crate::session) fn confirmed_at(&self, holds: bool) -> Option<Instant> {
        holds.then_some(self.confirmed_at)
    }

    /// Objects the master held at `at` join the index (which was `empty`): its confirmation is
    /// no later than `at`, nor, when nothing older is left, than `pending` (the oldest evidence
    /// still waiting to join).
    pub(in crate::session) fn note(&mut self, at: Instant, empty: bool, pending: Instant) {
        self.confirmed_at = if empty {
            at.min(pending)
        } else {
            self.confirmed_at.min(at)
        };
    }

    /// Every object the index holds was present at the master at or after `at`; the
    /// confirmation moves there, but not past `pending` (the oldest evidence still waiting to
    /// join), so that it does not move back when that joins.
    pub(in crate::session) fn confirm(&mut self, at: Instant, pending: Instant) {
        self.confirmed_at = self.confirmed_at.max(at.min(pending));
    }
}
