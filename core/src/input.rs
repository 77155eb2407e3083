//! Inputs: everything a driver hands to [`crate::Session::handle`], and the request ids that tie
//! an answer to the command that asked for it.

use core::fmt;

use crate::layout::WorkerInfo;
use crate::leader::{LeaderStatus, LeaderView};
use crate::sequence::Watermark;
use crate::signals::StoreSignals;

macro_rules! request_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        ///
        /// Its `Debug` form is the bare number, as transcripts show it.
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub u64);

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

request_id!(
    /// Names one snapshot fetch ([`crate::Command::FetchSnapshot`]): its answer carries it.
    SnapshotRequest
);
request_id!(
    /// Names one verification round ([`crate::Command::VerifyKeys`]): its answer carries it.
    VerifyRequest
);
request_id!(
    /// Names one status check ([`crate::Command::ReadStatus`]): its answer carries it.
    StatusRequest
);
request_id!(
    /// Names one read of the master's signals ([`crate::Command::ReadSignals`]): its answer
    /// carries it.
    SignalsRequest
);
request_id!(
    /// Names one leader check ([`crate::Command::CheckLeader`]): its answer carries it.
    LeaderRequest
);

/// One thing that happened, handed to [`crate::Session::handle`] with the time it happened.
///
/// Inputs borrow what they carry (frames, key lines, verification answers); the session keeps
/// nothing borrowed. An answer whose request the session no longer waits for is counted
/// ([`crate::Counters::unawaited_answers`]) and otherwise ignored.
#[derive(Clone, Debug)]
pub enum Input<'a> {
    /// A multipart message from the subscriber, `[topic, seq, payload]`; nothing of it is kept
    /// borrowed.
    Message(&'a [&'a [u8]]),
    /// Time passed: do whatever is due; before [`crate::Session::poll_timeout`] it does nothing.
    Timeout,
    /// The subscriber connected to the endpoint last asked for
    /// ([`crate::Command::Connect`]).
    Connected,
    /// The subscriber's connection was lost or failed: events may have been missed, the index
    /// forgets and a reconnect is scheduled.
    Disconnected,
    /// The driver stopped for good: the index forgets, nothing is scheduled, and the health is
    /// [`crate::Health::Disconnected`] until a new endpoint, or [`Input::Timeout`] after
    /// [`Input::Resume`].
    Stopped,
    /// Connect again now after [`Input::Stopped`], with the backoff reset (no effects). (A
    /// restart is the master's: another run.)
    Resume,
    /// Forget every page now (an operator asked). The next batch is a silent baseline, unless it
    /// is from before the clear (see [`crate::sequence`]'s fence).
    Clear,
    /// What an SGLang worker advertises; `None`: the worker is gone. A configured endpoint and
    /// configured layouts always win. Workers of one model that disagree on its layout (or
    /// whose layout cannot be read) make that model answer [`crate::QueryError::LayoutConflict`]
    /// until they agree again (see [`crate::layout::LayoutVotes`]); a model none of whose
    /// workers advertises a layout answers [`crate::QueryError::NoLayout`]; a change of the
    /// layout in force makes every query under way hash again under the new one.
    Worker {
        /// The worker's name.
        worker: &'a str,
        /// What it advertises.
        info: Option<WorkerInfo>,
    },
    /// The whole answer to [`crate::Command::FetchSnapshot`]: the [`Watermark`] read just
    /// before the key list (`None` when the master does not tell) and the key list's lines
    /// (default tenant), each exactly as the master wrote it (see [`crate::snapshot_lines`]).
    ///
    /// The watermark is a status point that places the stream (rules R3 and R6 of
    /// [`crate::sequence`]): the batches that arrived since the fetch was asked for are ruled
    /// against it, those at or before it are in the key list and skipped, and the stream goes
    /// on from it. Until the stream continues the point, once a batch before it came, queries
    /// miss; a point not continued within the fetch timeout forgets and fetches again. Without
    /// a watermark, the first batch since the fetch begins the stream if a batch had arrived on
    /// the connection before the fetch was asked; otherwise the snapshot cannot be anchored,
    /// and the session fetches again once a batch arrives, or after the resync's retry delay
    /// (backing off up to 64 times it). Lines that are not exactly keys are never applied, and
    /// lines next to them only once the master confirms them (see [`crate::snapshot`]).
    Snapshot {
        /// The fetch answered.
        request: SnapshotRequest,
        /// The master's stream position when the list was read.
        watermark: Option<Watermark>,
        /// The key list, one line per item.
        lines: &'a [&'a [u8]],
    },
    /// The answer to [`crate::Command::FetchSnapshot`] in chunks, begun: the watermark (as in
    /// [`Input::Snapshot`]). Then [`Input::SnapshotLines`] any number of times and
    /// [`Input::SnapshotEnd`] once; messages and queries may come in between, which lets a
    /// driver release its lock between chunks of a large key list.
    SnapshotBegin {
        /// The fetch answered.
        request: SnapshotRequest,
        /// The master's stream position when the list was read.
        watermark: Option<Watermark>,
    },
    /// A chunk of the key list begun with [`Input::SnapshotBegin`]: lines in order, split
    /// between lines (no effects; [`crate::SessionStatus::snapshot`] says whether the
    /// session still takes the rest).
    SnapshotLines {
        /// The fetch answered.
        request: SnapshotRequest,
        /// The next lines of the key list.
        lines: &'a [&'a [u8]],
    },
    /// The end of a key list handed over in chunks: the index is live again (once the stream
    /// has passed the snapshot's status point).
    SnapshotEnd {
        /// The fetch answered.
        request: SnapshotRequest,
    },
    /// The fetch failed; it is retried later.
    SnapshotFailed {
        /// The fetch that failed.
        request: SnapshotRequest,
    },
    /// The fetch's `/kv_events/status` said `"enabled":false`: the master publishes nothing,
    /// and the health is [`crate::Health::EventsDisabled`] until a later status says otherwise
    /// (the fetch is retried).
    EventsDisabled {
        /// The fetch whose status said so.
        request: SnapshotRequest,
    },
    /// The master's answer to [`crate::Command::VerifyKeys`]: each checked key and whether it
    /// exists. Keys the driver could not check MUST be left out, never reported present.
    ///
    /// Keys found absent are removed unless their page changed since the keys were sampled. A
    /// round that removed one escalates, with resync on: the master dropped objects without an
    /// event, others are gone too, so the index reconciles with the key list
    /// ([`crate::Health::Reconciling`]), at most once per
    /// [`crate::VerifyConfig::escalate_every`]; a round within it holds the escalation back
    /// (counted in [`crate::Counters::stale_escalations_held`], reported as
    /// [`crate::Report::EscalationHeld`]) until the first round due once the limit has passed.
    /// A round counts towards a sweep (see [`crate::Counters::unconfirmed_ms`]) only when the
    /// answer names every key asked about, each once, and every key found absent left the
    /// index.
    VerifyResult {
        /// The round answered.
        request: VerifyRequest,
        /// The keys checked and whether each exists.
        results: &'a [(&'a str, bool)],
    },
    /// The verification failed; the next round comes after the interval.
    VerifyFailed {
        /// The round that failed.
        request: VerifyRequest,
    },
    /// The answer to [`crate::Command::ReadStatus`]: the master's `/kv_events/status`, `None`
    /// when the read failed or the master gave no counters.
    Status {
        /// The check answered.
        request: StatusRequest,
        /// What the status said.
        watermark: Option<Watermark>,
    },
    /// The answer to [`crate::Command::ReadSignals`]: what the master's `/metrics` said of the
    /// signal families, `None` when the read failed (it is asked again after a doubling delay).
    /// The first answer is the baseline; any later change of any family makes the session
    /// reconcile ([`crate::Health::Reconciling`]); an answer without any of the families stops
    /// the watch for 64 intervals ([`crate::Report::SignalsAbsent`], said once).
    Signals {
        /// The read answered.
        request: SignalsRequest,
        /// What the master said.
        signals: Option<StoreSignals>,
    },
    /// What HA discovery says about the leader: every value the driver reads of the master view
    /// key (watched or polled), with its version (see [`crate::leader`]). Another incarnation
    /// than the one followed forgets at once, drops the connection and asks to check the new
    /// leader ([`crate::Command::CheckLeader`]); nothing connects before it serves. The same
    /// incarnation again changes nothing. Without HA configured, ignored.
    LeaderView(&'a LeaderView),
    /// The answer to [`crate::Command::CheckLeader`]. A leader that serves, at the address
    /// discovery named, with a master view no older than any followed, whose status answers, is
    /// followed: [`crate::Command::UseMaster`], then [`crate::Command::Connect`] to the endpoint
    /// with its host. Otherwise it is checked again later; a status saying the publisher is off
    /// is [`crate::Health::EventsDisabled`].
    LeaderStatus {
        /// The check answered.
        request: LeaderRequest,
        /// What the candidate said.
        status: &'a LeaderStatus,
    },
}
