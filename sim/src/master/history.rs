//! What the master reports: every state change as a [`Record`] with its history position, and
//! what one call produced ([`MasterOutput`]).

use hicache_index::Instant;

use super::messages::Published;
use super::pages::ObjId;

/// One state change, as the oracle learns it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Change {
    /// A `stored` event was created (the object is present in both histories).
    Stored {
        /// The object.
        obj: ObjId,
        /// Its tenant.
        tenant: u8,
    },
    /// A `removed` event was created (with or without its key): absent in both histories.
    Removed {
        /// The object.
        obj: ObjId,
    },
    /// A `cleared` event was created for a tenant: every object of it is absent.
    Cleared {
        /// The tenant.
        tenant: u8,
    },
    /// The object vanished without an event (true state only).
    SilentlyRemoved {
        /// The object.
        obj: ObjId,
    },
    /// A `removed` event for one medium while a replica on another remains: the object is
    /// still present, for the events (they said it was stored on both) and for the master.
    MediumRemoved {
        /// The object.
        obj: ObjId,
    },
    /// The object's client went silent past its active TTL: the master no longer lists it
    /// (true state only), and may list it again ([`Change::Restored`]).
    Hidden {
        /// The object.
        obj: ObjId,
    },
    /// The object's segment closed while it was listed: gone, without an event (true state
    /// only).
    Unmounted {
        /// The object.
        obj: ObjId,
    },
    /// A hidden object is listed again (its stalled client resumed), without an event: the
    /// true state holds it again while the event history never lost it.
    Restored {
        /// The object.
        obj: ObjId,
    },
    /// The master restarted: every object is gone, with no event.
    Restart,
}

/// A change and its position in the master's history.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The history position (from 1, never restarting).
    pub pos: u64,
    /// What changed.
    pub change: Change,
}

/// What a call to the master produced; the caller drains it.
#[derive(Debug, Default)]
pub struct MasterOutput {
    /// State changes, in order.
    pub records: Vec<Record>,
    /// Messages sent, in order.
    pub published: Vec<Published>,
    /// The highest history position whose event will never be sent (queue drop, failed send,
    /// restart); 0 when none.
    pub lost_upto: u64,
    /// The history positions of the events the full queue dropped.
    pub dropped: Vec<u64>,
    /// The history positions of the first events of batches whose send failed.
    pub failed: Vec<u64>,
    /// The history positions of restarts.
    pub restarts: Vec<u64>,
    /// A restart happened; the master is down until this time.
    pub restarted_until: Option<Instant>,
    /// A put happened (the world then runs queries).
    pub put: bool,
}

impl MasterOutput {
    pub(super) fn lost(&mut self, pos: u64) {
        self.lost_upto = self.lost_upto.max(pos);
    }
}

/// Counts of what the master did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MasterStats {
    /// Events created.
    pub events: u64,
    /// Events dropped by the full queue.
    pub queue_drops: u64,
    /// Batches sent.
    pub batches: u64,
    /// Batches whose send failed.
    pub failed_sends: u64,
    /// Restarts.
    pub restarts: u64,
    /// Objects removed without an event.
    pub silent_removals: u64,
    /// Put requests served.
    pub puts: u64,
    /// Events of an unknown type without a key sent.
    pub unknown_keyless: u64,
    /// Foreign keys put (odd keys of another client).
    pub foreign_keys: u64,
}
