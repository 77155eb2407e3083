//! The watch of the master's own signals ([`crate::signals`]): objects it stops or starts
//! listing without an event make the session reconcile with its key list (the watch's state:
//! `parts/watch.rs`).
//!
//! One rule: **a change seen is satisfied by the first key list asked for after it**; until
//! that list is applied, answers say [`Health::Reconciling`]. (Once per change, a key list
//! placed at a status point, a resync's or a reconcile's, does not count when it claims stores
//! it lacks that no answer of the master covered: they may be older than the list; see
//! `session/resync.rs`. Only a change seen at or before the list was asked for is held back.) The first
//! read is the baseline; a baseline taken while the index holds, or is fetching, a key list
//! that may be older than it asks for a reconcile too (the list may predate a change the
//! baseline already counts).

use crate::input::SignalsRequest;
use crate::signals::StoreSignals;

use super::parts::watch::WatchDue;
use super::*;

/// How many watch intervals a master without the signal families waits before it is asked
/// again (it may be upgraded, or a failover may bring one that has them).
const ABSENT_INTERVALS: u32 = 64;

/// A failed read is tried again within this many watch intervals: a read of `/metrics` is
/// cheap, and every interval more it waits is as much longer that a change the master already
/// shows goes unseen (the watch's bound counts it).
const FAILED_READ_INTERVALS: u32 = 2;

impl Session {
    /// The watch's timer: asks for a read, or ends one that was not answered in time.
    pub(super) fn watch_timeout(&mut self, now: Instant, fx: &mut Effects) {
        let (Some(interval), Some(limits)) = (self.watch_interval(), self.config.resync) else {
            return;
        };
        match self.resync.watch.handle_timeout(now) {
            Some(WatchDue::Read) => {
                let watch = &mut self.resync.watch;
                let request = SignalsRequest(watch.next_request);
                watch.next_request += 1;
                watch.next_at = None;
                watch.in_flight = Some((request, now + limits.fetch_timeout.max(interval)));
                fx.push(Command::ReadSignals { request });
            }
            Some(WatchDue::TimedOut) => self.signals_failed(now, interval),
            None => {}
        }
    }

    /// Takes the answer to a read of the master's signals ([`Input::Signals`]).
    pub(super) fn on_signals(
        &mut self,
        now: Instant,
        request: SignalsRequest,
        signals: Option<StoreSignals>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match (self.resync.watch.in_flight, self.watch_interval()) {
            (Some((current, _)), Some(interval)) if current == request => {
                self.resync.watch.in_flight = None;
                match signals {
                    None => self.signals_failed(now, interval),
                    Some(signals) => self.signals_read(now, interval, signals, &mut fx),
                }
            }
            _ => self.counters.unawaited_answers += 1,
        }
        self.update_health(&mut fx);
        fx
    }

    fn signals_read(
        &mut self,
        now: Instant,
        interval: Duration,
        signals: StoreSignals,
        fx: &mut Effects,
    ) {
        self.counters.signal_reads += 1;
        let holds_a_list =
            self.index.object_count() > 0 || !matches!(self.resync.state, ResyncState::Idle);
        let watch = &mut self.resync.watch;
        watch.failures.attempts = 0;
        if signals.is_empty() {
            if !watch.absent_said {
                watch.absent_said = true;
                fx.push(Report::SignalsAbsent);
            }
            watch.last = None;
            watch.next_at = Some(now + interval.saturating_mul(ABSENT_INTERVALS));
            return;
        }
        watch.next_at = Some(now + interval);
        let changed = match &watch.last {
            Some(last) => signals.changed_since(last),
            // The baseline: the index's key list may be older than it.
            None => None,
        };
        let baseline = watch.last.is_none();
        watch.last = Some(signals);
        if let Some(family) = changed {
            self.counters.store_changes += 1;
            fx.push(Report::StoreChanged { family });
        }
        if changed.is_some() || (baseline && holds_a_list) {
            self.resync.watch.want(now);
        }
    }

    fn signals_failed(&mut self, now: Instant, interval: Duration) {
        self.counters.signal_failures += 1;
        let watch = &mut self.resync.watch;
        let delay = watch.failures.delay(&BackoffConfig {
            initial: interval,
            max: interval.saturating_mul(FAILED_READ_INTERVALS),
            ..BackoffConfig::default()
        });
        watch.failures.attempts = watch.failures.attempts.saturating_add(1);
        watch.next_at = Some(now + delay);
    }

    /// The watch interval, when the watch is on (it needs resync: a change is met with a key
    /// list).
    fn watch_interval(&self) -> Option<Duration> {
        self.config.resync.and_then(|r| r.store_watch)
    }
}
