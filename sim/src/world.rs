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
//!   by the oracle's rule ([`crate::oracle`]); a page with an unjustified object is a false hit.
//!   With [`Options::exact`] (no faults) every answer must also equal the oracle's own answer.
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
    /// Batches not fed because they would provoke a known core bug (see
    /// [`crate::options::Avoid`]).
    pub avoided_continuations: u64,
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

#[derive(Clone, Debug)]
enum HttpItem {
    SnapshotServer {
        request: u64,
    },
    SnapshotAnswer {
        request: u64,
        watermark: Option<hicache_index::Watermark>,
        keys: Vec<ObjId>,
        pos: u64,
    },
    SnapshotFailed {
        request: u64,
    },
    VerifyServer {
        request: u64,
        keys: Vec<String>,
    },
    VerifyFailed {
        request: u64,
    },
    VerifyAnswer {
        request: u64,
        keys: Vec<String>,
        found: Vec<bool>,
    },
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
    fed: Vec<(u32, u64)>,
    fed_epoch: u32,
    applied_pos: u64,
    anchored: bool,
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
    quiet_cap: Instant,
    settle_keys: u64,
    verified_at_settle: u64,
    verified_while_settling: crate::util::IdSet,
    /// The time of each history position, in position order.
    record_times: Vec<(u64, Instant)>,
    /// The longest a delivered message's oldest event had existed when it arrived.
    evidence_lag: Duration,
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
            fed_epoch: 0,
            applied_pos: 0,
            anchored: false,
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
            quiet_cap: Instant::ZERO,
            settle_keys: 0,
            verified_at_settle: 0,
            verified_while_settling: crate::util::IdSet::new(),
            record_times: Vec::new(),
            evidence_lag: Duration::ZERO,
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
        self.master.set_faults(false);
        self.net.set_faults(self.now, false);
        self.http_opts.fail = 0.0;
        self.http_opts.hang = 0.0;
        self.http_opts.slow = 0.0;
        self.next_stray = None;
        self.next_junk = None;
        self.next_clear = None;
        self.phase = Phase::Quiet {
            until: self.now + self.opts.quiet,
        };
        self.quiet_cap = self.now + self.opts.quiet + Duration::from_secs(10);
    }

    fn enter_settle(&mut self) {
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
            let candidates = [
                self.net.next_at(),
                self.http.keys().next().map(|&(at, _)| at),
                self.sut.poll_timeout(),
                self.master.next_at(),
                self.next_stray,
                self.next_junk,
                self.next_clear,
                self.phase_deadline(),
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
        if let Some(event) = self.net.poll(now) {
            self.on_net(event);
            return;
        }
        if let Some((&key, _)) = self.http.iter().next() {
            if key.0 <= now {
                let item = self.http.remove(&key).expect("the first key is there");
                self.on_http(item);
                return;
            }
        }
        if self.sut.poll_timeout().is_some_and(|t| t <= now) {
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
        if self.next_clear.is_some_and(|t| t <= now) {
            let fx = self.sut.clear(now);
            self.absorb(fx, None);
            let rate = self.opts.session.requested_clears_per_sec;
            self.next_clear = self.other_rng.exponential(rate).map(|d| now + d);
            return;
        }
        match self.phase {
            Phase::Quiet { until } if until <= now => {
                let restarted = self.master.stats().restarts > 0;
                let unheard = self.master.is_down(now) || self.fed_epoch < self.master.epoch();
                let unanchored = !self.opts.http.watermark
                    && self.sut.health() != Health::Live
                    && now < self.quiet_cap;
                if (self.opts.avoid.idle_master_after_restart && restarted && unheard)
                    || (self.opts.avoid.idle_master_without_watermark && unanchored)
                {
                    // Keep serving (see `Avoid`).
                    self.phase = Phase::Quiet {
                        until: now + Duration::from_millis(10),
                    };
                } else {
                    self.enter_settle();
                }
            }
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
        if core::mem::take(&mut out.put) {
            for _ in 0..self.opts.queries_per_action {
                self.random_query();
            }
        }
    }

    // ---- the network ----

    fn on_net(&mut self, event: NetEvent) {
        let now = self.now;
        match event {
            NetEvent::Connected => {
                if self.trace {
                    eprintln!("{:>14} net connected", now.as_nanos());
                }
                self.anchored = false;
                let fx = self.sut.handle_connected(now);
                self.absorb(fx, None);
            }
            NetEvent::ConnectFailed | NetEvent::Disconnected => {
                let fx = self.sut.handle_disconnected(now);
                self.absorb(fx, None);
            }
            NetEvent::Deliver(msg) => self.deliver(msg),
        }
    }

    /// Returns when the history position `pos` was created.
    fn time_of(&self, pos: u64) -> Instant {
        let i = self.record_times.partition_point(|&(p, _)| p < pos);
        self.record_times.get(i).map_or(self.now, |&(_, at)| at)
    }

    fn deliver(&mut self, msg: Message) {
        if let Origin::Master(m) = &msg.origin {
            let lag = self.now - self.time_of(m.first_pos);
            self.evidence_lag = self.evidence_lag.max(lag);
        }
        if let Origin::Master(m) = msg.origin {
            if m.intact {
                if self.opts.avoid.restart_as_continuation && self.is_restart_continuation(&m) {
                    self.stats.avoided_continuations += 1;
                    self.p_loss = self.p_loss.max(m.last_pos);
                    return;
                }
                let i = m.seq as usize;
                if self.fed.len() <= i {
                    self.fed.resize(i + 1, (0, 0));
                }
                self.fed[i] = (m.epoch, m.last_pos);
                self.fed_epoch = self.fed_epoch.max(m.epoch);
                self.anchored = true;
                self.master.set_restarts_allowed(true);
            }
        }
        if self.trace {
            eprintln!("{:>14} deliver {:?}", self.now.as_nanos(), msg.origin);
        }
        let mut refs: [&[u8]; 4] = [&[]; 4];
        let n = msg.frames.len().min(4);
        for (r, f) in refs.iter_mut().zip(&msg.frames) {
            *r = f;
        }
        let fx = self.sut.feed(self.now, &refs[..n]);
        self.absorb(fx, None);
        if self.opts.exact {
            if let Origin::Master(m) = msg.origin {
                if m.intact {
                    self.check_batch_objects(&msg.frames);
                }
            }
        }
    }

    /// Reports whether a batch of a newer master would be applied as the continuation of the
    /// old master's last applied batch (see [`crate::options::Avoid`]).
    fn is_restart_continuation(&self, m: &crate::network::MasterMeta) -> bool {
        let Some(last) = self.sut.last_applied_seq() else {
            return false;
        };
        let Some(&(epoch, _)) = self.fed.get(last.0 as usize) else {
            return false;
        };
        m.epoch > epoch && m.seq == last.0.wrapping_add(1)
    }

    /// Exact mode: after a batch, the index holds each of its objects exactly when the oracle
    /// says so.
    fn check_batch_objects(&mut self, frames: &[Vec<u8>]) {
        let Ok(batch) = hicache_index::decode(&[&frames[0], &frames[1], &frames[2]]) else {
            return;
        };
        let since = self.p_loss.max(self.net.lost_upto());
        for event in &batch.events {
            let (Some(key), Some(tenant)) = (event.object_key, event.tenant_id) else {
                continue;
            };
            let Some(t) = TENANTS.iter().position(|&n| n == tenant) else {
                continue;
            };
            let Some(obj) = self.master.find_object(t as u8, key) else {
                continue;
            };
            let want = self.oracle.e_stored_between(obj, since, self.applied_pos);
            if let Some(got) = self.sut.holds_object(tenant, key) {
                if got != want {
                    let detail = format!(
                        "after batch {:?}, the index holds {key} of {tenant}: {got}, the oracle \
                         says {want} (applied position {}, since {since}); {}",
                        batch.seq,
                        self.applied_pos,
                        self.oracle.describe(obj)
                    );
                    self.fail(FailureKind::Mismatch, detail);
                    return;
                }
            }
        }
    }

    fn send_stray(&mut self) {
        let pages = self.master.pages().len();
        if pages == 0 {
            return;
        }
        let mut events = Vec::new();
        for _ in 0..self.other_rng.range(1, 4) {
            let page = self.master.page(self.other_rng.index(pages) as PageId);
            let obj = page.first_obj + self.other_rng.below(u64::from(page.objs)) as u32;
            let mut ev = OwnedEvent::new(
                hicache_index::EventKind::Stored,
                self.master.key(obj).to_owned(),
            );
            ev.tenant_id = Some(TENANTS[page.tenant as usize].to_owned());
            events.push(ev);
        }
        let batch = OwnedBatch {
            seq: hicache_index::Seq(self.stray_seq),
            timestamp: Timestamp::Seconds(1.764e9),
            dp_rank: None,
            events,
        };
        self.stray_seq += 1;
        let topic = b"kv-events@vllm-worker".to_vec();
        let frames = vec![
            topic,
            batch.seq.0.to_be_bytes().to_vec(),
            encode_payload(&batch, self.opts.master.flavor),
        ];
        self.net.send_other(
            self.now,
            Message {
                frames,
                origin: Origin::Stray,
            },
        );
    }

    fn send_junk(&mut self) {
        let n = [1usize, 2, 4][self.other_rng.index(3)];
        let frames = (0..n)
            .map(|_| {
                let len = self.other_rng.index(12);
                (0..len).map(|_| self.other_rng.next_u64() as u8).collect()
            })
            .collect();
        self.net.send_other(
            self.now,
            Message {
                frames,
                origin: Origin::Junk,
            },
        );
    }

    // ---- HTTP ----

    fn http_latency(&mut self) -> Duration {
        let (lo, hi) = self.http_opts.latency;
        self.http_rng.duration(lo, hi)
    }

    fn http_at(&mut self, at: Instant, item: HttpItem) {
        self.http_counter += 1;
        self.http.insert((at, self.http_counter), item);
    }

    /// Decides a request's fate: `None` = never answers; `Some(false)` = fails; `Some(true)` =
    /// reaches the server, at the returned time.
    fn http_fate(&mut self) -> (Option<bool>, Instant) {
        let lat = self.http_latency();
        let o = self.http_opts.clone();
        if self.http_rng.chance(o.hang) {
            return (None, self.now);
        }
        if self.http_rng.chance(o.fail) {
            return (Some(false), self.now + lat);
        }
        let slow = if self.http_rng.chance(o.slow) {
            Duration::from_millis(400)
        } else {
            Duration::ZERO
        };
        (Some(true), self.now + lat + slow)
    }

    fn on_fetch(&mut self, request: u64) {
        match self.http_fate() {
            (None, _) => {}
            (Some(false), at) => self.http_at(at, HttpItem::SnapshotFailed { request }),
            (Some(true), at) => self.http_at(at, HttpItem::SnapshotServer { request }),
        }
    }

    fn on_verify(&mut self, request: u64, keys: Vec<String>) {
        if matches!(self.phase, Phase::Settle { .. }) {
            for key in &keys {
                if let Some(obj) = self.master.find_object(0, key) {
                    self.verified_while_settling.insert(obj);
                }
            }
        }
        match self.http_fate() {
            (None, _) => {}
            (Some(false), at) => self.http_at(at, HttpItem::VerifyFailed { request }),
            (Some(true), at) => self.http_at(at, HttpItem::VerifyServer { request, keys }),
        }
    }

    fn on_http(&mut self, item: HttpItem) {
        let now = self.now;
        match item {
            HttpItem::SnapshotServer { request } => {
                if self.opts.avoid.restart_before_first_batch {
                    // No restart until the stream this snapshot must be anchored to delivers a
                    // batch (see `Avoid`): a session may start its stream over on any snapshot
                    // (a watermark below what it applied means the master restarted).
                    self.anchored = false;
                    self.master.set_restarts_allowed(false);
                }
                let lat = self.http_latency();
                if self.master.is_down(now) {
                    self.http_at(now + lat, HttpItem::SnapshotFailed { request });
                } else {
                    // `GET /kv_events/status` first, then `GET /get_all_keys`.
                    let watermark = self
                        .http_opts
                        .watermark
                        .then(|| hicache_index::Watermark::from(self.master.watermark()));
                    let keys = self.master.all_keys();
                    let pos = self.master.position();
                    self.http_at(
                        now + lat,
                        HttpItem::SnapshotAnswer {
                            request,
                            watermark,
                            keys,
                            pos,
                        },
                    );
                }
            }
            HttpItem::SnapshotAnswer {
                request,
                watermark,
                keys,
                pos,
            } => {
                let master = &self.master;
                let fx = self.sut.handle_snapshot(
                    now,
                    request,
                    watermark,
                    keys.iter().map(|&o| master.key(o)),
                );
                self.absorb(fx, Some(pos));
            }
            HttpItem::SnapshotFailed { request } => {
                let fx = self.sut.handle_snapshot_failed(now, request);
                self.absorb(fx, None);
            }
            HttpItem::VerifyFailed { request } => {
                let fx = self.sut.handle_verify_failed(now, request);
                self.absorb(fx, None);
            }
            HttpItem::VerifyServer { request, keys } => {
                if self.master.is_down(now) {
                    let lat = self.http_latency();
                    self.http_at(now + lat, HttpItem::VerifyFailed { request });
                    return;
                }
                let found = self.master.batch_query(&keys);
                let lat = self.http_latency();
                self.http_at(
                    now + lat,
                    HttpItem::VerifyAnswer {
                        request,
                        keys,
                        found,
                    },
                );
            }
            HttpItem::VerifyAnswer {
                request,
                keys,
                found,
            } => {
                let fx = self.sut.handle_verify_result(
                    now,
                    request,
                    keys.iter().map(String::as_str).zip(found.iter().copied()),
                );
                self.absorb(fx, None);
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
                    self.snapshots.clear();
                    self.p_loss = self.p_loss.max(self.master.position());
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
        self.applied_pos = self
            .sut
            .last_applied_seq()
            .and_then(|s| self.fed.get(s.0 as usize))
            .map_or(0, |&(_, pos)| pos);
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

    // ---- queries and the safety check ----

    fn model_name(&self, model: u8) -> Option<&str> {
        if model == 0 && self.opts.master.default_model {
            None
        } else {
            Some(self.models[model as usize].name.as_str())
        }
    }

    fn random_query(&mut self) {
        let Some(req) = self.master.recent_request(&mut self.query_rng).cloned() else {
            return;
        };
        let req: &Request = &req;
        let total = req.pages.len();
        let n = if total > 1 && self.query_rng.chance(0.2) {
            self.query_rng.range(1, total as u64) as usize
        } else {
            total
        };
        let form = self.query_rng.below(10);
        self.hashes.clear();
        for &p in &req.pages[..n] {
            self.hashes.push(self.master.page(p).hash);
        }
        if form < 6 {
            self.ask(req, n, QueryForm::Hashes);
        } else if form < 9 {
            self.ask(req, n, QueryForm::Tokens);
        } else {
            self.ask(req, n, QueryForm::Map);
        }
    }

    fn ask(&mut self, req: &Request, n: usize, form: QueryForm) {
        let spec = &self.models[req.model as usize];
        let ps = spec.layout.page_size as usize;
        let eagle = usize::from(spec.layout.eagle);
        let tokens_len = if n == req.pages.len() {
            req.tokens.len()
        } else {
            n * ps + eagle
        };
        let tokens = &req.tokens[..tokens_len];
        let narrow: Option<Vec<u32>> = if form == QueryForm::Tokens && self.query_rng.chance(0.5) {
            tokens.iter().map(|&t| u32::try_from(t).ok()).collect()
        } else {
            None
        };
        let pages = match form {
            QueryForm::Hashes | QueryForm::Map => Pages::Hashes(&self.hashes),
            QueryForm::Tokens => Pages::Tokens {
                tokens: match &narrow {
                    Some(t) => Tokens::U32(t),
                    None => Tokens::U64(tokens),
                },
                namespace: req.namespace(),
            },
        };
        let model = if req.model == 0 && self.opts.master.default_model {
            None
        } else {
            Some(self.models[req.model as usize].name.as_str())
        };
        let lookup = Lookup {
            tenant: TENANTS[req.tenant as usize],
            model,
            pages,
        };
        let answer = if form == QueryForm::Map {
            self.map.clear();
            self.map.resize(n, false);
            self.sut.query_map(&lookup, &mut self.map)
        } else {
            self.sut.query(&lookup)
        };
        match answer {
            Ok(hits) => {
                self.record_answer(&hits);
                if hits.total_pages != n {
                    self.fail(
                        FailureKind::Mismatch,
                        format!("{n} pages asked, {} counted", hits.total_pages),
                    );
                }
                self.check_hits(req.model, &req.pages[..n], &hits, form == QueryForm::Map);
            }
            Err(e) => {
                let detail = format!("{e:?} for {lookup:?}");
                self.fail(FailureKind::QueryError, detail);
            }
        }
    }

    fn record_answer(&mut self, hits: &Hits) {
        self.transcript.number(
            (hits.prefix_pages as u64) << 32 | (hits.total_pages as u64) << 8 | hits.trust as u64,
        );
        self.stats.queries += 1;
        self.stats.hit_pages += hits.prefix_pages as u64;
    }

    /// Checks one answer: every required object of every reported page is justified.
    fn check_hits(&mut self, model: u8, pages: &[PageId], hits: &Hits, with_map: bool) {
        let prefix = hits.prefix_pages;
        if prefix > pages.len() {
            self.fail(
                FailureKind::Mismatch,
                format!("{prefix} hit pages reported for {} pages", pages.len()),
            );
            return;
        }
        for (i, &page) in pages.iter().enumerate().take(prefix) {
            // The objects page `i` needs: every all-pages pool, and the trailing pools whose
            // window covers it.
            let mut required = 0u128;
            for plan in &self.plans[model as usize] {
                let needed = match plan.policy {
                    HitPolicy::AllPages => true,
                    HitPolicy::TrailingPages(w) => i + (w.max(1) as usize) >= prefix,
                };
                if needed {
                    for slot in plan.start..plan.end.min(128) {
                        required |= 1 << slot;
                    }
                }
            }
            let slots = (0..128).filter(move |&slot| required & (1 << slot) != 0);
            self.check_page(page, slots, "prefix");
        }
        if with_map {
            for (i, &page) in pages.iter().enumerate() {
                if self.map.get(i) == Some(&true) {
                    let objs = self.master.page(page).objs as usize;
                    self.check_page(page, 0..objs, "map");
                }
            }
        }
        if self.opts.exact && self.snapshots.iter().all(|&s| s <= self.applied_pos) {
            let want = self.expected_prefix(model, pages);
            if want != prefix {
                self.fail(
                    FailureKind::Mismatch,
                    format!(
                        "prefix {prefix}, oracle says {want} ({} pages, applied position {})",
                        pages.len(),
                        self.applied_pos
                    ),
                );
            }
        }
    }

    /// Checks the objects `slots` of a page reported complete; counts staleness.
    fn check_page(&mut self, page: PageId, slots: impl Iterator<Item = usize>, how: &str) {
        let info = *self.master.page(page);
        let default = info.tenant == 0;
        let mut stale = false;
        for slot in slots {
            let obj = info.first_obj + slot as u32;
            if !self
                .oracle
                .justified(obj, self.applied_pos, &self.snapshots, default)
            {
                let detail = format!(
                    "{how} hit on page {} of tenant {:?} model {:?}: object {} is not justified; \
                     applied position {} (seq {:?}), snapshots {:?}, master position {}, health \
                     {:?}; {}",
                    info.hash,
                    TENANTS[info.tenant as usize],
                    self.models[info.model as usize].name,
                    self.master.key(obj),
                    self.applied_pos,
                    self.sut.last_applied_seq(),
                    self.snapshots,
                    self.master.position(),
                    self.sut.health(),
                    self.oracle.describe(obj),
                );
                self.fail(FailureKind::FalseHit, detail);
                return;
            }
            stale |= !self.oracle.t_now(obj);
            self.check_confirmed(obj);
        }
        if stale {
            if default {
                self.stats.stale_hits += 1;
            } else {
                self.stats.stale_hits_other_tenants += 1;
            }
        }
    }

    /// Checks that a hit's object was present at the master at or after the time the index
    /// reports its content confirmed (less the oldest evidence a message delivered, and a
    /// millisecond for the gauge's rounding).
    fn check_confirmed(&mut self, obj: ObjId) {
        let Some(until) = self.oracle.t_present_until(obj) else {
            return;
        };
        let gone = self.time_of(until);
        let age = self.sut.counters_at(self.now).unconfirmed_ms;
        let claimed = Instant::from_nanos(
            self.now
                .as_nanos()
                .saturating_sub(age.saturating_add(1).saturating_mul(1_000_000)),
        );
        if gone + self.evidence_lag < claimed {
            let detail = format!(
                "object {} left the master at {gone:?} (position {until}), but the index reports \
                 its content confirmed {age} ms before {:?}; oldest evidence delivered {:?}; {}",
                self.master.key(obj),
                self.now,
                self.evidence_lag,
                self.oracle.describe(obj),
            );
            self.fail(FailureKind::Unconfirmed, detail);
        }
    }

    /// The oracle's own answer: the prefix the index must report when it holds exactly the event
    /// history at the applied position, learned since the last loss (exact mode has no fault, so
    /// the only loss is what was sent before the first connection).
    fn expected_prefix(&self, model: u8, pages: &[PageId]) -> usize {
        let plans = &self.plans[model as usize];
        let mut runs = vec![0usize; plans.len()];
        let mut prefix = 0;
        for (i, &page) in pages.iter().enumerate() {
            let first = self.master.page(page).first_obj;
            let since = self.p_loss.max(self.net.lost_upto());
            let present = |p: &PoolPlan| {
                (p.start..p.end).all(|s| {
                    self.oracle
                        .e_stored_between(first + s as u32, since, self.applied_pos)
                })
            };
            let mut all = true;
            for (k, plan) in plans.iter().enumerate() {
                let ok = present(plan);
                match plan.policy {
                    HitPolicy::AllPages => all &= ok,
                    HitPolicy::TrailingPages(_) => runs[k] = if ok { runs[k] + 1 } else { 0 },
                }
            }
            if !all {
                break;
            }
            let n = i + 1;
            let trailing_ok = plans.iter().zip(&runs).all(|(p, &run)| match p.policy {
                HitPolicy::AllPages => true,
                HitPolicy::TrailingPages(w) => run >= (w.max(1) as usize).min(n),
            });
            if trailing_ok {
                prefix = n;
            }
        }
        prefix
    }

    // ---- the end ----

    fn final_checks(&mut self) {
        let health = self.sut.health();
        if health != Health::Live {
            self.fail(
                FailureKind::NotLive,
                format!("health {health:?} after the quiet period"),
            );
            return;
        }
        let evictions = self.sut.counters().evictions;
        self.stats.liveness_skipped = evictions > 0;
        let p_loss = self.p_loss.max(self.net.lost_upto());
        let resync = self.opts.session.resync;
        let verify = self.opts.session.verify;
        let mut stale_left = 0u64;
        let mut first_stale = None;
        for page in 0..self.master.pages().len() as PageId {
            let info = *self.master.page(page);
            let objs = info.first_obj..info.first_obj + u32::from(info.objs);
            let lookup = Lookup {
                tenant: TENANTS[info.tenant as usize],
                model: self.model_name(info.model),
                pages: Pages::Hashes(core::slice::from_ref(&info.hash)),
            };
            let mut map = [false];
            let hit = match self.sut.query_map(&lookup, &mut map) {
                Ok(_) => map[0],
                Err(e) => {
                    self.fail(FailureKind::QueryError, format!("{e:?}"));
                    return;
                }
            };
            if hit {
                // The safety sweep: every object of a complete page is justified.
                self.check_page(page, 0..info.objs as usize, "final");
                let lenient = self.opts.avoid.verify_round_ends_mid_page;
                let counted = |o: ObjId| {
                    !self.oracle.t_now(o) && (!lenient || self.verified_while_settling.contains(o))
                };
                if info.tenant == 0 && objs.clone().any(counted) {
                    stale_left += 1;
                    first_stale.get_or_insert(page);
                }
            }
            if evictions > 0 {
                continue;
            }
            let present = objs
                .clone()
                .all(|o| self.oracle.t_now(o) && self.oracle.e_now(o));
            let eligible = present
                && ((info.tenant == 0 && resync)
                    || objs.clone().all(|o| self.oracle.last_store(o) > p_loss));
            if !eligible {
                continue;
            }
            self.stats.liveness_pages += 1;
            if !hit {
                let mut held_text = String::new();
                let detail = format!(
                    "page {} of tenant {:?} model {:?} is present at the master and was stored \
                     after the last loss (position {p_loss}; last stores {:?}), but is a miss",
                    info.hash,
                    TENANTS[info.tenant as usize],
                    self.models[info.model as usize].name,
                    objs.clone()
                        .map(|o| self.oracle.last_store(o))
                        .collect::<Vec<_>>(),
                );
                let mut held = Vec::new();
                for o in objs {
                    let holds = self
                        .sut
                        .holds_object(TENANTS[info.tenant as usize], self.master.key(o));
                    held.push(holds);
                    if holds == Some(false) {
                        held_detail(&mut held_text, o, &self.oracle);
                    }
                }
                let detail = format!("{detail}; the index holds {held:?}{held_text}");
                self.fail(FailureKind::Liveness, detail);
                if self.stopped() {
                    return;
                }
            }
        }
        if verify && stale_left > 0 {
            let mut detail =
                format!("{stale_left} stale pages of the default tenant still hit after settling");
            if let Some(page) = first_stale {
                let info = *self.master.page(page);
                let _ = write!(detail, "; first {}:", info.hash);
                for o in info.first_obj..info.first_obj + u32::from(info.objs) {
                    let key = self.master.key(o);
                    let _ = write!(
                        detail,
                        " {key} (held {:?}, present {}; {})",
                        self.sut.holds_object(TENANTS[0], key),
                        self.oracle.t_now(o),
                        self.oracle.describe(o)
                    );
                }
            }
            self.fail(FailureKind::Staleness, detail);
        }
    }
}

fn held_detail(out: &mut String, obj: ObjId, oracle: &Oracle) {
    let _ = write!(out, "; missing object {obj}: {}", oracle.describe(obj));
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum QueryForm {
    Hashes,
    Tokens,
    Map,
}
