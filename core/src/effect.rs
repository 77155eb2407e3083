//! Effects: what the session asks of its driver, returned as plain data.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::ops::Deref;

use crate::frame::{FrameError, Seq};
use crate::hash::PageHash;
#[cfg(doc)]
use crate::input::Input;
use crate::input::{LeaderRequest, SignalsRequest, SnapshotRequest, StatusRequest, VerifyRequest};
use crate::sequence::Skip;

/// The session's health, which a router can gate on and which every query answer carries.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Health {
    /// No connection, and none in progress (waiting for a reconnect time or an endpoint).
    Disconnected,
    /// A connection was asked for and has not been confirmed.
    Connecting,
    /// Connected, and the index reflects every event since the last clear.
    Live,
    /// Connected, and a resynchronisation is under way: present pages may be missing (misses),
    /// never the other way round.
    Recovering,
    /// Connected and following the stream, but the master's own signals
    /// ([`crate::signals`]) showed objects hidden, dropped or brought back without an event,
    /// and no key list read since has been applied yet: a hit may be an object the master
    /// stopped listing a moment ago (a router may discount it), a miss may be one it lists
    /// again. It ends when a key list asked for after the signal is applied (a reconcile:
    /// present pages stay hits throughout), within about the watch interval plus the time to
    /// read and apply the key list.
    Reconciling,
    /// The master says its KV event publisher is off (`"enabled":false` in
    /// `/kv_events/status`: a build without it): the index stays empty, and it is an error of
    /// the deployment, not a wait.
    EventsDisabled,
}

impl Health {
    /// Every health, in the order exporters list them.
    pub const ALL: [Health; 6] = [
        Health::Live,
        Health::Reconciling,
        Health::Recovering,
        Health::Connecting,
        Health::Disconnected,
        Health::EventsDisabled,
    ];

    /// Returns the lowercase name used in metrics and JSON (`"live"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Health::Disconnected => "disconnected",
            Health::Connecting => "connecting",
            Health::Live => "live",
            Health::Recovering => "recovering",
            Health::Reconciling => "reconciling",
            Health::EventsDisabled => "events_disabled",
        }
    }
}

/// Why the index forgot pages.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum ClearReason {
    /// Sequence numbers were skipped: events were lost.
    Gap,
    /// A batch cannot be of the followed run after its position (rule R5 of
    /// [`crate::sequence`]): another run of the master, whose old objects are gone, or, with a
    /// reorder window, a late batch.
    Restart,
    /// The connection was lost: events may have been missed.
    Disconnected,
    /// A new connection began while the index held what an earlier one taught it.
    Reconnected,
    /// The event endpoint changed: a different stream.
    EndpointChanged,
    /// HA discovery names another leader (or another incarnation of it, or none): a different
    /// stream, whose new leader restores its objects without events.
    LeaderChanged,
    /// An event that may have removed objects could not be read: a `removed` without an object
    /// key, or an event of a type this decoder does not know that names no object (it might
    /// remove any number of them).
    UnreadableRemoval,
    /// A batch of this stream (right topic, readable sequence) could not be decoded: its
    /// sequence was consumed and what it changed is unknown.
    Undecodable,
    /// The stream did not pass the last snapshot's status point within the fetch timeout: the
    /// snapshot may be of another run of the master.
    Unproven,
    /// The publisher sent a `cleared` event (for one tenant, or for all).
    PublisherCleared,
    /// The driver asked for it.
    Requested,
    /// The master's signals, or a verification round that found a key gone without an event,
    /// showed objects hidden or dropped silently, and a reconcile could not bring the index to
    /// the key list exactly (the master gave no status point, or
    /// its point was another run's or was not reached in time): the index forgets and resyncs.
    StoreChanged,
}

impl ClearReason {
    /// Reports whether a forget for this reason reads the key list again (with resync on and
    /// the link up): every loss does; a lost connection resyncs when the next one comes up, a
    /// new endpoint or leader when it is followed, and a publisher's `cleared` is an event.
    pub fn resyncs(self) -> bool {
        match self {
            ClearReason::Gap
            | ClearReason::Restart
            | ClearReason::UnreadableRemoval
            | ClearReason::Undecodable
            | ClearReason::Unproven
            | ClearReason::Requested
            | ClearReason::StoreChanged => true,
            ClearReason::Disconnected
            | ClearReason::Reconnected
            | ClearReason::EndpointChanged
            | ClearReason::LeaderChanged
            | ClearReason::PublisherCleared => false,
        }
    }

