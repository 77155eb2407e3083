//! One call per input, for tests and benches: [`Shortcuts`] on [`Session`]; and [`Untimed`],
//! the two reads of its status that tests and benches without a clock ask most.
//!
//! The session has one door, [`Session::handle`]; a test that hands over many inputs reads
//! better with a verb per input. Each method here builds the [`Input`] and goes through that
//! door, nothing else: what a test sees is what a driver gets. Likewise each read goes through
//! [`Session::status`], what a driver reads.

use hicache_index::{
    Counters, Effects, Health, Input, Instant, LeaderRequest, LeaderStatus, LeaderView, Session,
    SnapshotRequest, VerifyRequest, Watermark, WorkerInfo,
};

/// Reads of [`Session::status`] for tests and benches that keep no clock of their own: what
/// they read does not depend on the time asked about.
pub trait Untimed {
    /// Returns the health ([`hicache_index::SessionStatus::health`]).
    fn health(&self) -> Health;
    /// Returns the counters ([`hicache_index::SessionStatus::counters`]) asked at
    /// [`Instant::ZERO`]: [`Counters::unconfirmed_ms`] is then 0, so a test that reads it asks
    /// [`Session::status`] with its own time.
    fn counters(&self) -> Counters;
}

impl Untimed for Session {
    fn health(&self) -> Health {
        self.status(Instant::ZERO).health
    }

    fn counters(&self) -> Counters {
        self.status(Instant::ZERO).counters
    }
}

/// A verb per [`Input`], each a call of [`Session::handle`] (through [`Shortcuts::hand`]).
pub trait Shortcuts {
    /// Hands over one input: [`Session::handle`].
    fn hand(&mut self, now: Instant, input: Input<'_>) -> Effects;

    /// Hands over one multipart message, `[topic, seq, payload]` ([`Input::Message`]).
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        self.hand(now, Input::Message(frames))
    }

    /// Does whatever is due at `now` ([`Input::Timeout`]).
    fn handle_timeout(&mut self, now: Instant) -> Effects {
        self.hand(now, Input::Timeout)
    }

    /// Reports that the subscriber connected ([`Input::Connected`]).
    fn handle_connected(&mut self, now: Instant) -> Effects {
        self.hand(now, Input::Connected)
    }

    /// Reports that the connection was lost ([`Input::Disconnected`]).
    fn handle_disconnected(&mut self, now: Instant) -> Effects {
        self.hand(now, Input::Disconnected)
    }

    /// Reports that the driver stopped for good ([`Input::Stopped`]).
    fn handle_stopped(&mut self, now: Instant) -> Effects {
        self.hand(now, Input::Stopped)
    }

    /// Asks to connect again after a stop ([`Input::Resume`], which has no effects).
    fn resume(&mut self, now: Instant) {
        let fx = self.hand(now, Input::Resume);
        assert!(fx.is_empty(), "resuming only schedules: {fx:?}");
    }

    /// Forgets every page now ([`Input::Clear`]).
    fn clear(&mut self, now: Instant) -> Effects {
        self.hand(now, Input::Clear)
    }

    /// Reports what a worker advertises, `None`: gone ([`Input::Worker`]).
    fn handle_worker(&mut self, now: Instant, worker: &str, info: Option<WorkerInfo>) -> Effects {
        self.hand(now, Input::Worker { worker, info })
    }

    /// Hands over a whole key list, from any iterator of lines ([`Input::Snapshot`]).
    fn handle_snapshot(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
        lines: impl IntoIterator<Item = impl AsRef<[u8]>>,
    ) -> Effects {
        let owned: Vec<_> = lines.into_iter().collect();
        let lines: Vec<&[u8]> = owned.iter().map(AsRef::as_ref).collect();
        self.hand(
            now,
            Input::Snapshot {
                request,
                watermark,
                lines: &lines,
            },
        )
    }

    /// Reports that a fetch failed ([`Input::SnapshotFailed`]).
    fn handle_snapshot_failed(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.hand(now, Input::SnapshotFailed { request })
    }

    /// Reports that a fetch's status said the publisher is off ([`Input::EventsDisabled`]).
    fn handle_events_disabled(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.hand(now, Input::EventsDisabled { request })
    }

    /// Hands over a verification answer, from any iterator ([`Input::VerifyResult`]).
    fn handle_verify_result<'k>(
        &mut self,
        now: Instant,
        request: VerifyRequest,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects {
        let results: Vec<(&str, bool)> = results.into_iter().collect();
        self.hand(
            now,
            Input::VerifyResult {
                request,
                results: &results,
            },
        )
    }

    /// Reports that a verification failed ([`Input::VerifyFailed`]).
    fn handle_verify_failed(&mut self, now: Instant, request: VerifyRequest) -> Effects {
        self.hand(now, Input::VerifyFailed { request })
    }

    /// Hands over what HA discovery says about the leader ([`Input::LeaderView`]).
    fn handle_leader_view(&mut self, now: Instant, view: &LeaderView) -> Effects {
        self.hand(now, Input::LeaderView(view))
    }

    /// Hands over the answer to a leader check ([`Input::LeaderStatus`]).
    fn handle_leader_status(
        &mut self,
        now: Instant,
        request: LeaderRequest,
        status: &LeaderStatus,
    ) -> Effects {
        self.hand(now, Input::LeaderStatus { request, status })
    }
}

impl Shortcuts for Session {
    fn hand(&mut self, now: Instant, input: Input<'_>) -> Effects {
        self.handle(now, input)
    }
}
