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

/// A verb per [`Input`], each a call of [`Session::handle`].
pub trait Shortcuts {
    /// Hands over one multipart message, `[topic, seq, payload]` ([`Input::Message`]).
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects;
    /// Does whatever is due at `now` ([`Input::Timeout`]).
    fn handle_timeout(&mut self, now: Instant) -> Effects;
    /// Reports that the subscriber connected ([`Input::Connected`]).
    fn handle_connected(&mut self, now: Instant) -> Effects;
    /// Reports that the connection was lost ([`Input::Disconnected`]).
    fn handle_disconnected(&mut self, now: Instant) -> Effects;
    /// Reports that the driver stopped for good ([`Input::Stopped`]).
    fn handle_stopped(&mut self, now: Instant) -> Effects;
    /// Asks to connect again after a stop ([`Input::Resume`], which has no effects).
    fn resume(&mut self, now: Instant);
    /// Forgets every page now ([`Input::Clear`]).
    fn clear(&mut self, now: Instant) -> Effects;
    /// Reports what a worker advertises, `None`: gone ([`Input::Worker`]).
    fn handle_worker(&mut self, now: Instant, worker: &str, info: Option<WorkerInfo>) -> Effects;
    /// Hands over a whole key list, from any iterator of lines ([`Input::Snapshot`]).
    fn handle_snapshot<I>(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
        lines: I,
    ) -> Effects
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>;
    /// Reports that a fetch failed ([`Input::SnapshotFailed`]).
    fn handle_snapshot_failed(&mut self, now: Instant, request: SnapshotRequest) -> Effects;
    /// Reports that a fetch's status said the publisher is off ([`Input::EventsDisabled`]).
    fn handle_events_disabled(&mut self, now: Instant, request: SnapshotRequest) -> Effects;
    /// Hands over a verification answer, from any iterator ([`Input::VerifyResult`]).
    fn handle_verify_result<'k, I>(
        &mut self,
        now: Instant,
        request: VerifyRequest,
        results: I,
    ) -> Effects
    where
        I: IntoIterator<Item = (&'k str, bool)>;
    /// Reports that a verification failed ([`Input::VerifyFailed`]).
    fn handle_verify_failed(&mut self, now: Instant, request: VerifyRequest) -> Effects;
    /// Hands over what HA discovery says about the leader ([`Input::LeaderView`]).
    fn handle_leader_view(&mut self, now: Instant, view: &LeaderView) -> Effects;
    /// Hands over the answer to a leader check ([`Input::LeaderStatus`]).
    fn handle_leader_status(
        &mut self,
        now: Instant,
        request: LeaderRequest,
        status: &LeaderStatus,
    ) -> Effects;
}

impl Shortcuts for Session {
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        self.handle(now, Input::Message(frames))
    }

    fn handle_timeout(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Timeout)
    }

    fn handle_connected(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Connected)
    }

    fn handle_disconnected(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Disconnected)
    }

    fn handle_stopped(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Stopped)
    }

    fn resume(&mut self, now: Instant) {
        let fx = self.handle(now, Input::Resume);
        assert!(fx.is_empty(), "resuming only schedules: {fx:?}");
    }

    fn clear(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Clear)
    }

    fn handle_worker(&mut self, now: Instant, worker: &str, info: Option<WorkerInfo>) -> Effects {
        self.handle(now, Input::Worker { worker, info })
    }

    fn handle_snapshot<I>(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
        lines: I,
    ) -> Effects
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let owned: Vec<I::Item> = lines.into_iter().collect();
        let lines: Vec<&[u8]> = owned.iter().map(AsRef::as_ref).collect();
        self.handle(
            now,
            Input::Snapshot {
                request,
                watermark,
                lines: &lines,
            },
        )
    }

    fn handle_snapshot_failed(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.handle(now, Input::SnapshotFailed { request })
    }

    fn handle_events_disabled(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.handle(now, Input::EventsDisabled { request })
    }

    fn handle_verify_result<'k, I>(
        &mut self,
        now: Instant,
        request: VerifyRequest,
        results: I,
    ) -> Effects
    where
        I: IntoIterator<Item = (&'k str, bool)>,
    {
        let results: Vec<(&str, bool)> = results.into_iter().collect();
        self.handle(
            now,
            Input::VerifyResult {
                request,
                results: &results,
            },
        )
    }

    fn handle_verify_failed(&mut self, now: Instant, request: VerifyRequest) -> Effects {
        self.handle(now, Input::VerifyFailed { request })
    }

    fn handle_leader_view(&mut self, now: Instant, view: &LeaderView) -> Effects {
        self.handle(now, Input::LeaderView(view))
    }

    fn handle_leader_status(
        &mut self,
        now: Instant,
        request: LeaderRequest,
        status: &LeaderStatus,
    ) -> Effects {
        self.handle(now, Input::LeaderStatus { request, status })
    }
}
