//! The state of the watch of the master's signals: its next read, the one in flight, what the
//! last answer said, and the change waiting for a key list (what the session does with it:
//! `session/watch.rs`).

use crate::input::SignalsRequest;
use crate::signals::StoreSignals;
use crate::time::Instant;

use super::link::Backoff;

/// The watch: the next read, the one in flight, what the last answer said, and the change
/// waiting for a key list.
#[derive(Debug)]
pub(in crate::session) struct Watch {
    pub(in crate::session) next_at: Option<Instant>,
    /// The read under way and when it is given up.
    pub(in crate::session) in_flight: Option<(SignalsRequest, Instant)>,
    pub(in crate::session) next_request: u64,
    /// The last answer that listed the families (kept across connections: a change while
    /// disconnected is still a change).
    pub(in crate::session) last: Option<StoreSignals>,
    /// [`Report::SignalsAbsent`](crate::effect::Report::SignalsAbsent) was said.
    pub(in crate::session) absent_said: bool,
    /// The backoff of reads that failed in a row.
    pub(in crate::session) failures: Backoff,
    /// When the latest change was seen that no key list asked for since has satisfied (a list
    /// asked after it satisfies every earlier one too).
    pub(in crate::session) wanted: Option<Instant>,
    /// The change (as `wanted`) a key list held back once already.
    pub(in crate::session) held: Option<Instant>,
}

/// What the watch's timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum WatchDue {
    /// Read the signals.
    Read,
    /// The read under way was not answered in time.
    TimedOut,
}

impl Watch {
    pub(super) fn new(seed: u64) -> Watch {
        Watch {
            next_at: None,
            in_flight: None,
            next_request: 1,
            last: None,
            absent_said: false,
            failures: Backoff::new(seed ^ 0x7761_7463),
            wanted: None,
            held: None,
        }
    }

    /// The link came up: read now (unless a read is under way).
    pub(in crate::session) fn start(&mut self, now: Instant) {
        if self.in_flight.is_none() {
            self.next_at = Some(now);
        }
    }

    /// The link went down: nothing is read until it comes up again (the next connection
    /// reads a key list anyway).
    pub(in crate::session) fn stop(&mut self) {
        self.next_at = None;
        self.in_flight = None;
    }

    /// Returns when [`Watch::handle_timeout`] is next due.
    pub(in crate::session) fn poll_timeout(&self) -> Option<Instant> {
        match self.in_flight {
            Some((_, deadline)) => Some(deadline),
            None => self.next_at,
        }
    }

    /// Returns what is due at `now`, if anything.
    pub(in crate::session) fn handle_timeout(&mut self, now: Instant) -> Option<WatchDue> {
        match self.in_flight {
            Some((_, deadline)) if deadline <= now => {
                self.in_flight = None;
                Some(WatchDue::TimedOut)
            }
            None if self.next_at.is_some_and(|at| at <= now) => Some(WatchDue::Read),
            _ => None,
        }
    }

    /// A change was seen at `now`: only a key list asked for from now on satisfies it (and
    /// every earlier one), whatever is under way.
    pub(in crate::session) fn want(&mut self, now: Instant) {
        self.wanted = Some(now);
    }

    /// A key list asked for at `asked_at` that may not answer the change waiting was applied:
    /// returns whether it holds that change back, which it does once per change (a second such
    /// list satisfies it, so that key lists that cannot answer it never follow one another for
    /// good). A change seen after `asked_at` is not this list's to satisfy, so it is not held
    /// back either: the hold is kept for a list that could answer it.
    pub(in crate::session) fn hold_once(&mut self, asked_at: Instant) -> bool {
        match self.wanted {
            Some(change) if change <= asked_at && self.held != Some(change) => {
                self.held = Some(change);
                true
            }
            _ => false,
        }
    }

    /// A key list asked for at `asked_at` was applied: it satisfies a change seen at or
    /// before then.
    pub(in crate::session) fn satisfied_by(&mut self, asked_at: Instant) {
        if self.wanted.is_some_and(|seen| seen <= asked_at) {
            self.wanted = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_held_back_once_then_satisfied() {
        let mut watch = Watch::new(1);
        let asked = Instant::from_nanos(10);
        assert!(!watch.hold_once(asked), "no change waits");
        let first = Instant::from_nanos(5);
        watch.want(first);
        assert!(watch.hold_once(asked));
        assert!(!watch.hold_once(asked), "the same change is held back once");
        let second = Instant::from_nanos(9);
        watch.want(second);
        assert!(
            watch.hold_once(asked),
            "a new change may be held back again"
        );
        watch.satisfied_by(second);
        assert_eq!(watch.wanted, None);
    }

    #[test]
    fn a_change_seen_after_a_list_was_asked_for_is_not_held_back_by_it() {
        let mut watch = Watch::new(1);
        watch.want(Instant::from_nanos(12));
        assert!(
            !watch.hold_once(Instant::from_nanos(10)),
            "the list cannot answer it"
        );
        assert!(
            watch.hold_once(Instant::from_nanos(12)),
            "a list that could answer it may still hold it back once"
        );
    }
}
