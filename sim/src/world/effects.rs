//! Executing what the session and the master produce: the master's records and messages, the
//! session's effects (connect, fetch, verify, clears), and the bookkeeping and bounds after
//! every call.

use std::fmt::Write as _;

use hicache_index::{
    ClearReason, Command, Effect, Effects, Health, Report as CoreReport, ResyncFailure,
};

use crate::master::MasterOutput;
use crate::system::System;

use super::http_item::Handed;
use super::report::FailureKind;
use super::state::World;

impl<S: System> World<S> {
    pub(super) fn absorb_master(&mut self, out: &mut MasterOutput) {
        for record in out.records.drain(..) {
            self.oracle.apply(&record);
            self.record_times.push((record.pos, self.now));
        }
        for pos in out.dropped.drain(..).chain(out.failed.drain(..)) {
            self.driver.flight.lost_at_master(pos);
        }
        for pos in out.restarts.drain(..) {
            self.driver.flight.restarted(pos);
        }
        self.p_loss = self.p_loss.max(out.lost_upto);
        out.lost_upto = 0;
        if let Some(up) = out.restarted_until.take() {
            if self.trace {
                eprintln!(
                    "{:>14} master restarts at position {}, up at {}",
                    self.now.as_nanos(),
                    self.master.position(),
                    up.as_nanos()
                );
            }
            let seen = self.opts.network.seen_restarts;
            let seen = seen > 0.0 && self.world_rng.chance(seen);
            self.net.master_restarted(self.now, up, seen);
        }
        if self.tail_lose > 0 && !out.published.is_empty() && self.master.queued() == 0 {
            // The last messages of the final burst are lost after publishing.
            let keep = out.published.len().saturating_sub(self.tail_lose as usize);
            for published in out.published.drain(keep..) {
                self.net.lose_published(&published);
            }
            self.tail_lose = 0;
        }
        for published in out.published.drain(..) {
            self.net.send(self.now, published);
        }
        self.sync_losses();
        if core::mem::take(&mut out.put) {
            for _ in 0..self.opts.queries_per_action {
                self.random_query();
            }
        }
    }

    // ---- effects ----

    /// Executes and records a call's effects; `snapshot` is the snapshot the call handed over,
    /// if any.
    pub(super) fn absorb(&mut self, effects: Effects, snapshot: Option<Handed>) {
        if !effects.is_empty() {
            self.transcript.number(self.now.as_nanos());
        }
        for effect in effects {
            self.text.clear();
            let _ = write!(self.text, "{effect:?}");
            if self.trace {
                let shown: String = self.text.chars().take(160).collect();
                eprintln!("{:>14}   effect {shown}", self.now.as_nanos());
            }
            self.transcript.bytes(self.text.as_bytes());
            match effect {
                Effect::Command(Command::Connect { .. }) => self.net.connect(self.now),
                Effect::Command(Command::Disconnect) => self.net.disconnect(self.now),
                Effect::Command(Command::FetchSnapshot { request }) => {
                    // Batches the session held for a fetch that failed or was superseded are
                    // dropped when the next is asked: this key list holds what they did for the
                    // default tenant only; for the others they are lost (misses), as at a loss.
                    self.p_loss = self.p_loss.max(self.handed_upto);
                    self.last_fetch_at = Some(self.now);
                    self.on_fetch(request);
                }
                Effect::Command(Command::VerifyKeys { request, keys }) => {
                    self.on_verify(request, keys)
                }
                Effect::Command(Command::ReadStatus { request }) => self.on_status_check(request),
                Effect::Command(Command::ReadSignals { request }) => self.on_signals_read(request),
                Effect::Report(CoreReport::Cleared { reason, .. })
                    if reason != ClearReason::PublisherCleared =>
                {
                    if matches!(
                        reason,
                        ClearReason::UnreadableRemoval
                            | ClearReason::Requested
                            | ClearReason::StoreChanged
                    ) {
                        // The batch held a removal without its key, the driver asked, or the
                        // master's signals moved and the reconcile could not be placed.
                        self.last_forced_at = Some(self.now);
                    }
                    self.driver.last_clear_at = self.now;
                    self.snapshots.clear();
                    self.placed_snapshot = None;
                    self.p_loss = self.p_loss.max(self.master.position());
                    self.baseline_pending = true;
                }
                Effect::Report(CoreReport::Recovering { why }) => self.recovering = Some(why),
                Effect::Report(CoreReport::HealthChanged { to, .. })
                    if to != Health::Recovering =>
                {
                    self.recovering = None;
                }
                Effect::Report(CoreReport::Placed { .. }) => {
                    // The snapshot's status point placed the stream: what the session knows of
                    // that run from now on (its key list is applied from here, and the resync
                    // may end in a later call, after doubted lines are confirmed).
                    if let Some(handed) = snapshot {
                        if let Some((epoch, point)) = handed.point {
                            self.driver.flight.took_status(epoch, point);
                        }
                        self.placed_snapshot = Some(handed.pos);
                    }
                }
                Effect::Report(CoreReport::ResyncFailed {
                    reason: ResyncFailure::Confirm,
                }) => self.stats.fetches_unconfirmed += 1,
                Effect::Report(CoreReport::Resynced { .. }) => {
                    if let Some(pos) = self.placed_snapshot.take() {
                        self.snapshots.push(pos);
                    }
                }
                // The worlds follow one fixed master: no HA leader to check or follow.
                Effect::Command(Command::CheckLeader { .. } | Command::UseMaster { .. }) => {}
                Effect::Report(_) => {}
            }
        }
        self.after_call();
    }

    pub(super) fn after_call(&mut self) {
        let status = self.sut.status(self.now);
        let applied = status
            .last_applied_seq
            .and_then(|s| self.fed.get(s.0 as usize))
            .copied();
        self.applied_pos = applied.map_or(0, |(_, _, last)| last);
        if let Some((_, first, _)) = applied.filter(|_| self.baseline_pending) {
            // The first batch applied after the clear (or, when a window released several in
            // one call, the last of them: a wider excuse, liveness only).
            self.p_loss = self.p_loss.max(first.saturating_sub(1));
            self.baseline_pending = false;
        }
        let c = status.counters;
        if c.stale_keys_found > self.stale_keys_seen {
            // Verification found keys gone at the master: a reason to resync.
            self.stale_keys_seen = c.stale_keys_found;
            self.last_forced_at = Some(self.now);
        }
        let s = self.opts.session.clone();
        if c.pages > s.index_cap as u64 {
            self.fail(
                FailureKind::Bounds,
                format!("{} pages held, cap {}", c.pages, s.index_cap),
            );
        }
        // The window holds up to `max_held`; with resync, an unplaced stream holds up to the
        // resync buffer for the next status point.
        let max_held = if s.resync {
            s.reorder.max_held.max(s.max_buffered_batches)
        } else {
            s.reorder.max_held
        };
        if c.held_batches > max_held as u64 {
            self.fail(
                FailureKind::Bounds,
                format!("{} batches held, max {max_held}", c.held_batches),
            );
        }
        if s.resync && c.buffered_batches > s.max_buffered_batches as u64 {
            self.fail(
                FailureKind::Bounds,
                format!(
                    "{} batches buffered, max {}",
                    c.buffered_batches, s.max_buffered_batches
                ),
            );
        }
    }
}
