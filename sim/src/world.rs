//! The world: a master, a network and a session under test, driven in virtual time, with the
//! checks run as it goes.
//!
//! # The loop
//! Virtual time jumps to the earliest pending thing: a network event (delivery, connect answer,
//! disconnect), an HTTP answer, the session's [`System::poll_timeout`], the master's next action
//! or publisher run, a stray publisher's message, or a phase deadline. One thing is done per step,
//! in a fixed order at equal times (network, HTTP, session timeout, master, others), and every
//! effect the session returns is executed in order. A step cap fails the run when time stops
//! advancing (a session whose deadline does not move after `handle_timeout` spins).
//!
//! The files: the world's state ([`World`], its phase) in `world/state.rs`; the loop and the
//! phases in `world/step.rs`; executing the session's effects and the master's output in
//! `world/effects.rs`; the driver's own timing (stalls of a CPU-starved driver, queries between
//! puts) in `world/driver.rs`, and what it hands to the session in `world/delivery.rs`; the
//! HTTP side (status read, key-list read, answer, each apart under load) in `world/http.rs`,
//! with what it has on its way in `world/http_item.rs`; a stray publisher and junk in
//! `world/faults.rs`; the checks in `world/checks.rs` (a model's pools in `world/pools.rs`) and
//! the watch's bound in `world/bound.rs`; failures, figures and the `Report` type in
//! `world/report.rs`, and failing a run and making its report in `world/verdict.rs`.
//!
//! # The phases
//! 1. **Chaos**: the preset's faults are on until the master has created
//!    [`Options::events`] events. With [`Options::tail`] it ends with a burst whose tail is
//!    lost ([`crate::options::WorldKind::TailLossIdle`]).
//! 2. **Quiet**: faults stop (no loss, no silent removal, no restart; the network passes in
//!    order; the HTTP side follows the current run); the master keeps serving for
//!    [`Options::quiet`] (after a lost tail it is idle instead).
//! 3. **Settle**: the master stops acting; the world waits long enough for reconnects, resyncs
//!    and enough verification rounds to cover the index, and at least until the idle master's
//!    check.
//! 4. **The idle master's check**, [`IDLE_BOUND`] after the master went idle and reachable
//!    (faults off, not acting, nothing queued, up): the session is live and exact (see the
//!    checks below), or, with a master that gives no status counters, in the expected stall.
//! 5. **Final checks**: liveness, staleness (with verification on), and a safety sweep over every
//!    page ever written.
//!
//! # The checks
//! - **Safety** after every query: each required object of each reported page must be justified
//!   by the oracle's rule ([`crate::oracle`]): present at the master (events or true state) at
//!   some moment at or after the oldest event still pending for the session ([`crate::flight`]);
//!   a page with an unjustified object is a false hit. Excused claims (justified only by a pending
//!   event) are counted with the longest excuse. With [`Options::exact`] (no faults) every answer
//!   must also equal the oracle's own answer.
//! - **Confirmation** after every query: each required object of each reported page was present
//!   in the master's true state at or after `now - unconfirmed_ms`, allowing for the oldest
//!   event any delivered message carried (an event counts as of its delivery).
//! - **Staleness**: justified hits with an object absent from the master's true state, counted
//!   (default tenant and others apart); after settling with verification on, none may be left in
//!   the default tenant.
//! - **Liveness** at the end: the session is live, and every page whose objects are all present
//!   (true state and event history) is a hit when each object's last `stored` event came after
//!   the last loss the world knows of (a clear, a lost message, a queue drop, a restart), or, with
//!   resync on, when it belongs to the default tenant. Skipped when the index evicted pages.
//! - **The idle master's check** ([`IDLE_BOUND`] after it went idle and reachable): the same
//!   liveness demand and a safety sweep in which a loss nothing revealed no longer excuses a
//!   claim when the master tells its counters. A master without status counters whose session
//!   stays recovering, having had to forget at or after the last batch (a connection, a loss
//!   or restart that batch revealed, stale keys, an unreadable removal) with no batch since its
//!   last fetch, is the **expected stall**: no rule can anchor its snapshot; it is counted
//!   apart ([`Report::stalled`]), neither a pass of the liveness checks nor a failure.
//! - **The watch's bound** (issue 27) after every query: a session that watches the master's
//!   signals claims no object of the default tenant that the master stopped listing because
//!   its client went away (hidden, or gone with its segment) longer than the bound named in
//!   `world/bound.rs`, in runs whose HTTP side neither fails nor hangs (in the others, for
//!   what went unlisted once the faults stopped). Objects back after a stall are demanded by
//!   the liveness checks when the session watches (a reconcile brings them back), and not
//!   otherwise.
//! - **Bounds** after every call: pages ≤ cap, held batches ≤ `max_held`, buffered batches ≤
//!   the resync bound.
//! - **Determinism**: [`Report::transcript`] hashes every effect and every answer, in order.

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::{Instant, Session};

use crate::master::{Action, Master, MasterOutput};
use crate::network::Network;
use crate::options::Options;
use crate::oracle::Oracle;
use crate::rng::Rng;
use crate::system::System;
use crate::util::Transcript;

mod bound;
mod checks;
mod delivery;
mod driver;
mod effects;
mod faults;
mod http;
mod http_item;
mod pools;
mod report;
mod state;
mod step;
mod verdict;

pub use report::{Failure, FailureKind, Report, RunStats};
pub use state::World;
pub use step::IDLE_BOUND;

use driver::Driver;
use pools::pool_plans;
use state::Phase;

