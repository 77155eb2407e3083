//! What the publisher queues ([`Queued`]) and sends ([`Published`], with its [`MasterMeta`]),
//! and the status it reports ([`Status`]).

use hicache_index::{Instant, Medium, Seq};

/// A master message's identity and fate (a [`Published`] carries it as sent, and the network
/// reports it).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct MasterMeta {
    /// The message's number over the whole run (from 1, never restarting).
    pub id: u64,
    /// The master's restart count.
    pub epoch: u32,
    /// The sequence sent.
    pub seq: u64,
    /// History position of the first event.
    pub first_pos: u64,
    /// History position of the last event.
    pub last_pos: u64,
    /// The event id of its first event.
    pub first_event_id: u64,
    /// How many events it holds.
    pub events: usize,
    /// The message still decodes to the batch that was sent.
    pub intact: bool,
    /// A late copy: delivered long after the message, across reconnects and clears.
    pub late: bool,
}

/// What `GET /kv_events/status` answers, as the real master counts (specification section 3):
/// within one run of the master the counters only grow; a restart sets them back to 0.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// Batches the publisher made. The model counts a batch whose send failed too (its sequence
    /// was assigned), so that `published_batches + dropped_events` is the last sequence
    /// assigned.
    pub published_batches: u64,
    /// Events given an id: the last event id given (ids go to published events only).
    pub published_events: u64,
    /// Events the full queue dropped (each skipped one sequence, and no event id).
    pub dropped_events: u64,
}

impl Status {
    /// Returns the last sequence the publisher assigned (`published_batches + dropped_events`).
    pub fn last_seq(&self) -> Seq {
        Seq(self.published_batches + self.dropped_events)
    }
}

/// One message the publisher sent.
#[derive(Clone, Debug)]
pub struct Published {
    /// What the receiver will know of it: its identity, intact and not late as sent (the
    /// network may change either).
    pub meta: MasterMeta,
    /// `[topic, seq, payload]`, as the master's bytes.
    pub frames: [Vec<u8>; 3],
}

#[derive(Copy, Clone, Debug)]
pub(super) enum QKind {
    Stored,
    Removed,
    RemovedWithoutKey,
    Cleared,
    /// A `removed` for one medium while another replica remains.
    RemovedMedium,
    /// An event of a type this model's decoder does not know, without an object key, for a
    /// tenant (the target): a future tenant-wide removal.
    UnknownKeyless,
    /// A `stored` of a foreign client's key (the target indexes
    /// [`Master::foreign_keys`](super::state::Master::foreign_keys)).
    ForeignStored,
    /// A `removed` of a foreign client's key.
    ForeignRemoved,
}

#[derive(Copy, Clone, Debug)]
pub(super) struct Queued {
    pub(super) kind: QKind,
    /// The object (or the tenant, for `Cleared`).
    pub(super) target: u32,
    pub(super) medium: Option<Medium>,
    pub(super) pos: u64,
    /// When it was queued.
    pub(super) at: Instant,
}
