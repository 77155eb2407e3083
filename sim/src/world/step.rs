//! The loop: virtual time jumps to the earliest pending thing and one due thing is done per
//! step; the phases (chaos, quiet, settle) change on the way.

use std::time::Duration;

use hicache_index::{Health, Input, Instant};

use crate::master::Action;
use crate::options::{TailKind, TailLoss};
use crate::system::System;

use super::report::FailureKind;
use super::state::{Phase, World};

/// How long after the master went idle and reachable the index must be live and exact.
pub const IDLE_BOUND: Duration = Duration::from_secs(5);

/// Steps at one virtual instant before the run is declared stuck.
const STEP_CAP: u64 = 200_000;
/// `handle_timeout` calls in a row that leave the deadline in the past.
const SPIN_CAP: u32 = 64;
/// The longest a chaos phase may last in virtual time.
const CHAOS_CAP: Duration = Duration::from_secs(600);

impl<S: System> World<S> {
    pub(super) fn enter_quiet(&mut self) {
        self.driver.faults_off();
        self.master.set_faults(false);
        self.master.end_http_lag();
        self.net.set_faults(self.now, false);
        self.http_opts.fail = 0.0;
        self.http_opts.hang = 0.0;
        self.http_opts.slow = 0.0;
        self.http_opts.restart_after_keys = 0.0;
        self.http_opts.clear_after_keys = 0.0;
        self.clear_at = None;
        self.http_opts.restart_after_status = 0.0;
        // No new outage of `/batch_query_keys`; one under way runs its course (at most
        // 1.5 s), so a fetch of the quiet phase may fail with its doubted lines unanswered.
        self.http_opts.query_keys_down = 0.0;
        self.http_opts.calm_down();
        self.next_stray = None;
        self.next_junk = None;
        self.next_clear = None;
        self.quiet_since = Some(self.now);
        self.phase = Phase::Quiet {
            until: self.now + self.opts.quiet,
        };
    }

    /// Ends the chaos phase of a [`crate::options::WorldKind::TailLossIdle`] run: a burst of
    /// puts against the burst's queue while faults are still on, its tail lost, and then the
    /// quiet phase with the master idle.
    pub(super) fn enter_tail(&mut self, tail: TailLoss) {
        self.stats.tail_bursts += 1;
        self.master.set_queue_capacity(tail.queue_capacity);
        for _ in 0..tail.puts {
            self.act(Action::Put);
        }
        self.enter_quiet();
        self.master.set_acting(false);
        match tail.kind {
            TailKind::Overflow => {}
            TailKind::LostMessages(n) => self.tail_lose = n,
            TailKind::Restart => {
                let after = self
                    .world_rng
                    .duration(Duration::from_millis(1), Duration::from_millis(20));
                self.restart_at = Some(self.now + after);
            }
        }
    }

    /// Notes whether the master is idle and reachable now: faults off, not acting, nothing
    /// queued, up, no restart due, every store client heartbeating with its segment mounted.
    pub(super) fn watch_idle(&mut self) {
        if self.idle_checked {
            return;
        }
        let idle = matches!(self.phase, Phase::Quiet { .. } | Phase::Settle { .. })
            && !self.master.is_acting()
            && self.master.queued() == 0
            && !self.master.is_down(self.now)
            && !self.master.clients_busy()
            && self.restart_at.is_none();
        if idle {
            self.idle_since.get_or_insert(self.now);
        } else {
            self.idle_since = None;
        }
    }

    /// Returns when the idle master's check is due (see [`IDLE_BOUND`]).
    pub(super) fn idle_deadline(&self) -> Option<Instant> {
        self.idle_since
            .filter(|_| !self.idle_checked)
            .map(|t| t + IDLE_BOUND)
    }

