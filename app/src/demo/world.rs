//! What the demo's threads share: the [`World`] (the emulated master, the index, the removals
//! on their way, the counts, the faults), and the served model's page size, TP size and name.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hicache_index::{Layout, Lookup, Namespace, PageHash, Seq};
use hicache_index_emulator::{Emulator, Position};
use hicache_index_tokio::QueryHandle;

use crate::latency::Latency;

/// Tokens per page.
pub(super) const PAGE: u32 = 64;
/// The TP size: 16 objects (K and V per rank) a page.
pub(super) const TP: u32 = 8;
/// The served model (part of every key).
pub(super) const MODEL: &str = "Qwen/Qwen3-32B";

/// What the threads share.
pub(super) struct World {
    pub(super) emulator: Emulator,
    pub(super) layout: Layout,
    pub(super) index: QueryHandle,
    /// When the demo started (the clock of `in_flight` and `asking`).
    pub(super) start: Instant,
    /// Pages removed from the master whose removal may still be on its way to the index.
    pub(super) in_flight: Mutex<HashMap<PageHash, Removal>>,
    /// The run of the master the index is known to follow: 0 at first, the new run once the
    /// index claimed a page stored only after the restart.
    pub(super) index_run: AtomicU64,
    /// For each router, when its current query began (ns since start; `u64::MAX` when idle).
    pub(super) asking: Vec<AtomicU64>,
    pub(super) stop: AtomicBool,
    pub(super) latency: Latency,
    /// From the master removing objects to the index applying the batch that carried them.
    pub(super) removal_lag: Latency,
    pub(super) queries: AtomicU64,
    pub(super) pages_asked: AtomicU64,
    pub(super) pages_hit: AtomicU64,
    pub(super) false_hits: AtomicU64,
    pub(super) in_flight_claims: AtomicU64,
    pub(super) first_false_hit: Mutex<Option<String>>,
    pub(super) faults: Mutex<Faults>,
}

/// A page's removal from the master, and when the index was seen to know it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Removal {
    /// The batch that carried it; for objects lost in a restart, the new run at sequence 0
    /// (known once the index follows the new run).
    pub(super) at: Position,
    /// When the index was seen to have applied `at` (ns since start; `u64::MAX` until then).
    pub(super) applied_ns: u64,
}

/// Where the index stands in the master's streams: the run it follows and the last sequence it
/// applied (read in that order, so the sequence is never older than the run).
#[derive(Clone, Copy, Debug)]
pub(super) struct Applied {
    pub(super) run: u64,
    pub(super) seq: Option<Seq>,
}

impl Applied {
    /// Reports whether an index standing here has applied the batch at `at`.
    pub(super) fn covers(self, at: Position) -> bool {
        self.run > at.run || (self.run == at.run && self.seq.is_some_and(|s| s >= at.seq))
    }
}

/// When the faults were injected and when the index had recovered from them.
#[derive(Default, Debug)]
pub(super) struct Faults {
    pub(super) gap_at: Option<Duration>,
    pub(super) gap_pages: usize,
    pub(super) gap_recovered: Option<Duration>,
    pub(super) restart_at: Option<Duration>,
    pub(super) restart_recovered: Option<Duration>,
    pub(super) restart_forgotten: Option<Duration>,
    pub(super) removals: u64,
    pub(super) removal_waits_timed_out: u64,
}

pub(super) fn page_hashes(layout: &Layout, tokens: &[u32]) -> Vec<PageHash> {
    layout.page_hashes(tokens, Namespace::NONE).collect()
}

/// Leading pages of `hashes` the index claims.
pub(super) fn prefix(index: &QueryHandle, hashes: &[PageHash]) -> usize {
    index
        .query(&Lookup::page_hashes(hashes))
        .map_or(0, |h| h.prefix_pages)
}

impl World {
    /// Nanoseconds since the demo started.
    pub(super) fn nanos(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Where the index stands now.
    pub(super) fn applied(&self) -> Applied {
        let run = self.index_run.load(Ordering::SeqCst);
        Applied {
            run,
            seq: self.index.last_applied_seq(),
        }
    }

    /// Marks `pages` as being removed by the batch at `at` (called before they leave the
    /// master, with a sequence no batch has, then again once the batch is known).
    pub(super) fn removing(&self, pages: &[PageHash], at: Position) {
        let mut in_flight = self.removals();
        for page in pages {
            in_flight.insert(
                *page,
                Removal {
                    at,
                    applied_ns: u64::MAX,
                },
            );
        }
    }

    /// Marks the removals of `pages` as applied by the index now, and drops the entries no
    /// query in progress can need: applied before every current query began, and more than
    /// 5 s ago.
    pub(super) fn applied_removals(&self, pages: &[PageHash]) {
        let now = self.nanos();
        let oldest_query = self
            .asking
            .iter()
            .map(|a| a.load(Ordering::SeqCst))
            .min()
            .unwrap_or(u64::MAX);
        let horizon = oldest_query.min(now.saturating_sub(5_000_000_000));
        let mut in_flight = self.removals();
        for page in pages {
            if let Some(removal) = in_flight.get_mut(page) {
                removal.applied_ns = now;
            }
        }
        in_flight.retain(|_, r| r.applied_ns >= horizon);
    }

    /// Locks the removals still on their way to the index.
    pub(super) fn removals(&self) -> std::sync::MutexGuard<'_, HashMap<PageHash, Removal>> {
        self.in_flight
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts a false hit, keeping the first one's description.
    pub(super) fn false_hit(&self, describe: impl FnOnce() -> String) {
        self.false_hits.fetch_add(1, Ordering::Relaxed);
        let mut first = self
            .first_false_hit
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if first.is_none() {
            *first = Some(describe());
        }
    }
}

pub(super) fn lock(world: &World) -> std::sync::MutexGuard<'_, Faults> {
    world
        .faults
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
