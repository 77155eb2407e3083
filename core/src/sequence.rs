//! The stream's rules: where each batch belongs, and what the session does with it.
//!
//! This is the one home of the rules; the README and the crate docs link here. Every ruling in
//! [`stream`] cites its rule.
//!
//! # Terms
//! - **Run**: one process of the master. It numbers its batches from 1 (the sequence) and its
//!   published events from 1 (the event id). Within a run both only grow; a batch numbered
//!   right after another starts at that one's last event id + 1; a drop in the master's queue
//!   skips sequence numbers but no event ids (spec section 3). A restart or a failover begins
//!   another run, which has lost the old run's objects without a removal.
//! - **Mark**: what places a batch: its sequence, its first and last event ids (when the
//!   publisher numbers events) and a print of its bytes ([`Mark`]).
//! - **Position**: where the index stands in the stream ([`Position`]): the last batch applied,
//!   a point after a loss, a snapshot's status point, or nowhere yet.
//! - **Status point**: what the master's `/kv_events/status` said just before its key list was
//!   read: the last sequence it had assigned (`published_batches + dropped_events`) and the last
//!   event id it had given (`published_events`).
//! - **Heard**: arrived over the connection and not a copy, whatever became of it (applied,
//!   skipped, held, dropped with what was held, or undecodable).
//! - **Copy**: a batch with the sequence and the print of a decodable one the stream heard
//!   (R2).
//! - **Forget**: the index drops what the stream taught it; with resync on, a key list is read
//!   again, and a fetch under way is superseded (its answer may be of either run).
//! - **Quiet**: no batch has arrived for the status check's interval ([`crate::ResyncConfig`]).
//! - **Held**: kept aside, not yet ruled on: by the reorder window until its place comes, or,
//!   while the stream is unplaced, until a status point places it.
//!
//! # Rules
//! - **R1 (next).** A batch that continues the position applies: the next sequence and, where
//!   both are known, the next event id. After a loss (without resync) any later sequence with a
//!   later first event id continues it; at a status point, the point's sequence + 1 starting at
//!   `published_events` + 1.
//! - **R2 (copy).** A copy is skipped. Only the batches heard since the stream last forgot
//!   for another run tell copies, and an undecodable batch is never taken for one (R8).
//! - **R3 (before the point).** At a status point, a batch numbered at or before it whose event
//!   ids stay within `published_events` is skipped: the key list, read after the point, holds
//!   what it did (or it is another run's). Once such a batch came, queries miss until the stream
//!   continues the point (the key list may be of another run than the stream: a restart between
//!   the two reads), and a point not continued within the fetch timeout forgets. The batch at
//!   the point ending at `published_events`, or the next one (R1), continues it: from then on
//!   the stream stands at a batch, and a batch numbered at or before it is R5's. Numbers alone
//!   proved it, and another run of the same batch sizes has the same: before queries trust the
//!   point, the session asks the master whether it holds a sample of what the index claims
//!   (`/batch_query_keys`), and forgets if one is absent or no answer comes within the round
//!   timeout (the point check). The point's own batch arriving after the point placed the
//!   stream came late like those before it: it is checked so too.
//! - **R4 (loss).** A batch numbered past the next one, with a first event id past the
//!   position's, shows lost batches: forget. With a reorder window it is held first (R7).
//! - **R5 (another run).** Any other batch cannot be of the position's run after it: another
//!   run's (a restart nobody saw), or, with a reorder window, a late one: forget. So is a batch
//!   with the sequence of one the stream heard since it last forgot for another run, and other
//!   bytes (a twin: within one run a sequence is given once), wherever it falls: before a
//!   status point too, when the batch heard came before the fetch. With resync, so is a copy of
//!   a batch heard (among the last 256 or more) under a run the stream has since left, where it
//!   would continue or pass the position: a late copy across a run change, whose numbers
//!   continuing the position prove nothing (twin runs number alike; found by the simulator,
//!   reorder-heavy seed 7400825, where such a copy was applied). The followed run's own batch
//!   with the same bytes cannot be told from it: it forgets too (misses until the resync).
//! - **R6 (placing).** After a forget, with resync on, only the master's status places the
//!   stream: the batches that arrive after the next fetch was asked are held, and ruled against
//!   its status point (R1-R5) when it answers (without a window, one numbered at or below the
//!   batch heard before it is R5's at once); every other batch came before that status was
//!   read, so its key list holds what it did (or it is another run's), and it is dropped. A
//!   status point numbered below the last batch heard on the connection before the fetch was
//!   asked (when decodable) is another run's (it was read after that batch): the batches held
//!   for it may be of either run, so with any held it places nothing and forgets, and the next
//!   fetch compares with no batch heard before it (a restart nobody saw; found by the
//!   exhaustive checker); with none held, the point places the stream. Without a status (an
//!   old master), the stream continues exactly from the last batch heard on the connection
//!   before the fetch was asked (the key list was read after it); with none heard, the last one
//!   undecodable (nothing continues it exactly), or with a reorder window, it cannot be placed,
//!   and the fetch is asked again (when a batch arrives, or after a doubling delay). Without
//!   resync, the batch that forgot begins the stream: over one connection delivery is in
//!   order, so it is the live run's.
//! - **R7 (reorder window).** The window only reorders: it holds batches numbered past the next
//!   one and releases them in order as the hole fills; when it holds more than `max_held`, or its
//!   oldest batch has waited `max_delay`, it declares a loss (R4). It needs resync
//!   ([`crate::ConfigError::ReorderWithoutResync`]): a late batch can pass for any place, so
//!   after a loss only the master's status can place the stream (R6). A batch applied after one
//!   that arrived after it may be a late batch of a run the stream left, continued by the next
//!   run's batches with event ids that run on (found by the exhaustive checker): queries miss
//!   from before it is applied until the master answers for every page it stored (the point
//!   check, R3, asking about those alone; after a key list is handed over), and the index
//!   forgets if one is absent and still claimed, if the answer leaves one out, or at once if
//!   one is another tenant's (verification asks about the default tenant only). The check
//!   proves what that batch stored, not its run: the left run's later batches that arrive in
//!   order continue it, R10's class (bounded, not detected).
//! - **R8 (undecodable).** A batch whose sequence can be read but whose events cannot consumed
//!   its place and changed what is unknown: it forgets wherever it falls (before a status point
//!   too: it may be another run's; with a reorder window, once its place comes); without
//!   resync the next batch must run past the point the stream stood at (R1 after a loss: the
//!   undecodable batch's own sequence may be as garbled as its payload).
//! - **R9 (reconnect, clear).** A new connection, a stopped driver or an operator's clear
//!   forgets (R6); without resync the position stays, so that another run's first batch is told
//!   (R5). A new endpoint or leader begins a new stream: nothing of the old one is compared.
//! - **R10 (bounded, not detected).** A batch of another run that continues the position
//!   exactly (R1 cannot tell it: that run's earlier batches were lost and had the same sizes,
//!   or the position is a late batch of its own, R7), and, without a status check (R11), a
//!   restart that no transport saw after which no batch came, leave objects claimed that the
//!   master no longer holds: verification finds them absent within a round. Their other side
//!   costs misses, unbounded until the page changes again or a key list is read: what such a
//!   run stored in batches its queue dropped before the continuing one, and what a run stored
//!   in dropped batches when its status equals the position the index stands at (the status
//!   check, R11, cannot tell the two runs).
//! - **R11 (quiet stream).** With resync on, a stream placed by a status point that hears no
//!   batch for the check interval reads the master's status again: at the position it
//!   confirms it; ahead of it (a later sequence, event ids no earlier), it forgets unless a
//!   batch arrives within another interval (a tail lost after the last batch); anything else is
//!   another run's (R5): forget. So too while queries miss until the stream continues its
//!   position (R3), where a status at the position forgets at once: the batch that would have
//!   continued it was lost, and none will come while the master is quiet. An answer asked
//!   before the last batch arrived is ignored.
//!
//! The stream never applies a batch after a later one of the same run.

mod check;
mod hold;
mod mark;
mod passed;
mod place;
mod ruling;
pub mod stream;
mod watermark;

pub use self::mark::{Mark, Print};
pub use self::place::{Place, Point, Position, Versus};
pub use self::ruling::{
    Forgot, HoldBounds, Placed, ReorderConfig, Ruling, Skip, StreamConfig, Why,
};
pub use self::stream::Stream;
pub use self::watermark::Watermark;
