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
//! The driver's own timing (stalls of a CPU-starved driver, queries between puts) and what it
//! has handed to the session live in `world/delivery.rs`; the HTTP side (status read, key-list
//! read, answer, each apart under load) in `world/http.rs`; the checks in `world/checks.rs`.
//!
//! # The phases
//! 1. **Chaos**: the preset's faults are on until the master has created
//!    [`Options::events`] events.
//! 2. **Quiet**: faults stop (no loss, no silent removal, no restart; the network passes in
//!    order); the master keeps serving for [`Options::quiet`].
//! 3. **Settle**: the master stops acting; the world waits long enough for reconnects, resyncs
//!    and enough verification rounds to cover the index.
//! 4. **Final checks**: liveness, staleness (with verification on), and a safety sweep over every
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
//! - **Bounds** after every call: pages ≤ cap, held batches ≤ `max_held`, buffered batches ≤
//!   the resync bound.
//! - **Determinism**: [`Report::transcript`] hashes every effect and every answer, in order.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hicache_index::{
    ClearReason, Effect, Effects, Health, HitPolicy, Hits, Instant, Lookup, PageHash, Pages,
    Session, Timestamp, Tokens,
};

use crate::encode::{encode_payload, OwnedBatch, OwnedEvent};
use crate::master::{Action, Master, MasterOutput, ModelSpec, ObjId, PageId, Request, TENANTS};
use crate::network::{Message, NetEvent, NetStats, Network, Origin};
use crate::options::{HttpOptions, Options};
use crate::oracle::Oracle;
use crate::rng::Rng;
use crate::system::System;
use crate::util::Transcript;

mod checks;
mod delivery;
mod http;

use http::HttpItem;

/// What went wrong in a run.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureKind {
    /// A hit with an object the history does not justify.
    FalseHit,
    /// An answer differs from the oracle's (exact mode only).
    Mismatch,
    /// A page that must be a hit after the quiet period is not.
    Liveness,
    /// The session is not live after the quiet period.
    NotLive,
    /// Stale hits remain after enough verification rounds.
    Staleness,
    /// A hit's object left the master before the time the index reports it confirmed.
    Unconfirmed,
    /// A bound was exceeded (index pages, held or buffered batches).
    Bounds,
    /// The session's deadline did not move after `handle_timeout`.
    BusyLoop,
    /// Virtual time stopped advancing.
    StepCap,
    /// A query returned an error.
    QueryError,
    /// The system under test panicked.
    Panic,
}

/// One failed check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Virtual time.
    pub at: Instant,
    /// What kind.
    pub kind: FailureKind,
    /// The particulars.
    pub detail: String,
}

