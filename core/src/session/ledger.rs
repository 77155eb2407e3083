//! The confirmation ledger: how long the index's content has gone without confirmation from the
//! master ([`Counters::unconfirmed_ms`]), and the latest time any input carried.

use super::*;

/// A time at or after which every object the index holds was present at the master, and the
/// latest time any input carried.
#[derive(Debug)]
pub(super) struct Ledger {
    /// Meaningless while the index is empty (trivially confirmed).
    confirmed_at: Instant,
    latest: Instant,
}

impl Ledger {
    pub(super) fn new() -> Ledger {
        Ledger {
            confirmed_at: Instant::ZERO,
            latest: Instant::ZERO,
        }
    }

    /// Notes the time an input carried.
    pub(super) fn see(&mut self, now: Instant) {
        self.latest = self.latest.max(now);
    }

    /// Returns the latest time any input carried.
    pub(super) fn latest(&self) -> Instant {
        self.latest
    }

    /// Returns the confirmation, if the index holds objects (`holds`).
    pub(super) fn confirmed_at(&self, holds: bool) -> Option<Instant> {
        holds.then_some(self.confirmed_at)
    }

    /// Objects the master held at `at` join the index (which was `empty`): its confirmation is
    /// no later than `at`, nor, when nothing older is left, than `pending` (the oldest evidence
    /// still waiting to join).
    pub(super) fn note(&mut self, at: Instant, empty: bool, pending: Instant) {
        self.confirmed_at = if empty {
            at.min(pending)
        } else {
            self.confirmed_at.min(at)
        };
    }

    /// Every object the index holds was present at the master at or after `at`; the
    /// confirmation moves there, but not past `pending` (the oldest evidence still waiting to
    /// join), so that it does not move back when that joins.
    pub(super) fn confirm(&mut self, at: Instant, pending: Instant) {
        self.confirmed_at = self.confirmed_at.max(at.min(pending));
    }
}

impl Session {
    /// Notes the time an input carried.
    pub(super) fn see(&mut self, now: Instant) {
        self.ledger.see(now);
    }

    /// Records that objects the master held at `at` join the index: the index's confirmation,
    /// and every confirmation pending (resync, sweep, round), is no later than `at`.
    pub(super) fn note_evidence(&mut self, at: Instant) {
        let pending = self.pending_evidence(at);
        self.ledger
            .note(at, self.index.object_count() == 0, pending);
        if let Some(sweep) = &mut self.verify.sweep {
            sweep.began = sweep.began.min(at);
        }
        if let Some(round) = &mut self.verify.in_flight {
            round.sampled_at = round.sampled_at.min(at);
        }
        if let ResyncState::Fetching { confirms, .. } = &mut self.resync.state {
            *confirms = (*confirms).min(at);
        }
    }

    /// Moves the index's confirmation forward to `at` (see [`Ledger::confirm`]).
    pub(super) fn confirm(&mut self, at: Instant) {
        let pending = self.pending_evidence(at);
        self.ledger.confirm(at, pending);
    }

    /// Returns `at`, or the oldest evidence still waiting to join the index if that is earlier
    /// (a held batch's arrival, the snapshot being fetched).
    fn pending_evidence(&self, at: Instant) -> Instant {
        let held = self.stream.held_since().unwrap_or(at);
        let snapshot = match &self.resync.state {
            ResyncState::Fetching { asked_at, .. } => *asked_at,
            _ => at,
        };
        at.min(held).min(snapshot)
    }
}