    /// Returns the lowercase name used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ClearReason::Gap => "gap",
            ClearReason::Restart => "restart",
            ClearReason::Disconnected => "disconnected",
            ClearReason::Reconnected => "reconnected",
            ClearReason::EndpointChanged => "endpoint_changed",
            ClearReason::LeaderChanged => "leader_changed",
            ClearReason::UnreadableRemoval => "unreadable_removal",
            ClearReason::Undecodable => "undecodable",
            ClearReason::Unproven => "unproven",
            ClearReason::PublisherCleared => "publisher_cleared",
            ClearReason::Requested => "requested",
            ClearReason::StoreChanged => "store_changed",
        }
    }
}

/// Why a message was ignored without being read as a batch of this stream.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum StrayReason {
    /// Its topic was not the one subscribed to (another publisher on the socket).
    Topic,
    /// It did not have exactly three frames.
    FrameCount(usize),
}

/// Why a resynchronisation did not complete.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ResyncFailure {
    /// The driver reported that the fetch failed.
    Fetch,
    /// The driver did not answer within the fetch timeout.
    Timeout,
    /// More live batches arrived during the fetch than the buffer holds (applied ones, or
    /// held ones waiting for its status point).
    BufferFull,
    /// The master's status said its publisher is off (`"enabled":false`).
    EventsDisabled,
    /// The key list's doubted lines, and the keys live batches stored that it lacks, were not
    /// confirmed (`/batch_query_keys` failed or timed out, or there were more than
    /// [`crate::snapshot::MAX_DOUBTED`] doubted lines): without them the list is not the
    /// store's (see [`crate::snapshot`]).
    Confirm,
}

/// Why the index is [`Health::Recovering`] ([`crate::SessionStatus::recovering`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Recovering {
    /// The master's key list is being read (a fetch is under way); batches that arrive
    /// meanwhile wait for its status point (rule R6 of [`crate::sequence`]).
    Fetching,
    /// Key-list lines next to lines that are no object keys, and keys live batches stored
    /// that the list lacks, are being confirmed with `/batch_query_keys` before the resync
    /// completes.
    Confirming,
    /// The last fetch failed; the next is asked at the retry time.
    Retrying {
        /// Why it failed.
        failure: ResyncFailure,
    },
    /// The stream has not reached the snapshot's status point yet: queries miss (rule R3).
    Unproven,
    /// The master's status gave no counters (an old master, or its read failed) and no batch
    /// had arrived on the connection: the snapshot cannot be anchored to the stream. It is
    /// fetched again once a batch arrives, or after the retry delay (doubling while it lasts).
    NoStatus,
}

impl Recovering {
    /// Returns a sentence for a person (`/readyz`, logs).
    pub fn describe(self) -> &'static str {
        match self {
            Recovering::Fetching => "reading the master's key list",
            Recovering::Confirming => {
                "confirming with /batch_query_keys the key-list lines next to foreign keys and the live stores the list lacks"
            }
            Recovering::Retrying {
                failure: ResyncFailure::Fetch,
            } => "the key-list fetch failed; retrying",
            Recovering::Retrying {
                failure: ResyncFailure::Timeout,
            } => "the key-list fetch timed out; retrying",
            Recovering::Retrying {
                failure: ResyncFailure::BufferFull,
            } => "more batches came during the key-list fetch than the buffer holds; retrying",
            Recovering::Retrying {
                failure: ResyncFailure::EventsDisabled,
            } => "the master's KV event publisher is off",
            Recovering::Retrying {
                failure: ResyncFailure::Confirm,
            } => "confirming the key list's lines next to foreign keys, or the live stores it lacks, failed; retrying",
            Recovering::Unproven => "the stream has not reached the key list's status point",
            Recovering::NoStatus => {
                "snapshot unanchored: the master gives no status counters and no batch has \
                 arrived yet; fetching again when one does"
            }
        }
    }
}

