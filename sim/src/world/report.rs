//! What a run reports: its failures, its figures and the transcript hash.

use std::fmt::Write as _;
use std::time::Duration;

use hicache_index::Instant;

use crate::network::NetStats;
use crate::options::Options;

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
    /// A watching session claimed an object longer after the master stopped listing it than
    /// the watch's bound (issue 27, see `world/bound.rs`).
    BeyondBound,
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
    /// Confirmations of a key list's doubted lines that failed or timed out (each failed its
    /// fetch).
    pub confirm_failures: u64,
    /// Keys live batches stored during a resync that its key list lacked and the master no
    /// longer held when asked: removed.
    pub unlisted_removed: u64,
    /// Keys live batches stored during a resync that its key list lacked and that no answer of
    /// the master covered: claimed unasked.
    pub unlisted_unasked: u64,
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
    /// Times `POST /batch_query_keys` went down as the master began to serve a fetch (see
    /// [`crate::options::HttpOptions::query_keys_down`]).
    pub query_keys_outages: u64,
    /// Fetches that failed for their doubted lines (`ResyncFailure::Confirm`): questions that
    /// ended with some unanswered, more doubted lines than a fetch keeps, or a reconcile's
    /// that fell back so.
    pub fetches_unconfirmed: u64,
    /// Events of an unknown type without a key the master sent.
    pub unknown_keyless: u64,
    /// Liveness was skipped (the index evicted).
    pub liveness_skipped: bool,
    /// The run ended in an expected, visible stall: recovering because the master gives no
    /// status counters (a reordering stream cannot be placed without them).
    pub expected_stall: bool,
    /// Key lists read from the run before a restart while the HTTP side lagged behind it.
    pub stale_key_lists: u64,
    /// Publisher clears scheduled after a key list ([`crate::options::HttpOptions::clear_after_keys`])
    /// that came while the session was reconciling (the clear's event on its way to it).
    pub clears_while_reconciling: u64,
    /// The most foreign keys per SGLang object of the default tenant a key list held.
    pub foreign_per_object: u64,
    /// Final bursts with a lost tail before an idle master.
    pub tail_bursts: u64,
    /// Losses nothing had revealed when the idle master's check came (a burst's lost tail, or
    /// a restart of an idle master); with status counters they no longer excuse a claim then.
    pub unrevealed_at_idle: u64,
    /// Publisher clock jumps forward.
    pub clock_jumps: u64,
    /// Publisher clock steps back after a jump.
    pub clock_steps_back: u64,
    /// Master messages first handed after their place was passed (no grace: never to apply).
    pub handed_after_passed: u64,
    /// Pages the idle master's check demanded as hits.
    pub idle_liveness_pages: u64,
    /// Index evictions.
    pub evictions: u64,
    /// What the store clients did (segments closed, clients crashed and stalled, objects
    /// hidden, back after a stall, gone with a segment).
    pub clients: crate::master::ClientStats,
    /// The longest a claimed object of the default tenant had been unlisted because its
    /// client went away (any run, watched or not).
    pub longest_unlisted_claim: Duration,
    /// The longest claim held to the watch's bound, and the bound.
    pub longest_checked_claim: (Duration, Duration),
    /// Claims beyond the watch's bound (each a failure).
    pub beyond_bound: u64,
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
    /// Reports whether no check failed (an [expected stall](RunStats::expected_stall) is not a
    /// failure; a sweep counts it apart).
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }

    /// Reports whether the run ended in the expected stall of an idle master without status
    /// counters (see [`RunStats::expected_stall`]).
    pub fn stalled(&self) -> bool {
        self.stats.expected_stall
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
                "seed {} ({}, worlds {}) FAILED: {} failure(s)",
                self.options.seed,
                self.options.preset,
                self.options.worlds,
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
