//! The state of the resynchronisation: where it stands, the numbering of its fetches and status
//! checks, the backoffs of fetches that failed or could not be anchored, and the watch (what the
//! session does with it: `session/resync.rs`).

use super::link::Backoff;
use super::resync_state::ResyncState;
use super::watch::Watch;

/// The resynchronisation: where it stands, the numbering of its fetches, and the backoff of
/// fetches that could not be anchored.
#[derive(Debug)]
pub(in crate::session) struct Resync {
    pub(in crate::session) state: ResyncState,
    /// The number of the next fetch ([`SnapshotRequest`](crate::input::SnapshotRequest)).
    pub(in crate::session) next_request: u64,
    /// The number of the next status check ([`StatusRequest`](crate::input::StatusRequest)).
    pub(in crate::session) next_status: u64,
    /// The backoff of fetches whose snapshots could not be anchored, in a row (`attempts` is
    /// zero once one is anchored).
    pub(in crate::session) unanchored: Backoff,
    /// The backoff of fetches that failed or timed out in a row (`attempts` is zero once the
    /// master answers one).
    pub(in crate::session) failures: Backoff,
    /// The watch of the master's signals, whose changes ask for reconciles.
    pub(in crate::session) watch: Watch,
}

impl Resync {
    pub(in crate::session) fn new(seed: u64) -> Resync {
        Resync {
            state: ResyncState::Idle,
            next_request: 1,
            next_status: 1,
            unanchored: Backoff::new(seed ^ 0x5bd1_e995),
            failures: Backoff::new(seed ^ 0x6874_7470),
            watch: Watch::new(seed),
        }
    }
}