    pub(super) fn enter_settle(&mut self) {
        self.driver.queries_off();
        self.master.set_acting(false);
        let c = self.sut.status(self.now).counters;
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

    pub(super) fn phase_deadline(&self) -> Option<Instant> {
        match self.phase {
            Phase::Quiet { until } | Phase::Settle { until } => Some(until),
            _ => None,
        }
    }

    /// When the driver hands the session its next timer: when it is due, plus the driver's lag
    /// ([`crate::options::DriverOptions::timer_lag`]), counted from the last timer handed when
    /// it was due before that (a deadline "at once", as each of a reconcile's slices asks).
    fn timer_due(&self) -> Option<Instant> {
        let lag = self.opts.driver.timer_lag;
        let due = self.sut.poll_timeout()?;
        if lag.is_zero() {
            return Some(due);
        }
        Some(due.max(self.last_timer) + lag)
    }

    pub(super) fn run_until(&mut self, stop: Option<Instant>) {
        while !self.stopped() && self.phase != Phase::Done {
            if self.phase == Phase::Chaos
                && (self.master.stats().events >= self.opts.events
                    || self.now.saturating_duration_since(Instant::ZERO) > CHAOS_CAP)
            {
                match self.opts.tail.clone() {
                    Some(tail) => self.enter_tail(tail),
                    None => self.enter_quiet(),
                }
            }
            self.watch_idle();
            let stalled = self.stalled();
            let candidates = [
                self.net.next_at().filter(|_| !stalled),
                self.next_http(stalled).map(|(at, _)| at),
                self.timer_due().filter(|_| !stalled),
                self.master.next_at(),
                self.next_stray,
                self.next_junk,
                self.next_clear.filter(|_| !stalled),
                self.phase_deadline(),
                self.driver.next_at(),
                self.restart_at,
                self.clear_at,
                self.idle_deadline(),
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
    pub(super) fn step_once(&mut self) {
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
        } else if self.timer_due().is_some_and(|t| t <= now) {
            self.last_timer = now;
            let fx = self.sut.handle(now, Input::Timeout);
            self.absorb(fx, None);
            if self.timer_due().is_some_and(|t| t <= now) {
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
        if self.clear_at.is_some_and(|t| t <= now) {
            self.clear_at = None;
            if self.sut.status(now).health == Health::Reconciling {
                self.stats.clears_while_reconciling += 1;
            }
            self.act(Action::ClearedEvent);
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
            let fx = self.sut.handle(now, Input::Clear);
            self.absorb(fx, None);
            let rate = self.opts.session.requested_clears_per_sec;
            self.next_clear = self.other_rng.exponential(rate).map(|d| now + d);
            return;
        }
        if self.idle_deadline().is_some_and(|t| t <= now) {
            self.idle_checks();
            return;
        }
        match self.phase {
            Phase::Quiet { until } if until <= now => self.enter_settle(),
            Phase::Settle { until } if until <= now => {
                // Settled once the publisher and the network are empty, the idle master was
                // checked, and verification has had its rounds.
                let verified =
                    self.sut.status(self.now).counters.verified_keys - self.verified_at_settle;
                let verifying = self.opts.session.verify && verified < self.settle_keys;
                // A reconcile asked for by the master's signals (its silent removals) is under
                // way: settled once it is applied.
                // So is a read of the signals as they stand: after failed reads the watch
                // backs off for up to two intervals.
                let reconciling = self.sut.status(self.now).health == Health::Reconciling
                    || self.signals_unread();
                let busy = self.master.queued() > 0
                    || self.net.in_flight() > 0
                    || verifying
                    || reconciling
                    || !self.idle_checked;
                if busy && now < self.settle_cap {
                    self.phase = Phase::Settle {
                        until: now + Duration::from_millis(10),
                    };
                } else {
                    if !self.idle_checked {
                        // The master never stayed idle and reachable this long: check anyway.
                        self.idle_checks();
                    }
                    self.phase = Phase::Done;
                }
            }
            _ => {}
        }
    }

    // ---- the master ----
}
