//! The store clients the master knows ([`Clients`]): which is active, silent, suspected or
//! gone, and the counters of its `/metrics` they move ([`ClientSignals`]; [`ClientStats`] for
//! the run's figures). What a client that goes away does to the objects is `segments.rs`, whose
//! transitions read and set the fields here directly (they are the master's, visible to its
//! files).

use hicache_index::Instant;

use crate::options::ClientOptions;
use crate::rng::Rng;

use super::pages::ObjId;

/// The client liveness and segment counters of the master's `/metrics` (spec section 10).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientSignals {
    /// `master_unmount_segment_requests_total`.
    pub unmounts: u64,
    /// `master_remount_segment_requests_total`.
    pub remounts: u64,
    /// `master_client_liveness_suspected_transitions_total`.
    pub suspected: u64,
    /// `master_client_liveness_offline_transitions_total`.
    pub offline: u64,
    /// `master_client_liveness_recoveries_total`.
    pub recoveries: u64,
    /// `master_client_liveness_suspected_clients` (a gauge).
    pub suspected_now: u64,
}

/// What the clients did in a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientStats {
    /// Segments closed.
    pub closes: u64,
    /// Clients crashed.
    pub crashes: u64,
    /// Clients stalled.
    pub stalls: u64,
    /// Objects hidden at an active TTL.
    pub hidden: u64,
    /// Objects back after a stall.
    pub restored: u64,
    /// Objects gone with a segment (closed, or unmounted while listed).
    pub unmounted: u64,
}

/// Where a client stands: active, silent past its heartbeats, suspected, or gone.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Heartbeating; puts land on its segment.
    Active,
    /// Silent (crashed, or stalled until `resume`); its objects are listed until `hide_at`.
    Silent {
        hide_at: Instant,
        resume: Option<Instant>,
    },
    /// Suspected: its objects are hidden; offline at `offline_at` unless it resumes first.
    Suspected {
        offline_at: Instant,
        resume: Option<Instant>,
    },
    /// No segment; a client mounts one at `mount_at` (`remount`: the stalled client resumes
    /// and mounts its segment again).
    Gone { mount_at: Instant, remount: bool },
}

/// The clients and their segments.
#[derive(Debug)]
pub(super) struct Clients {
    pub(super) opts: ClientOptions,
    pub(super) rng: Rng,
    pub(super) slots: Vec<State>,
    /// The objects each slot's segment has hidden.
    pub(super) hidden: Vec<Vec<ObjId>>,
    pub(super) next_fault: Option<Instant>,
    pub(super) signals: ClientSignals,
    pub(super) stats: ClientStats,
}

impl Clients {
    pub(super) fn new(opts: ClientOptions, rng: Rng) -> Clients {
        let n = usize::from(opts.clients.max(1));
        let mut c = Clients {
            opts,
            rng,
            slots: vec![State::Active; n],
            hidden: vec![Vec::new(); n],
            next_fault: None,
            signals: ClientSignals::default(),
            stats: ClientStats::default(),
        };
        c.next_fault = c.fault_after(Instant::ZERO);
        c
    }

    pub(super) fn fault_after(&mut self, now: Instant) -> Option<Instant> {
        self.rng
            .exponential(self.opts.faults_per_sec)
            .map(|d| now + d)
    }

    /// Picks the segment of a client that heartbeats for a new object.
    pub(super) fn place(&mut self) -> u8 {
        let active: Vec<usize> = (0..self.slots.len())
            .filter(|&i| self.slots[i] == State::Active)
            .collect();
        match self.rng.pick(&active) {
            Some(&i) => i as u8,
            None => 0,
        }
    }

    /// Returns when a client next changes, or a fault is due (while faults are on).
    pub(super) fn next_at(&self, faults: bool) -> Option<Instant> {
        let due = self.slots.iter().filter_map(|s| match *s {
            State::Active => None,
            State::Silent { hide_at, resume } => Some(resume.map_or(hide_at, |r| r.min(hide_at))),
            State::Suspected { offline_at, resume } => {
                Some(resume.map_or(offline_at, |r| r.min(offline_at)))
            }
            State::Gone { mount_at, .. } => Some(mount_at),
        });
        due.chain(self.next_fault.filter(|_| faults)).min()
    }

    /// Reports whether some client is not heartbeating with its segment mounted.
    pub(super) fn busy(&self) -> bool {
        self.slots.iter().any(|s| *s != State::Active)
    }
}
