//! The session's status: a plain-data snapshot of where it is, for drivers, operators and tests
//! (how the session fills it: `session/status.rs`).

use alloc::string::String;

use crate::effect::{Health, Recovering};
use crate::frame::Seq;
use crate::input::SnapshotRequest;
use crate::leader::LeaderInfo;
use crate::metrics::Counters;
use crate::time::Instant;

/// Where a session is at one time ([`Session::status`](crate::session::Session::status)): its
/// health and why, its counters, its place in the stream, its connection and leader, and the key
/// list it is taking. Plain data, owned: it stays as it was when the session changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionStatus {
    /// The health every answer carries.
    pub health: Health,
    /// Why the index is [`Health::Recovering`]; `None` when it is not.
    pub recovering: Option<Recovering>,
    /// Every counter and gauge, with [`Counters::unconfirmed_ms`] as of the time asked about.
    pub counters: Counters,
    /// The sequence of the last batch applied from the stream (`None` after a clear until the
    /// next batch).
    pub last_applied_seq: Option<Seq>,
    /// A time at or after which every object the index holds is known to have been present at
    /// the master; `None` while the index is empty (trivially confirmed). See
    /// [`Counters::unconfirmed_ms`] for what confirms an object.
    pub confirmed_at: Option<Instant>,
    /// The event endpoint in use (configured, chosen from worker metadata, or the leader's).
    pub endpoint: Option<String>,
    /// Where the session is with the HA cluster's leader; `None` when it follows one fixed
    /// master.
    pub leader: Option<LeaderInfo>,
    /// The key list the session takes in chunks
    /// ([`Input::SnapshotLines`](crate::input::Input::SnapshotLines)) and how many of its keys it
    /// applied so far; `None` when it takes none (not begun, stale, refused by
    /// [`Input::SnapshotBegin`](crate::input::Input::SnapshotBegin), or finished). A driver SHOULD
    /// drop a handover the session no longer takes ([`SessionStatus::snapshot_applied`]).
    pub snapshot: Option<SnapshotProgress>,
    /// Objects one medium's removal made absent until the master confirms them (suspects, see
    /// the crate docs on residency per medium).
    pub suspects: usize,
}

/// A key list the session takes in chunks, and how far it got ([`SessionStatus::snapshot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotProgress {
    /// The fetch the key list answers.
    pub request: SnapshotRequest,
    /// How many of its keys were applied so far.
    pub applied: usize,
}

impl SessionStatus {
    /// Returns how many keys of the snapshot `request` were applied so far, or `None` when the
    /// session does not take its lines (a driver SHOULD then drop the handover).
    pub fn snapshot_applied(&self, request: SnapshotRequest) -> Option<usize> {
        self.snapshot
            .filter(|s| s.request == request)
            .map(|s| s.applied)
    }
}