/// Figures of one run.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunStats {
    /// Events the master created.
    pub events: u64,
    /// Batches the master sent.
    pub batches: u64,
    /// Events dropped by the master's full queue.
    pub queue_drops: u64,
    /// Master restarts.
    pub master_restarts: u64,
    /// Objects removed without an event.
    pub silent_removals: u64,
    /// Gaps the session saw.
    pub gaps: u64,
    /// Restarts the session saw.
    pub session_restarts: u64,
    /// Clears (every reason).
    pub clears: u64,
    /// Resyncs completed.
    pub resyncs: u64,
    /// Resyncs failed.
    pub resyncs_failed: u64,
    /// Verification rounds.
    pub verify_rounds: u64,
    /// Stale keys verification removed.
    pub stale_keys_found: u64,
    /// Duplicates and late copies skipped.
    pub duplicates: u64,
    /// Batches held out of order (reorder window).
    pub held: u64,
    /// Disconnects the session saw (connection losses and failed connects).
    pub disconnects: u64,
    /// Clears after an unreadable removal.
    pub unreadable_removal_clears: u64,
    /// `cleared` events applied.
    pub publisher_clears: u64,
    /// Driver-requested clears.
    pub requested_clears: u64,
    /// Stray and malformed messages ignored.
    pub ignored_messages: u64,
    /// Queries asked.
    pub queries: u64,
    /// Pages reported as hits.
    pub hit_pages: u64,
    /// False hits (pages).
    pub false_hits: u64,
    /// Justified hit pages with an object absent from the true state (default tenant).
    pub stale_hits: u64,
    /// The same, in other tenants (verification cannot reach them).
    pub stale_hits_other_tenants: u64,
    /// Pages checked for liveness at the end.
    pub liveness_pages: u64,
    /// Claims excused because a change of their object was still pending for the session
    /// (pages; see [`crate::oracle`]).
    pub excused_claims: u64,
    /// The longest excuse: the age of the oldest pending event behind an excused claim.
    pub longest_excuse: Duration,
    /// Restarts whose first message handed continued the old master's exactly (no stream signal
    /// can reveal them; counted as silent removals).
    pub invisible_restarts: u64,
    /// Messages handed with an undecodable payload, topic and sequence intact.
    pub undecodable_with_seq: u64,
    /// Messages of an older master run handed after one of a newer run.
    pub cross_restart_reorders: u64,
    /// Late copies handed after the session forgot everything since their message was sent.
    pub late_after_clear: u64,
    /// Driver stalls.
    pub stalls: u64,
    /// Snapshot answers applied only after a stall.
    pub snapshot_stalls: u64,
    /// Snapshot answers whose body had foreign lines (odd keys, split keys).
    pub odd_snapshots: u64,
    /// Key lists read after at least ten batches had been published since their status read.
    pub resyncs_under_load: u64,
    /// Events of an unknown type without a key the master sent.
    pub unknown_keyless: u64,
    /// Liveness was skipped (the index evicted).
    pub liveness_skipped: bool,
    /// Index evictions.
    pub evictions: u64,
    /// Virtual time simulated.
    pub virtual_time: Duration,
    /// Loop steps.
    pub steps: u64,
    /// The network's figures.
    pub net: NetStats,
}

/// The outcome of one run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The options it ran with.
    pub options: Options,
    /// Its figures.
    pub stats: RunStats,
    /// Failed checks (the run stops after a few).
    pub failures: Vec<Failure>,
    /// The hash of every effect and answer, in order.
    pub transcript: u64,
}

impl Report {
    /// Reports whether every check passed.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Describes the outcome: the failures, the replay command and the options.
    pub fn describe_failure(&self) -> String {
        let mut s = String::new();
        if self.passed() {
            let _ = writeln!(
                s,
                "seed {} ({}) passed",
                self.options.seed, self.options.preset
            );
        } else {
            let _ = writeln!(
                s,
                "seed {} ({}) FAILED: {} failure(s)",
                self.options.seed,
                self.options.preset,
                self.failures.len()
            );
        }
        for f in &self.failures {
            let _ = writeln!(s, "  [{:?}] at {:?}: {}", f.kind, f.at, f.detail);
        }
        let _ = writeln!(s, "  replay: {}", self.options.replay_command());
        let _ = writeln!(s, "  options: {:#?}", self.options);
        s
    }
}

/// Stop a run after this many failures.
const MAX_FAILURES: usize = 3;
/// Steps at one virtual instant before the run is declared stuck.
const STEP_CAP: u64 = 200_000;
/// `handle_timeout` calls in a row that leave the deadline in the past.
const SPIN_CAP: u32 = 64;
/// The longest a chaos phase may last in virtual time.
const CHAOS_CAP: Duration = Duration::from_secs(600);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Phase {
    Chaos,
    Quiet { until: Instant },
    Settle { until: Instant },
    Scripted,
    Done,
}

/// The pools of a model as suffix ranges with their policies.
#[derive(Copy, Clone, Debug)]
struct PoolPlan {
    start: usize,
    end: usize,
    policy: HitPolicy,
}

fn pool_plans(spec: &ModelSpec) -> Vec<PoolPlan> {
    let mut at = 0;
    spec.layout
        .pools
        .iter()
        .map(|p| {
            let (start, end) = (at, at + p.suffixes.len());
            at = end;
            PoolPlan {
                start,
                end,
                policy: p.hit_policy,
            }
        })
        .collect()
}

