//! The watch's bound (issue 27): a session that watches the master's signals stops claiming an
//! object of the default tenant within [`World::watch_bound`] of the moment the master stopped
//! listing it because its client went away (hidden at an active TTL, or gone with a segment
//! that closed; [`crate::oracle::Oracle::unlisted_since`]).
//!
//! # The bound, in one place
//! From the moment the master stops listing an object (its `/metrics` moves in the same
//! moment), a correct session:
//! 1. reads the signals within one watch interval, plus one HTTP request (latency both ways,
//!    the load, a slow answer);
//! 2. asks for a key list: the first asked after the change satisfies it, so a fetch already
//!    under way may have to end first; each fetch ends within twice the fetch timeout (its
//!    answer within the timeout, then the stream reaches the list's status point within the
//!    timeout again, or the session forgets and resyncs: misses, never a claim);
//! 3. a CPU-starved driver may hold the read's answer, the key list's answer and the
//!    snapshot's application for one stall each;
//! 4. with restarts, a read that reaches a down master fails, and the reads back off from the
//!    watch interval up to two intervals (the core's cap on a failed read's wait): the downtime
//!    and two intervals cover it;
//! 5. a lagging driver hands the session each timer late, so each step of the reconcile (its
//!    slices, each due at once after the last) waits for the lag: [`RECONCILE_STEPS`] lags.
//!
//! **Where it is checked**: in runs whose session watches (resync on, the watch on), for an
//! object the event history still holds (its claim is stale: only the watch can tell; an
//! object an event removed is judged by the safety rule), when the master stopped listing it
//! while the HTTP side neither failed nor hung: failed or hung reads may follow each other
//! without a bound (each waits up to two intervals, a hung one its timeout first), so in runs with
//! HTTP faults the check covers only what went unlisted after the faults stopped (the quiet
//! phase on). The final staleness check still holds every run to "none left at the end".

use std::time::Duration;

use hicache_index::StoreSignals;

use crate::master::ObjId;
use crate::system::System;

use super::report::FailureKind;
use super::state::World;

/// How long a slow HTTP answer is delayed (see [`World::http_fate`]).
const SLOW_ANSWER: Duration = Duration::from_millis(400);
/// The most watch intervals a failed read waits before the next (the core's
/// `FAILED_READ_INTERVALS`, in `core/src/session/watch.rs`).
const FAILED_READ_INTERVALS: u32 = 2;
/// The most timer steps a reconcile takes at the simulator's index sizes (page slots of an index
/// of 2^16 pages and the pages it restores, 4,096 a slice, with room to spare).
const RECONCILE_STEPS: u32 = 64;
/// Rounding of times, and the session's timer granularity.
const SLACK: Duration = Duration::from_millis(50);

impl<S: System> World<S> {
    /// Returns the watch's bound for this run (see the module docs), or `None` when the
    /// session does not watch.
    pub(super) fn watch_bound(&self) -> Option<Duration> {
        let s = &self.opts.session;
        let interval = s.status_check.filter(|_| s.resync && s.store_watch)?;
        let h = &self.opts.http;
        let slow = if h.slow > 0.0 {
            SLOW_ANSWER
        } else {
            Duration::ZERO
        };
        let request = 2 * h.latency.1 + h.load.1 + slow;
        let fetch = 2 * s.fetch_timeout;
        let d = &self.opts.driver;
        let stall = if d.stalls_per_sec > 0.0 || d.snapshot_stall > 0.0 {
            d.stall_len.1
        } else {
            Duration::ZERO
        };
        let m = &self.opts.master;
        let restarts =
            m.mix.restart > 0.0 || h.restart_after_keys > 0.0 || h.restart_after_status > 0.0;
        let restart = if restarts {
            m.restart_downtime.1 + FAILED_READ_INTERVALS * interval
        } else {
            Duration::ZERO
        };
        // A lagging driver takes each of a reconcile's slices late.
        let lag = RECONCILE_STEPS * d.timer_lag;
        Some(interval + request + 2 * fetch + 3 * stall + restart + lag + SLACK)
    }

    /// The master's `/metrics` as the simulated master answers it: every object the other
    /// worlds' actions remove without an event moves the unmount counter, as a client's
    /// segment leaving does (spec section 10); with store clients, their segments and liveness
    /// move the six families as the real master's do.
    pub(super) fn master_signals(&self) -> StoreSignals {
        let mut s = StoreSignals::default();
        let moved = self.master.silent_signals();
        let c = self.master.client_signals().unwrap_or_default();
        s.add(
            "master_unmount_segment_requests_total",
            (moved + c.unmounts) as f64,
        );
        if self.master.client_signals().is_some() {
            let families = [
                ("master_remount_segment_requests_total", c.remounts),
                (
                    "master_client_liveness_suspected_transitions_total",
                    c.suspected,
                ),
                (
                    "master_client_liveness_offline_transitions_total",
                    c.offline,
                ),
                ("master_client_liveness_recoveries_total", c.recoveries),
                ("master_client_liveness_suspected_clients", c.suspected_now),
            ];
            for (family, value) in families {
                s.add(family, value as f64);
            }
        }
        s
    }

    /// Reports whether a watching session has not yet been answered the master's signals as
    /// they stand (its reads may back off for up to two intervals after failures): settling
    /// waits for that answer, and then for the reconcile it asks for.
    pub(super) fn signals_unread(&self) -> bool {
        self.watch_bound().is_some() && self.signals_answered != Some(self.master_signals())
    }

    /// Holds a claim of `obj` (default tenant, justified) to the watch's bound.
    pub(super) fn check_unlisted(&mut self, obj: ObjId) {
        let Some(pos) = self.oracle.unlisted_since(obj) else {
            return;
        };
        if !self.oracle.e_now(obj) {
            return;
        }
        let since = self.time_of(pos);
        let age = self.now.saturating_duration_since(since);
        self.stats.longest_unlisted_claim = self.stats.longest_unlisted_claim.max(age);
        let Some(bound) = self.watch_bound() else {
            return;
        };
        let http_faults = self.opts.http.fail > 0.0
            || self.opts.http.hang > 0.0
            || self.opts.http.query_keys_down > 0.0;
        let checked = !http_faults || self.quiet_since.is_some_and(|q| q <= since);
        if checked && age > self.stats.longest_checked_claim.0 {
            self.stats.longest_checked_claim = (age, bound);
        }
        if checked && age > bound {
            self.stats.beyond_bound += 1;
            let detail = format!(
                "object {} is claimed {age:?} after the master stopped listing it (its client \
                 went away at {since:?}, position {pos}), beyond the watch's bound {bound:?}; \
                 health {:?}; {}",
                self.master.key(obj),
                self.sut.status(self.now).health,
                self.oracle.describe(obj),
            );
            self.fail(FailureKind::BeyondBound, detail);
        }
    }
}
