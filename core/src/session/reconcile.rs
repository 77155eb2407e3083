//! Reconciling: a key list read while the stream stays placed and the index keeps answering,
//! then brought into the index exactly, without a window of misses (its state:
//! `parts/reconcile.rs`).
//!
//! The fetch is an ordinary [`Command::FetchSnapshot`]; its status point `P` (the last sequence
//! the master had assigned before its key list was read) decides, object by object, who is
//! newer: a live batch numbered after `P` decides the objects it touched; for every other
//! object the key list does. Once the list is whole and the stream has applied every batch up
//! to `P`, the index is brought to the list in slices (`Index::reconcile_removals`, then
//! `Index::reconcile_restores`): objects held and not listed are removed, objects listed and
//! not held are stored, and objects present all along stay hits throughout. A batch after `P`
//! may still be older than the list (the master numbers what its queue held when the list was
//! read after `P`), so the keys such batches stored that the list lacks are then asked of the
//! master (as a resync asks, `session/questions.rs`): one it no longer holds is removed unless a
//! live event on it came after the question; the reconcile ends once no store is left to ask
//! about or its questions end (what they did not answer is claimed unasked). Whatever cannot be
//! placed so (the master gives no status point, the point is before where the stream stood when
//! the fetch was asked and so another run's, or the stream does not reach it within the fetch
//! timeout, the fetch fails, or the publisher clears before the list is applied) forgets
//! and resyncs instead ([`ClearReason::StoreChanged`]): misses, never a hit.

use alloc::boxed::Box;

use crate::index::{ObjectSet, Reconciled};
use crate::sequence::Position;

use super::parts::reconcile::Applying;
use super::parts::resync_state::note_store;
use super::*;

/// How many page slots (or listed pages) one slice of a reconcile applies: about 1.5 ms of the
/// writer's CPU for page slots, 1 ms for listed pages (1M MLA pages, measured by
/// `testing/bench/benches/reconcile.rs`).
const RECONCILE_SLICE: usize = 4_096;

/// The stream's sequence, where it stands at a batch or a status point.
fn stands_at(position: Position) -> Option<Seq> {
    match position {
        Position::Batch(p) | Position::Status { point: p, .. } => Some(p.seq),
        _ => None,
    }
}

impl Session {
    /// Starts a reconcile when a change of the master's signals waits for one and nothing else
    /// reads a key list: connected, the stream placed and trusted, no fetch under way.
    pub(super) fn reconcile_if_wanted(&mut self, now: Instant, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        if self.resync.watch.wanted.is_none()
            || !self.link.is_up()
            || !matches!(self.resync.state, ResyncState::Idle)
            || self.stream.is_unplaced()
            || self.point_in_doubt()
        {
            return;
        }
        let request = SnapshotRequest(self.resync.next_request);
        self.resync.next_request += 1;
        self.counters.reconciles_started += 1;
        let reconcile = Reconcile {
            at_ask: stands_at(self.stream.position()),
            overflowed: false,
            point: None,
            // Room for a key list of about the index's size: no rehash under the writer.
            listed: ObjectSet::with_capacity(self.index.page_count()),
            live: Vec::new(),
            cleared: false,
            listed_all: false,
            kept: None,
            applying: None,
            outcome: None,
        };
        // Every object left after the reconcile is listed (read after now) or was decided by a
        // live batch since (its arrival lowers `confirms`).
        self.resync.state = ResyncState::fetching(
            request,
            now,
            limits.fetch_timeout,
            now,
            Some(Box::new(reconcile)),
        );
        fx.push(Command::FetchSnapshot { request });
        self.update_health(fx);
    }

    /// The reconcile's answer began with the status point `watermark`: it can be placed, or it
    /// falls back.
    pub(super) fn begin_reconcile(
        &mut self,
        now: Instant,
        watermark: Option<Watermark>,
    ) -> Effects {
        let mut fx = Effects::new();
        let ResyncState::Fetching {
            applied,
            at_point,
            reconcile: Some(reconcile),
            ..
        } = &mut self.resync.state
        else {
            return fx;
        };
        let placeable = match (watermark, reconcile.at_ask) {
            // A clear since the ask: the rest of the list need not be read (see `cleared`).
            _ if reconcile.overflowed || reconcile.cleared => false,
            (None, _) => false,
            (Some(w), Some(at)) => w.seq >= at,
            (Some(_), None) => true,
        };
        if placeable {
            reconcile.point = watermark.map(Watermark::point);
            *applied = Some(0);
            *at_point = true;
        } else {
            self.reconcile_fell_back(now, &mut fx);
        }
        self.update_health(&mut fx);
        fx
    }

    /// The reconcile's key list is whole: it is applied once the stream reaches its point.
    pub(super) fn reconcile_listed(&mut self, now: Instant, fx: &mut Effects) {
        if let ResyncState::Fetching {
            reconcile: Some(reconcile),
            deadline,
            confirming,
            questions,
            ..
        } = &mut self.resync.state
        {
            reconcile.listed_all = true;
            // The stores are asked about with questions of their own: retries of the doubted
            // lines do not use them up.
            *questions = 0;
            // The doubted lines are settled: the deadline below is the stream's, and its
            // passing fails the reconcile (it falls back), not the confirmation again.
            *confirming = None;
            // The stream has the fetch timeout again to reach the point.
            *deadline = now
                + self
                    .config
                    .resync
                    .map_or(Duration::ZERO, |r| r.fetch_timeout);
        }
        self.reconcile_if_reached(now, fx);
    }