/// A world around the system under test `S` (see the module docs).
pub struct World<S: System> {
    opts: Options,
    now: Instant,
    phase: Phase,
    master: Master,
    net: Network,
    oracle: Oracle,
    sut: S,
    models: Vec<ModelSpec>,
    plans: Vec<Vec<PoolPlan>>,
    http_opts: HttpOptions,
    http: BTreeMap<(Instant, u64), HttpItem>,
    http_counter: u64,
    http_rng: Rng,
    query_rng: Rng,
    other_rng: Rng,
    /// Per sequence, the epoch and first and last positions of the batch fed under it.
    fed: Vec<(u32, u64, u64)>,
    applied_pos: u64,
    /// A clear happened and no batch has applied since: the next batch applied is the stream's
    /// new baseline, and what was published before it is as lost as what came before the
    /// clear (a batch older than the baseline that arrives after it can only be skipped).
    baseline_pending: bool,
    snapshots: Vec<u64>,
    p_loss: u64,
    next_stray: Option<Instant>,
    next_junk: Option<Instant>,
    next_clear: Option<Instant>,
    stray_seq: u64,
    transcript: Transcript,
    stats: RunStats,
    failures: Vec<Failure>,
    out: MasterOutput,
    hashes: Vec<PageHash>,
    map: Vec<bool>,
    text: String,
    same_time_steps: u64,
    spins: u32,
    trace: bool,
    settle_cap: Instant,
    settle_keys: u64,
    verified_at_settle: u64,
    /// The time of each history position, in position order.
    record_times: Vec<(u64, Instant)>,
    /// The longest a delivered message's oldest event had existed when it arrived.
    evidence_lag: Duration,
    /// What is handed to the session when, and what is still pending for it.
    driver: delivery::Driver,
    /// Objects whose snapshot line was next to a foreign line (a careful session may skip it).
    shadowed: crate::util::IdSet,
    /// The horizon the current query is judged against.
    judge: Option<u64>,
    /// A restart the HTTP side scheduled (see [`HttpOptions::restart_after_keys`]).
    restart_at: Option<Instant>,
}

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
        let master = Master::new(opts.master.clone(), models.clone(), root.fork(1));
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
        let grace = if opts.session.reorder.max_held > 0 {
            grace
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
            driver: delivery::Driver::new(&root, &opts_driver, grace),
            shadowed: crate::util::IdSet::new(),
            judge: None,
            restart_at: None,
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

    fn report(mut self) -> Report {
        let c = self.sut.counters();
        let m = self.master.stats();
        let s = &mut self.stats;
        s.events = m.events;
        s.batches = m.batches;
        s.queue_drops = m.queue_drops;
        s.master_restarts = m.restarts;
        s.silent_removals = m.silent_removals;
        s.unknown_keyless = m.unknown_keyless;
        s.gaps = c.gaps;
        s.session_restarts = c.restarts;
        s.clears = c.clears_gap
            + c.clears_restart
            + c.clears_disconnected
            + c.clears_endpoint
            + c.clears_unreadable_removal
            + c.clears_requested
            + c.publisher_clears;
        s.resyncs = c.resyncs_completed;
        s.resyncs_failed = c.resyncs_failed;
        s.verify_rounds = c.verify_rounds;
        s.stale_keys_found = c.stale_keys_found;
        s.duplicates = c.duplicates + c.late;
        s.held = c.held;
        s.disconnects = c.disconnects;
        s.unreadable_removal_clears = c.clears_unreadable_removal;
        s.publisher_clears = c.publisher_clears;
        s.requested_clears = c.clears_requested;
        s.ignored_messages =
            c.stray_topic + c.stray_frame_count + c.malformed_seq + c.malformed_payload;
        s.evictions = c.evictions;
        s.virtual_time = Duration::from_nanos(self.now.as_nanos());
        s.net = self.net.stats();
        Report {
            options: self.opts,
            stats: self.stats,
            failures: self.failures,
            transcript: self.transcript.hash(),
        }
    }

    fn fail(&mut self, kind: FailureKind, detail: String) {
        if kind == FailureKind::FalseHit {
            self.stats.false_hits += 1;
        }
        if self.failures.len() < MAX_FAILURES {
            self.failures.push(Failure {
                at: self.now,
                kind,
                detail,
            });
        }
    }

    fn stopped(&self) -> bool {
        self.failures.len() >= MAX_FAILURES
    }

    fn enter_quiet(&mut self) {
        self.driver.faults_off();
        self.master.set_faults(false);
        self.net.set_faults(self.now, false);
        self.http_opts.fail = 0.0;
        self.http_opts.hang = 0.0;
        self.http_opts.slow = 0.0;
        self.http_opts.restart_after_keys = 0.0;
        self.http_opts.calm_down();
        self.next_stray = None;
        self.next_junk = None;
        self.next_clear = None;
        self.phase = Phase::Quiet {
            until: self.now + self.opts.quiet,
        };
    }

    fn enter_settle(&mut self) {
        self.driver.queries_off();
        self.master.set_acting(false);
        let c = self.sut.counters();
        // Long enough to reconnect and resync; with verification on, settling also lasts until
        // verification has checked twice as many keys as the index holds (see `step_once`).
        self.settle_keys = 2 * (c.objects + self.master.queued() as u64)
            + 2 * self.opts.session.verify_sample as u64;
        self.verified_at_settle = c.verified_keys;
        let settle = Duration::from_secs(2);
        self.phase = Phase::Settle {
            until: self.now + settle,
        };
        self.settle_cap = self.now + settle + Duration::from_secs(120);
    }

    fn phase_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Quiet { until } | Phase::Settle { until } => Some(until),
            _ => None,
        }
    }

    fn run_until(&mut self, stop: Option<Instant>) {
        while !self.stopped() && self.phase != Phase::Done {
            if self.phase == Phase::Chaos
                && (self.master.stats().events >= self.opts.events
                    || self.now.saturating_duration_since(Instant::ZERO) > CHAOS_CAP)
            {
                self.enter_quiet();
            }
            let stalled = self.stalled();
            let candidates = [
                self.net.next_at().filter(|_| !stalled),
                self.next_http(stalled).map(|(at, _)| at),
                self.sut.poll_timeout().filter(|_| !stalled),
                self.master.next_at(),
                self.next_stray,
                self.next_junk,
                self.next_clear.filter(|_| !stalled),
                self.phase_deadline(),
                self.driver.next_at(),
                self.restart_at,
            ];
            let Some(next) = candidates.into_iter().flatten().min() else {
                if stop.is_some() {
                    return;
                }
                self.phase = Phase::Done;
                return;
            };
            let at = next.max(self.now);
            if let Some(stop) = stop {
                if at > stop {
                    return;
                }
            }
            if at > self.now {
                self.now = at;
                self.same_time_steps = 0;
                self.spins = 0;
            } else {
                self.same_time_steps += 1;
                if self.same_time_steps > STEP_CAP {
                    self.fail(
                        FailureKind::StepCap,
                        format!("{STEP_CAP} steps without virtual time advancing"),
                    );
                    return;
                }
            }
            self.stats.steps += 1;
            self.step_once();
        }
    }

    /// Does one due thing at `self.now`.
    fn step_once(&mut self) {
        let now = self.now;
        let stalled = self.stalled();
        if !stalled {
            if let Some(item) = self.end_stall() {
                self.on_http(item);
                return;
            }
            if let Some(event) = self.net.poll(now) {
                self.on_net(event);
                return;
            }
        }
        if let Some((at, key)) = self.next_http(stalled) {
            if at <= now {
                let item = self.http.remove(&key).expect("the key is there");
                self.on_http(item);
                return;
            }
        }
        if stalled {
            // The master, the stray publisher and the phases go on; the driver does not.
        } else if self.sut.poll_timeout().is_some_and(|t| t <= now) {
            let fx = self.sut.handle_timeout(now);
            self.absorb(fx, None);
            if self.sut.poll_timeout().is_some_and(|t| t <= now) {
                self.spins += 1;
                if self.spins > SPIN_CAP {
                    let deadline = self.sut.poll_timeout();
                    self.fail(
                        FailureKind::BusyLoop,
                        format!(
                            "poll_timeout() = {deadline:?} stays at or before now = {now:?} after \
                             {SPIN_CAP} handle_timeout calls"
                        ),
                    );
                }
            }
            return;
        }
        if self.driver_step() {
            return;
        }
        if self.restart_at.is_some_and(|t| t <= now) {
            self.restart_at = None;
            self.act(Action::Restart);
            return;
        }
        if self.master.next_at().is_some_and(|t| t <= now) {
            let mut out = core::mem::take(&mut self.out);
            self.master.step(now, &mut out);
            self.absorb_master(&mut out);
            self.out = out;
            return;
        }
        if self.next_stray.is_some_and(|t| t <= now) {
            self.send_stray();
            let rate = self.opts.network.stray_per_sec;
            self.next_stray = self.other_rng.exponential(rate).map(|d| now + d);
            return;
        }
        if self.next_junk.is_some_and(|t| t <= now) {
            self.send_junk();
            let rate = self.opts.network.junk_per_sec;
            self.next_junk = self.other_rng.exponential(rate).map(|d| now + d);
            return;
        }
        if !stalled && self.next_clear.is_some_and(|t| t <= now) {
            let fx = self.sut.clear(now);
            self.absorb(fx, None);
            let rate = self.opts.session.requested_clears_per_sec;
            self.next_clear = self.other_rng.exponential(rate).map(|d| now + d);
            return;
        }
        match self.phase {
            Phase::Quiet { until } if until <= now => self.enter_settle(),
            Phase::Settle { until } if until <= now => {
                // Settled once the publisher and the network are empty, and verification has
                // had its rounds.
                let verified = self.sut.counters().verified_keys - self.verified_at_settle;
                let verifying = self.opts.session.verify && verified < self.settle_keys;
                let busy = self.master.queued() > 0 || self.net.in_flight() > 0 || verifying;
                if busy && now < self.settle_cap {
                    self.phase = Phase::Settle {
                        until: now + Duration::from_millis(10),
                    };
                } else {
                    self.phase = Phase::Done;
                }
            }
            _ => {}
        }
    }

    // ---- the master ----

    fn absorb_master(&mut self, out: &mut MasterOutput) {
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
            self.net.master_restarted(up);
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

    /// Executes and records a call's effects; `snapshot` is the position of the snapshot the
    /// call handed over, if any.
    fn absorb(&mut self, effects: Effects, snapshot: Option<u64>) {
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
                Effect::Connect { .. } => self.net.connect(self.now),
                Effect::Disconnect => self.net.disconnect(self.now),
                Effect::FetchSnapshot { request } => self.on_fetch(request),
                Effect::VerifyKeys { request, keys } => self.on_verify(request, keys),
                Effect::Cleared { reason, .. } if reason != ClearReason::PublisherCleared => {
                    self.driver.last_clear_at = self.now;
                    self.snapshots.clear();
                    self.p_loss = self.p_loss.max(self.master.position());
                    self.baseline_pending = true;
                }
                Effect::Resynced { .. } => {
                    if let Some(pos) = snapshot {
                        self.snapshots.push(pos);
                    }
                }
                _ => {}
            }
        }
        self.after_call();
    }

    fn after_call(&mut self) {
        let applied = self
            .sut
            .last_applied_seq()
            .and_then(|s| self.fed.get(s.0 as usize))
            .copied();
        self.applied_pos = applied.map_or(0, |(_, _, last)| last);
        if let Some((_, first, _)) = applied.filter(|_| self.baseline_pending) {
            // The first batch applied after the clear (or, when a window released several in
            // one call, the last of them: a wider excuse, liveness only).
            self.p_loss = self.p_loss.max(first.saturating_sub(1));
            self.baseline_pending = false;
        }
        let c = self.sut.counters();
        let s = self.opts.session.clone();
        if c.pages > s.index_cap as u64 {
            self.fail(
                FailureKind::Bounds,
                format!("{} pages held, cap {}", c.pages, s.index_cap),
            );
        }
        if c.held_batches > s.reorder.max_held as u64 {
            self.fail(
                FailureKind::Bounds,
                format!(
                    "{} batches held, max {}",
                    c.held_batches, s.reorder.max_held
                ),
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