/// One thing the driver must do, returned in [`Effects`]; a driver MUST match it exhaustively
/// (a new command is then a compile error in every driver, never a silent log line).
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Connect the subscriber to `endpoint` now, closing any previous connection; then hand
    /// over [`Input::Connected`] or [`Input::Disconnected`].
    Connect {
        /// The ZeroMQ endpoint, e.g. `tcp://10.0.0.5:5557`.
        endpoint: String,
    },
    /// Close the subscriber's connection.
    Disconnect,
    /// Read the master's watermark, then its key list, and hand both over as
    /// [`Input::Snapshot`] (or in chunks, [`Input::SnapshotBegin`]), or report failure with
    /// [`Input::SnapshotFailed`] ([`Input::EventsDisabled`] when the status says the publisher
    /// is off). In this order: `GET /kv_events/status`,
    /// whose `published_batches + dropped_events` is the last sequence the master assigned, then
    /// `GET /get_all_keys`. A master without the status endpoint gives no watermark (`None`).
    FetchSnapshot {
        /// The request to answer.
        request: SnapshotRequest,
    },
    /// Ask the master which of `keys` exist (`GET /batch_query_keys`) and hand the answer over
    /// as [`Input::VerifyResult`], or report failure with [`Input::VerifyFailed`].
    VerifyKeys {
        /// The request to answer.
        request: VerifyRequest,
        /// The object keys to check.
        keys: Vec<String>,
    },
    /// Read the master's `GET /kv_events/status` and hand it over as [`Input::Status`]
    /// (`None` when the read failed or the master gave no counters): the check of a quiet
    /// stream (rule R11 of [`crate::sequence`]).
    ReadStatus {
        /// The request to answer.
        request: StatusRequest,
    },
    /// Check whether the candidate leader at `host` serves: `GET /health`, then
    /// `GET /kv_events/status`, on its admin port (the configured master HTTP port), and hand
    /// what they said over as [`Input::LeaderStatus`] (a failed request: not serving, events
    /// unknown).
    CheckLeader {
        /// The request to answer.
        request: LeaderRequest,
        /// The candidate's host.
        host: String,
    },
    /// Read the master's `GET /metrics` and hand the families of
    /// [`crate::signals::STORE_SIGNAL_FAMILIES`] over as [`Input::Signals`] (`None` when the
    /// read failed; an empty [`crate::StoreSignals`] when the master answered without them, or
    /// has no `/metrics`: a 404).
    ReadSignals {
        /// The request to answer.
        request: SignalsRequest,
    },
    /// Point the master HTTP side at `host` (ports and path kept): the leader now followed.
    /// Every later fetch and verification goes there.
    UseMaster {
        /// The leader's host.
        host: String,
    },
}

/// One thing that happened, returned in [`Effects`] for the driver to log or count; it asks
/// nothing of the driver.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum Report {
    /// A reconnect is scheduled; [`crate::Session::poll_timeout`] is due then.
    ReconnectScheduled {
        /// When the next [`Command::Connect`] comes.
        at: crate::time::Instant,
        /// How many attempts failed in a row before this one.
        attempt: u32,
    },
    /// The index forgot pages.
    Cleared {
        /// Why.
        reason: ClearReason,
        /// Pages forgotten.
        pages: usize,
        /// Objects forgotten.
        objects: usize,
    },
    /// Sequence numbers were skipped (a clear or resync follows).
    Gap {
        /// The sequence expected.
        expected: Seq,
        /// The sequence that arrived (or resumed after a reorder window gave up).
        received: Seq,
    },
    /// A batch was skipped (see [`Skip`] for why: rules R2, R3 and R6 of
    /// [`crate::sequence`]).
    Skipped {
        /// Its sequence.
        seq: Seq,
        /// Why.
        why: Skip,
    },
    /// A batch cannot be of the followed run after its position: another run of the master (a
    /// restart nobody saw), or, with a reorder window, a late batch (rule R5; a clear follows).
    OtherRun {
        /// The sequence of the position, if it had one.
        position: Option<Seq>,
        /// The sequence that arrived.
        received: Seq,
    },
    /// A quiet stream's check found the master's status ahead of what arrived and not caught up
    /// with (`ahead`: lost at the tail of a burst), or of another run (rule R11); or a fetch's
    /// status point was numbered below the batch heard before the fetch was asked: another
    /// run's (rule R6). A clear follows.
    StatusDisagreed {
        /// The sequence of the position (R11), or of the batch heard before the fetch (R6).
        position: Option<Seq>,
        /// The last sequence the master had assigned.
        status: Seq,
        /// The status was ahead of the position (else of another run).
        ahead: bool,
    },
    /// A snapshot's status point placed the stream (rule R6): batches at or before it are in
    /// the key list.
    Placed {
        /// The point (`None`: the master gave no status; the first batch held begins the
        /// stream).
        at: Option<Seq>,
    },
    /// Why the index is recovering changed (see [`crate::SessionStatus::recovering`]).
    Recovering {
        /// Why, now.
        why: Recovering,
    },
    /// A message on the subscribed topic did not decode; it was dropped.
    Malformed {
        /// What was wrong.
        error: FrameError,
    },
    /// A message that is not part of this stream was ignored.
    Stray {
        /// Why it is not.
        reason: StrayReason,
    },
    /// A resynchronisation completed.
    Resynced {
        /// Keys applied from the snapshot.
        keys: usize,
        /// Live batches applied while the snapshot was handed over (applied as they came).
        replayed: usize,
        /// Of `keys`, the lines next to a line that is no object key, applied because
        /// `/batch_query_keys` confirmed them.
        confirmed: usize,
    },
    /// A resynchronisation did not complete; it is retried later.
    ResyncFailed {
        /// Why.
        reason: ResyncFailure,
    },
    /// A verification found objects that the master no longer has.
    StaleFound {
        /// Objects removed from the index.
        keys: usize,
        /// Objects checked.
        checked: usize,
    },
    /// A verification round removed stale objects, but the index escalated (asked for a
    /// reconcile, [`Health::Reconciling`]) less than `VerifyConfig::escalate_every` ago: only
    /// the sampled keys left, and the objects the round did not sample stay claimed until the
    /// escalation held back happens, with the first round due at or after `until` (unless a
    /// clear comes first).
    EscalationHeld {
        /// When the limit passes.
        until: crate::time::Instant,
    },
    /// The master's signals moved: objects were hidden, dropped or brought back without an
    /// event; the index reconciles with the key list ([`Health::Reconciling`]).
    StoreChanged {
        /// The first family that moved (one of [`crate::signals::STORE_SIGNAL_FAMILIES`]).
        family: &'static str,
    },
    /// The master lists none of the signal families (or has no `/metrics`): objects it hides
    /// without an event are found by verification only. Said once; it is asked again every 64
    /// watch intervals.
    SignalsAbsent,
    /// A reconcile brought the index to the master's key list without forgetting it.
    Reconciled {
        /// Objects the index held that the master no longer listed: removed.
        removed: usize,
        /// Objects the master listed that the index did not hold: stored.
        restored: usize,
    },
    /// The health changed.
    HealthChanged {
        /// The old health.
        from: Health,
        /// The new health.
        to: Health,
    },
    /// Workers advertise different event endpoints; the session keeps `kept`.
    EndpointDisagreement {
        /// The endpoint in use (or chosen by majority when none was).
        kept: String,
        /// How many distinct endpoints are advertised.
        distinct: usize,
    },
    /// Workers serving `model` advertise different layouts; the first one stays.
    LayoutDisagreement {
        /// The model.
        model: String,
        /// The worker whose layout differs.
        worker: String,
    },
    /// A page became complete or incomplete under a watched layout (only with page deltas on).
    /// A [`Report::Cleared`] means every page in its scope became incomplete.
    Page {
        /// The tenant.
        tenant: String,
        /// The key prefix.
        prefix: Option<String>,
        /// The page.
        page: PageHash,
        /// Whether the page is now complete.
        complete: bool,
    },
}

