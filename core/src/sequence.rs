//! Per-stream ordering: which batch to apply, skip, hold, or read as loss or a restart.
//!
//! The rules (spec section 3):
//! - The first batch, and the first after `SequenceTracker::reset`, is a new baseline whatever
//!   its sequence: no gap is reported for it.
//! - `seq == last + 1` applies only as a continuation of the same publisher run: when both
//!   batches carry event ids, the new batch's first event id MUST be exactly the last event id
//!   applied + 1 (the Mooncake master numbers its published events from 1 without a hole; ids
//!   do not skip over events its queue dropped, and a message lost after publishing also skips
//!   its sequence). Any other first id is a publisher that started again whose first batches
//!   were lost: a restart. `seq == last` with the same fingerprint is a duplicate; with a
//!   different fingerprint it is a restart.
//! - A jump forward is loss. Without a reorder window it is reported at once. With one, the batch
//!   is held until the hole fills (then everything applies in order), until more than
//!   `max_held` batches wait, or until the oldest has waited `max_delay`: then the hole is loss.
//!   Held batches released in order pass the same event-id rule: a held batch that does not run
//!   on from the one before it is a restart (`SequenceTracker::pop_ready`).
//! - A batch that begins the stream after lost batches (a jump forward without a reorder
//!   window, or the first held batch released after the window declared loss) must run past
//!   the stream: its first event id greater than the last applied (ids only grow within a run;
//!   they do not skip over the master's queue drops). A first id no greater is another run: a
//!   restart, or, with a reorder window and stamped no later than the stream, a late batch
//!   (`Verdict::Stale`). With a reorder window, a baseline after loss stamped before the
//!   newest batch applied is stale too: libzmq queues each connection's messages apart, so an
//!   unseen restart's late messages of the old run can follow the new run's. A publisher
//!   whose clock went back is then skipped until its clock passes the stream's: misses.
//! - With a reorder window, a batch stamped before the newest batch applied is never applied,
//!   even when its sequence and event ids run on (two runs whose batches had the same sizes
//!   number them alike): the master stamps a run's batches in order as it sends them, so it is
//!   an older run's late batch (`Verdict::Stale`).
//! - A jump backward is a restart, except, with a reorder window, a sequence within the window
//!   whose fingerprint matches the batch applied under that number: a late copy.
//!   With a reorder window, a jump backward that is no copy but is stamped no later than the
//!   stream's latest batch is `Verdict::Stale`: a late batch, never a new baseline.
//! - After `SequenceTracker::reset` (a new connection), what came before is a fence: a copy of
//!   a batch applied or held before the reset is late; a batch no newer than all of them in both
//!   sequence and publisher timestamp is late before the new stream's baseline (dropping a
//!   batch then only costs misses: the index was forgotten at the reset, and a resync is
//!   anchored by the first batch applied) and stale after it. A restarted publisher's batches
//!   carry later timestamps and pass; one whose clock went back is forgotten again and again
//!   (misses, counted), never trusted.
//!
//! - A batch whose sequence can be read but whose events cannot (`observe_unreadable`) consumed
//!   its sequence, and what it changed is unknown: the caller forgets when the stream reaches
//!   it. With a reorder window it waits ahead of a hole like any other batch, so the batches
//!   before it apply first (and it releases the batches held behind it). Once the stream has
//!   moved past it, and until a readable batch after it applies, no batch at or before it
//!   applies: with a reorder window it is stale, since a late batch of its run may store what
//!   it removed. Its stamp is unknown, so only what the stream applied before it tells a later
//!   run's batch: stamped after all of it and, if numbered past its last readable batch, with
//!   a first event id no greater than that batch's last (a batch of the run there runs past
//!   it; the master's queue drops skip sequences, not ids).
//!   Such a batch, or any that comes 2 s (or 16 windows' `max_delay`) after the unreadable
//!   one, is a restart. A reset (a new connection) keeps this fence, for an unreadable batch
//!   passed or held, and a batch it fences is stale there too (never merely late: it may be
//!   the current run's, and what it stored or removed is lost). Bounded, not closed: a batch
//!   of the run later than that bound would be taken for another run's; a restarted publisher
//!   without ids or comparable stamps misses that long. Without a reorder window it is a
//!   restart.
//! - A restart found at a batch keeps the batches held after it that are not stamped before it
//!   (they may be the new run's, and released after it they are ruled then); dropped, the new
//!   run's batch that removed what it stored would be lost without a trace. An unreadable one
//!   has no stamp and is kept: if it was the old run's and a loss makes it the position, it
//!   fences the new run's batches numbered below it until the bound above (misses, not false
//!   hits: which run it is of cannot be told).
//!
//! The tracker never applies a later batch before an earlier one.

use core::time::Duration;

mod tracker;

#[cfg(feature = "internals")]
pub use self::tracker::{Fingerprint, Loss, SequenceTracker, Verdict};
#[cfg(not(feature = "internals"))]
pub(crate) use self::tracker::{Fingerprint, Loss, SequenceTracker, Verdict};

/// How much reordering the transport can produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderConfig {
    /// The most out-of-order batches held while waiting for a hole to fill; 0 turns reordering
    /// off (every jump forward is loss at once, as over one ZeroMQ connection).
    pub max_held: usize,
    /// The longest a held batch waits for the hole before it is declared loss.
    pub max_delay: Option<Duration>,
}
