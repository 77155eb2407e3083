//! Sweeps: many seeds, one summary.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::ops::Range;
use std::time::Duration;

use crate::options::{Options, Preset, Worlds};

use crate::world::{run_catching, Report};

/// Figures summed over a sweep.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Summary {
    /// Runs.
    pub runs: u64,
    /// Seeds that failed, with their preset.
    pub failed: Vec<(u64, Preset)>,
    /// Runs per preset.
    pub presets: BTreeMap<Preset, u64>,
    /// Runs and failed runs per set of named worlds.
    pub worlds: BTreeMap<Worlds, (u64, u64)>,
    /// Runs that ended in the expected stall of an idle master without status counters
    /// (counted apart: neither passed nor failed).
    pub expected_stalls: u64,
    /// Pages the idle master's checks demanded as hits.
    pub idle_liveness_pages: u64,
    /// Events the masters created.
    pub events: u64,
    /// Batches sent.
    pub batches: u64,
    /// Events dropped by full queues.
    pub queue_drops: u64,
    /// Gaps the sessions saw.
    pub gaps: u64,
    /// Master restarts.
    pub master_restarts: u64,
    /// Restarts the sessions saw.
    pub session_restarts: u64,
    /// Clears.
    pub clears: u64,
    /// Resyncs completed.
    pub resyncs: u64,
    /// Verification rounds.
    pub verify_rounds: u64,
    /// Fetches that failed for their doubted lines (see `RunStats::fetches_unconfirmed`).
    pub fetches_unconfirmed: u64,
    /// Outages of `POST /batch_query_keys` (see
    /// [`crate::options::HttpOptions::query_keys_down`]).
    pub query_keys_outages: u64,
    /// Objects removed without an event.
    pub silent_removals: u64,
    /// Queries.
    pub queries: u64,
    /// Hit pages.
    pub hit_pages: u64,
    /// False hits.
    pub false_hits: u64,
    /// Stale hit pages (default tenant).
    pub stale_hits: u64,
    /// Stale hit pages (other tenants).
    pub stale_hits_other_tenants: u64,
    /// Pages checked for liveness.
    pub liveness_pages: u64,
    /// Runs whose liveness check was skipped (index evictions, or an expected stall).
    pub liveness_skipped: u64,
    /// Messages dropped, duplicated, truncated, corrupted, with a bad topic or frame count.
    pub net_faults: u64,
    /// Disconnects and partitions.
    pub link_faults: u64,
    /// Stray and junk messages sent.
    pub stray: u64,
    /// Stray and malformed messages the sessions ignored.
    pub ignored: u64,
    /// Claims excused because a change was still pending for the session (pages).
    pub excused_claims: u64,
    /// The longest excuse (the age of the oldest pending event behind an excused claim).
    pub longest_excuse: Duration,
    /// Restarts no stream signal could reveal (judged as silent removals).
    pub invisible_restarts: u64,
    /// Virtual time simulated.
    pub virtual_time: Duration,
    /// What the store clients did ([`crate::options::WorldKind::Segments`]).
    pub clients: crate::master::ClientStats,
    /// Claims beyond the watch's bound.
    pub beyond_bound: u64,
    /// The longest claim of an object unlisted because its client went away.
    pub longest_unlisted_claim: Duration,
    /// The longest claim held to the watch's bound, and its run's bound.
    pub longest_checked_claim: (Duration, Duration),
    /// Runs that failed a liveness check.
    pub liveness_failures: u64,
}

impl Summary {
    /// Adds one run.
    pub fn add(&mut self, r: &Report) {
        let s = &r.stats;
        self.runs += 1;
        if !r.passed() {
            self.failed.push((r.options.seed, r.options.preset));
        }
        *self.presets.entry(r.options.preset).or_default() += 1;
        let w = self.worlds.entry(r.options.worlds).or_default();
        w.0 += 1;
        w.1 += u64::from(!r.passed());
        self.expected_stalls += u64::from(r.passed() && r.stalled());
        self.idle_liveness_pages += s.idle_liveness_pages;
        self.events += s.events;
        self.batches += s.batches;
        self.queue_drops += s.queue_drops;
        self.gaps += s.gaps;
        self.master_restarts += s.master_restarts;
        self.session_restarts += s.session_restarts;
        self.clears += s.clears;
        self.resyncs += s.resyncs;
        self.verify_rounds += s.verify_rounds;
        self.fetches_unconfirmed += s.fetches_unconfirmed;
        self.query_keys_outages += s.query_keys_outages;
        self.silent_removals += s.silent_removals;
        self.queries += s.queries;
        self.hit_pages += s.hit_pages;
        self.false_hits += s.false_hits;
        self.stale_hits += s.stale_hits;
        self.stale_hits_other_tenants += s.stale_hits_other_tenants;
        self.liveness_pages += s.liveness_pages;
        self.liveness_skipped += u64::from(s.liveness_skipped);
        let n = &s.net;
        self.net_faults +=
            n.dropped + n.duplicated + n.truncated + n.corrupted + n.bad_topic + n.bad_frame_count;
        self.link_faults += n.disconnects + n.partitions + n.connect_fails + n.connect_hangs;
        self.stray += n.stray;
        self.ignored += s.ignored_messages;
        self.excused_claims += s.excused_claims;
        self.longest_excuse = self.longest_excuse.max(s.longest_excuse);
        self.invisible_restarts += s.invisible_restarts;
        self.virtual_time += s.virtual_time;
        let c = &s.clients;
        self.clients.closes += c.closes;
        self.clients.crashes += c.crashes;
        self.clients.stalls += c.stalls;
        self.clients.hidden += c.hidden;
        self.clients.restored += c.restored;
        self.clients.unmounted += c.unmounted;
        self.beyond_bound += s.beyond_bound;
        if s.longest_checked_claim.0 > self.longest_checked_claim.0 {
            self.longest_checked_claim = s.longest_checked_claim;
        }
        self.longest_unlisted_claim = self.longest_unlisted_claim.max(s.longest_unlisted_claim);
        self.liveness_failures += u64::from(
            r.failures
                .iter()
                .any(|f| f.kind == crate::world::FailureKind::Liveness),
        );
    }

