//! Failing a run ([`World::fail`]) and making its [`Report`] at the end.

use std::time::Duration;

use crate::system::System;

use super::report::{Failure, FailureKind, Report};
use super::state::World;

/// Stop a run after this many failures.
const MAX_FAILURES: usize = 3;

impl<S: System> World<S> {
    pub(super) fn report(mut self) -> Report {
        let c = self.sut.status(self.now).counters;
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
        s.confirm_failures = c.confirm_failures;
        s.unlisted_removed = c.unlisted_removed;
        s.unlisted_unasked = c.unlisted_unasked;
        s.verify_rounds = c.verify_rounds;
        s.stale_keys_found = c.stale_keys_found;
        s.duplicates = c.duplicates + c.before_point;
        s.held = c.held;
        s.disconnects = c.disconnects;
        s.unreadable_removal_clears = c.clears_unreadable_removal;
        s.publisher_clears = c.publisher_clears;
        s.requested_clears = c.clears_requested;
        s.ignored_messages =
            c.stray_topic + c.stray_frame_count + c.malformed_seq + c.malformed_payload;
        s.evictions = c.evictions;
        s.clients = self.master.client_stats();
        (s.clock_jumps, s.clock_steps_back) = self.master.clock_changes();
        s.handed_after_passed = self.driver.flight.after_passed();
        s.virtual_time = Duration::from_nanos(self.now.as_nanos());
        s.net = self.net.stats();
        Report {
            options: self.opts,
            stats: self.stats,
            failures: self.failures,
            transcript: self.transcript.hash(),
        }
    }

    pub(super) fn fail(&mut self, kind: FailureKind, detail: String) {
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

    pub(super) fn stopped(&self) -> bool {
        self.failures.len() >= MAX_FAILURES
    }
}