    /// Begins applying the reconcile's key list once it is whole and the stream has applied
    /// every batch up to its status point (from then on every live batch is after the point);
    /// the keys live batches after the point stored that the list lacks are asked about next.
    pub(super) fn reconcile_if_reached(&mut self, now: Instant, fx: &mut Effects) {
        let ResyncState::Fetching {
            reconcile: Some(reconcile),
            ..
        } = &self.resync.state
        else {
            return;
        };
        let Some(point) = reconcile
            .point
            .filter(|_| reconcile.listed_all && reconcile.kept.is_none())
        else {
            return;
        };
        if reconcile.overflowed || reconcile.cleared {
            return self.reconcile_fell_back(now, fx);
        }
        if stands_at(self.stream.position()).is_none_or(|at| at < point.seq) {
            return;
        }
        let ResyncState::Fetching {
            reconcile: Some(reconcile),
            unlisted,
            ..
        } = &mut self.resync.state
        else {
            unreachable!("matched above");
        };
        // A live batch after the point decides the objects it touched. It may still be older
        // than the list (the master's queue and the network delay what it published before
        // the list was read), so a key it stored that the list lacks is asked about once the
        // list is applied.
        let mut kept = ObjectSet::default();
        for (key, seq, stored) in reconcile.live.drain(..) {
            if seq > point.seq {
                self.index.name_key(DEFAULT_TENANT, &key, &mut kept);
                note_store(unlisted, &key, stored);
            }
        }
        // What the list holds needs no question. (Its pages are taken out as they are
        // restored: the stores that come from now on are asked about whether or not it
        // held them.)
        let index = &self.index;
        unlisted.retain(|key| !index.is_named(DEFAULT_TENANT, key, &reconcile.listed));
        reconcile.kept = Some(kept);
        reconcile.applying = Some(Applying {
            next_slot: Some(0),
            done: Reconciled::default(),
        });
        self.reconcile_step(now, fx);
    }

    /// Applies the next slice of the reconcile under way ([`RECONCILE_SLICE`] page slots, or
    /// pages to restore); the rest follows at once, through the timer, so that the driver lets
    /// queries and events in between. Live batches meanwhile are after the status point: each
    /// decides the objects it touched. Once every slice is applied, the stores the list lacks
    /// are asked about, and the reconcile ends when no question is left.
    pub(super) fn reconcile_step(&mut self, now: Instant, fx: &mut Effects) {
        let ResyncState::Fetching {
            reconcile: Some(reconcile),
            ..
        } = &mut self.resync.state
        else {
            return;
        };
        if reconcile.overflowed || reconcile.cleared {
            // Live events were left unrecorded, so what they decided cannot be told; or the
            // publisher cleared since the ask (see `Reconcile::cleared`).
            return self.reconcile_fell_back(now, fx);
        }
        let Reconcile {
            listed,
            live,
            kept: Some(kept),
            applying: Some(applying),
            outcome,
            ..
        } = reconcile.as_mut()
        else {
            return;
        };
        for (key, _, _) in live.drain(..) {
            self.index.name_key(DEFAULT_TENANT, &key, kept);
        }
        // Page slots first, then the listed pages to restore, [`RECONCILE_SLICE`] in all.
        let mut budget = RECONCILE_SLICE;
        if let Some(from) = applying.next_slot {
            let next = self.index.reconcile_removals(
                DEFAULT_TENANT,
                listed,
                kept,
                (from, budget),
                &mut applying.done,
            );
            applying.next_slot = next;
            if next.is_some() {
                return;
            }
            budget -= budget.min(self.index.slots().saturating_sub(from));
        }
        if self
            .index
            .reconcile_restores(listed, budget.max(1), kept, &mut applying.done)
        {
            return;
        }
        *outcome = Some(applying.done);
        reconcile.applying = None;
        if !self.ask_again(now, fx) {
            self.complete_resync(now, fx);
        }
    }

    /// Ends the reconcile whose list was applied and whose stores were asked about; `hold`:
    /// stores the list lacks were claimed unasked, so this key list holds back the change of
    /// the master's signals waiting (once per change: see `Watch::hold_once`).
    pub(super) fn reconcile_finish(&mut self, hold: bool, fx: &mut Effects) {
        let ResyncState::Fetching {
            reconcile: Some(reconcile),
            asked_at,
            confirms,
            lines,
            ..
        } = core::mem::replace(&mut self.resync.state, ResyncState::Idle)
        else {
            unreachable!("a reconcile ends");
        };
        let done = reconcile.outcome.unwrap_or_default();
        self.counters.snapshot_odd_lines += lines.odd;
        self.counters.snapshot_doubted_lines += lines.doubted;
        self.counters.reconciles_completed += 1;
        self.counters.reconciled_removed += done.removed as u64;
        self.counters.reconciled_restored += done.restored as u64;
        // The key list covers the default tenant only: objects of others keep their own
        // confirmation.
        if !done.other_tenants {
            self.confirm(confirms);
        }
        if !hold {
            self.resync.watch.satisfied_by(asked_at);
        }
        fx.push(Report::Reconciled {
            removed: done.removed,
            restored: done.restored,
        });
        self.emit_deltas(fx);
        self.update_health(fx);
    }

    /// A reconcile that cannot bring the index to its key list exactly forgets and resyncs
    /// (a key list asked for now satisfies the change).
    pub(super) fn reconcile_fell_back(&mut self, now: Instant, fx: &mut Effects) {
        self.resync.state = ResyncState::Idle;
        self.forget(now, ClearReason::StoreChanged, fx);
    }

    /// Reports whether the fetch under way is a reconcile.
    pub(super) fn reconciling(&self) -> bool {
        matches!(
            self.resync.state,
            ResyncState::Fetching {
                reconcile: Some(_),
                ..
            }
        )
    }
}