/// Runs one seed's options against the real [`Session`].
pub fn run(options: &Options) -> Report {
    let session = Session::new(options.session_config()).expect("simulated configs are valid");
    World::new(options.clone(), session).run()
}

/// Runs one seed's options against the real [`Session`], turning a panic into a failed report.
pub fn run_catching(options: &Options) -> Report {
    match std::panic::catch_unwind(|| run(options)) {
        Ok(report) => report,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".to_owned());
            Report {
                options: options.clone(),
                stats: RunStats::default(),
                failures: vec![Failure {
                    at: Instant::ZERO,
                    kind: FailureKind::Panic,
                    detail: message,
                }],
                transcript: 0,
            }
        }
    }
}

/// Runs one seed's options against the real [`Session`], printing every step to stderr.
pub fn trace(options: &Options) -> Report {
    let session = Session::new(options.session_config()).expect("simulated configs are valid");
    let mut world = World::new(options.clone(), session);
    world.set_trace(true);
    world.run()
}

/// Runs options against any system.
pub fn run_with<S: System>(options: &Options, sut: S) -> Report {
    World::new(options.clone(), sut).run()
}

impl<S: System> World<S> {
    /// Makes a world at time zero, in the chaos phase.
    pub fn new(opts: Options, sut: S) -> World<S> {
        let root = Rng::new(opts.seed);
        let models = opts.model_specs();
        let plans = models.iter().map(pool_plans).collect();
        let mut master = Master::new(opts.master.clone(), models.clone(), root.fork(1));
        master.set_http_lag(opts.http.lag_after_restart);
        let net = Network::new(opts.network.clone(), root.fork(2));
        let mut other_rng = root.fork(5);
        let next_stray = other_rng
            .exponential(opts.network.stray_per_sec)
            .map(|d| Instant::ZERO + d);
        let next_junk = other_rng
            .exponential(opts.network.junk_per_sec)
            .map(|d| Instant::ZERO + d);
        let next_clear = other_rng
            .exponential(opts.session.requested_clears_per_sec)
            .map(|d| Instant::ZERO + d);
        let opts_driver = opts.driver.clone();
        let grace = opts.session.reorder.max_delay.unwrap_or(Duration::ZERO);
        // A lagging driver hands the session the window's timer late: it releases or declares
        // a loss that much later.
        let grace = if opts.session.reorder.max_held > 0 {
            grace + opts.driver.timer_lag
        } else {
            Duration::ZERO
        };
        World {
            http_opts: opts.http.clone(),
            opts,
            now: Instant::ZERO,
            phase: Phase::Chaos,
            master,
            net,
            oracle: Oracle::new(),
            sut,
            models,
            plans,
            http: BTreeMap::new(),
            http_counter: 0,
            http_rng: root.fork(3),
            query_rng: root.fork(4),
            other_rng,
            fed: Vec::new(),
            applied_pos: 0,
            baseline_pending: false,
            snapshots: Vec::new(),
            placed_snapshot: None,
            handed_upto: 0,
            p_loss: 0,
            next_stray,
            next_junk,
            next_clear,
            stray_seq: 0,
            transcript: Transcript::default(),
            stats: RunStats::default(),
            failures: Vec::new(),
            out: MasterOutput::default(),
            hashes: Vec::new(),
            map: Vec::new(),
            text: String::new(),
            same_time_steps: 0,
            spins: 0,
            trace: false,
            settle_cap: Instant::ZERO,
            settle_keys: 0,
            verified_at_settle: 0,
            record_times: Vec::new(),
            evidence_lag: Duration::ZERO,
            driver: Driver::new(&root, &opts_driver, grace),
            judge: None,
            restart_at: None,
            clear_at: None,
            query_keys_down_until: Instant::ZERO,
            last_timer: Instant::ZERO,
            recovering: None,
            world_rng: root.fork(7),
            tail_lose: 0,
            idle_since: None,
            idle_checked: false,
            last_fetch_at: None,
            last_handed_at: None,
            last_forced_at: None,
            stale_keys_seen: 0,
            quiet_since: None,
            signals_answered: None,
        }
    }

    /// Prints every step to stderr (for replaying a failing seed by hand).
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// Returns the current virtual time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Returns the failures so far.
    pub fn failures(&self) -> &[Failure] {
        &self.failures
    }

    /// Returns the system under test.
    pub fn system(&self) -> &S {
        &self.sut
    }

    /// Returns the master.
    pub fn master(&self) -> &Master {
        &self.master
    }

    /// Runs all phases and the final checks.
    pub fn run(mut self) -> Report {
        self.run_until(None);
        self.finish()
    }

    /// Hands control to a script: the master no longer acts on its own (its publisher still
    /// runs); the script calls [`World::act`] and [`World::advance`].
    pub fn start_script(&mut self) {
        self.phase = Phase::Scripted;
        self.master.set_acting(false);
    }

    /// Makes the master perform one action now, then runs the queries that follow a put.
    pub fn act(&mut self, action: Action) {
        let mut out = core::mem::take(&mut self.out);
        self.master.act(self.now, action, &mut out);
        self.absorb_master(&mut out);
        self.out = out;
    }

    /// Runs the loop for `d` of virtual time.
    pub fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        self.run_until(Some(until));
        if self.now < until {
            self.now = until;
        }
    }

    /// Runs the quiet and settle phases and the final checks, and returns the report.
    pub fn finish(mut self) -> Report {
        if self.phase == Phase::Chaos || self.phase == Phase::Scripted {
            self.master.set_acting(true);
            self.enter_quiet();
        }
        self.run_until(None);
        if self.failures.is_empty() {
            self.final_checks();
        }
        self.report()
    }
}
