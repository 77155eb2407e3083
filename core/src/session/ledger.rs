//! Noting and moving the index's confirmation: how long its content has gone without
//! confirmation from the master ([`Counters::unconfirmed_ms`]) (the ledger itself:
//! `parts/ledger.rs`).

use super::*;

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