/// One effect of a call: a [`Command`] the driver must execute or a [`Report`] it may log.
///
/// Its `Debug` form is the inner value's (`Connect { .. }`, not `Command(Connect { .. })`), as
/// transcripts show it.
#[derive(Clone, PartialEq)]
pub enum Effect {
    /// Something the driver must do.
    Command(Command),
    /// Something that happened.
    Report(Report),
}

impl Effect {
    /// Returns the command, if this effect is one.
    pub fn as_command(&self) -> Option<&Command> {
        match self {
            Effect::Command(c) => Some(c),
            Effect::Report(_) => None,
        }
    }

    /// Returns the report, if this effect is one.
    pub fn as_report(&self) -> Option<&Report> {
        match self {
            Effect::Command(_) => None,
            Effect::Report(r) => Some(r),
        }
    }
}

impl fmt::Debug for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Effect::Command(c) => c.fmt(f),
            Effect::Report(r) => r.fmt(f),
        }
    }
}

impl From<Command> for Effect {
    fn from(command: Command) -> Effect {
        Effect::Command(command)
    }
}

impl From<Report> for Effect {
    fn from(report: Report) -> Effect {
        Effect::Report(report)
    }
}

/// The effects of one call, in the order they happened.
#[must_use = "effects ask the driver to act; dropping them loses connects, fetches and reports"]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects(pub(crate) Vec<Effect>);

impl Effects {
    /// Makes an empty list (no allocation).
    pub fn new() -> Effects {
        Effects(Vec::new())
    }

    pub(crate) fn push(&mut self, effect: impl Into<Effect>) {
        self.0.push(effect.into());
    }

    /// Returns the commands among the effects, in order.
    pub fn commands(&self) -> impl Iterator<Item = &Command> {
        self.0.iter().filter_map(Effect::as_command)
    }

    /// Returns the reports among the effects, in order.
    pub fn reports(&self) -> impl Iterator<Item = &Report> {
        self.0.iter().filter_map(Effect::as_report)
    }

    /// Returns the effects as a vector.
    pub fn into_vec(self) -> Vec<Effect> {
        self.0
    }
}

impl Deref for Effects {
    type Target = [Effect];

    fn deref(&self) -> &[Effect] {
        &self.0
    }
}

impl IntoIterator for Effects {
    type Item = Effect;
    type IntoIter = alloc::vec::IntoIter<Effect>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}