    /// Renders the summary; with the wall time, also the events simulated per second.
    pub fn render(&self, wall: Option<Duration>) -> String {
        let mut s = String::new();
        let presets: Vec<String> = self
            .presets
            .iter()
            .map(|(p, n)| format!("{p}={n}"))
            .collect();
        let _ = writeln!(
            s,
            "runs {} ({}), passed {}, failed {}, expected stalls {}",
            self.runs,
            presets.join(" "),
            self.runs - self.failed.len() as u64 - self.expected_stalls,
            self.failed.len(),
            self.expected_stalls
        );
        let worlds: Vec<String> = self
            .worlds
            .iter()
            .map(|(w, (runs, failed))| format!("{w}={runs} ({failed} failed)"))
            .collect();
        let _ = writeln!(s, "worlds: {}", worlds.join("  "));
        let _ = writeln!(
            s,
            "events {}  batches {}  queue drops {}  silent removals {}  virtual time {:.1}s",
            self.events,
            self.batches,
            self.queue_drops,
            self.silent_removals,
            self.virtual_time.as_secs_f64()
        );
        let _ = writeln!(
            s,
            "gaps {}  restarts {} (master {})  clears {}  resyncs {}  verify rounds {}  \
             fetches failed unconfirmed {} (query-keys outages {})",
            self.gaps,
            self.session_restarts,
            self.master_restarts,
            self.clears,
            self.resyncs,
            self.verify_rounds,
            self.fetches_unconfirmed,
            self.query_keys_outages
        );
        let _ = writeln!(
            s,
            "network faults {}  link faults {}  stray/junk {}  ignored by sessions {}",
            self.net_faults, self.link_faults, self.stray, self.ignored
        );
        let _ = writeln!(
            s,
            "queries {}  hit pages {}  FALSE HITS {}  stale hits {} (other tenants {})  \
             liveness pages {} (idle {}, skipped runs {})",
            self.queries,
            self.hit_pages,
            self.false_hits,
            self.stale_hits,
            self.stale_hits_other_tenants,
            self.liveness_pages,
            self.idle_liveness_pages,
            self.liveness_skipped
        );
        let _ = writeln!(
            s,
            "excused claims {} (longest excuse {:.1} ms)  invisible restarts {}",
            self.excused_claims,
            self.longest_excuse.as_secs_f64() * 1e3,
            self.invisible_restarts
        );
        let c = &self.clients;
        let _ = writeln!(
            s,
            "segments: closed {}  crashed {}  stalled {}  objects hidden {} back {} unmounted {}  \
             BEYOND BOUND {}  longest unlisted claim {:.1} ms (held to the bound: {:.1} ms of \
             {:.1} ms)  liveness failures {}",
            c.closes,
            c.crashes,
            c.stalls,
            c.hidden,
            c.restored,
            c.unmounted,
            self.beyond_bound,
            self.longest_unlisted_claim.as_secs_f64() * 1e3,
            self.longest_checked_claim.0.as_secs_f64() * 1e3,
            self.longest_checked_claim.1.as_secs_f64() * 1e3,
            self.liveness_failures
        );
        if let Some(wall) = wall {
            let secs = wall.as_secs_f64().max(1e-9);
            let _ = writeln!(
                s,
                "wall {:.2}s  events/s simulated {:.0}",
                secs,
                self.events as f64 / secs
            );
        }
        s
    }
}

/// Runs `seeds` on `jobs` threads, each with the options `make` expands it to; returns the
/// reports in seed order.
pub fn run_seeds<F>(seeds: Range<u64>, jobs: usize, make: F) -> Vec<Report>
where
    F: Fn(u64) -> Options + Sync,
{
    run_seeds_by(seeds, jobs, |seed| run_catching(&make(seed)))
}

/// Runs `seeds` on `jobs` threads, each through `run`; returns the reports in seed order.
pub fn run_seeds_by<F>(seeds: Range<u64>, jobs: usize, run: F) -> Vec<Report>
where
    F: Fn(u64) -> Report + Sync,
{
    let jobs = jobs.max(1) as u64;
    let make = &run;
    let mut reports: Vec<Report> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..jobs)
            .map(|k| {
                let seeds = seeds.clone();
                scope.spawn(move || {
                    seeds
                        .filter(|s| s % jobs == k)
                        .map(make)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("a sweep thread panicked"))
            .collect()
    });
    reports.sort_by_key(|r| r.options.seed);
    reports
}
