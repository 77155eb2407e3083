//! The driver's own timing ([`Driver`]): its stalls, the queries it asks between puts, and
//! what it has handed to the session.

use std::time::Duration;

use hicache_index::Instant;

use crate::flight::Flight;
use crate::options::DriverOptions;
use crate::rng::Rng;

use super::http_item::HttpItem;

/// The driver's timing and what it has handed to the session.
pub(super) struct Driver {
    pub(super) opts: DriverOptions,
    pub(super) rng: Rng,
    /// Losses, what was handed, and the reorder window's grace.
    pub(super) flight: Flight,
    pub(super) lost: Vec<(u64, u64)>,
    /// The driver is stalled until then.
    pub(super) stall_until: Option<Instant>,
    pub(super) stall_from: Instant,
    /// When the last stall ended.
    pub(super) woke_at: Option<Instant>,
    pub(super) next_stall: Option<Instant>,
    /// An answer to hand first when the stall ends.
    pub(super) first_after_stall: Option<HttpItem>,
    pub(super) next_query: Option<Instant>,
    /// The newest master run a handed message came from.
    pub(super) newest_epoch: u32,
    /// When the session last forgot everything.
    pub(super) last_clear_at: Instant,
}

impl Driver {
    pub(super) fn new(root: &Rng, opts: &DriverOptions, grace: Duration) -> Driver {
        let mut rng = root.fork(6);
        let next_stall = rng
            .exponential(opts.stalls_per_sec)
            .map(|d| Instant::ZERO + d);
        let next_query = rng
            .exponential(opts.queries_per_sec)
            .map(|d| Instant::ZERO + d);
        Driver {
            opts: opts.clone(),
            rng,
            flight: Flight::new(grace),
            lost: Vec::new(),
            stall_until: None,
            stall_from: Instant::ZERO,
            woke_at: None,
            next_stall,
            first_after_stall: None,
            next_query,
            newest_epoch: 0,
            last_clear_at: Instant::ZERO,
        }
    }

    /// Returns when the driver next has something to do (a stall to begin or end, a query).
    pub(super) fn next_at(&self) -> Option<Instant> {
        [self.stall_until, self.next_stall, self.next_query]
            .into_iter()
            .flatten()
            .min()
    }

    /// No more stalls (the quiet phase).
    pub(super) fn faults_off(&mut self) {
        self.next_stall = None;
        self.opts.snapshot_stall = 0.0;
    }

    /// No more queries besides those after puts (settling).
    pub(super) fn queries_off(&mut self) {
        self.next_query = None;
    }

    /// Draws whether a snapshot answer waits for a stall: `Some(first)`, `first` saying whether
    /// it is then applied before the messages queued meanwhile.
    pub(super) fn draw_snapshot_stall(&mut self) -> Option<bool> {
        let p = self.opts.snapshot_stall;
        (p > 0.0 && self.rng.chance(p)).then(|| self.rng.chance(0.5))
    }
}
