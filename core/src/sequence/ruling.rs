//! What the stream machine answers: its rulings, and how it is set up.

use core::time::Duration;

use crate::frame::Seq;

/// What the session does with a batch (or, from a timer, without one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ruling {
    /// Apply it (R1).
    Apply,
    /// Skip it.
    Skip(Skip),
    /// The stream holds it (R6, R7).
    Hold,
    /// Forget; then apply the batch as the stream's beginning when `apply` says so.
    Forget(Forgot),
}

/// Why a batch is skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// A copy of a batch the stream passed or holds (R2).
    Copy,
    /// At or before the status point: the key list holds what it did (R3).
    BeforePoint,
    /// The stream is unplaced and no fetch is under way to place it: the next key list, read
    /// after it came, holds what it did (R6).
    Unplaced,
}

/// Why the stream forgot, and what becomes of the batch that showed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Forgot {
    /// Why.
    pub why: Why,
    /// The batch begins the stream: the session applies it after forgetting (R6, without
    /// resync).
    pub apply: bool,
    /// The sequence of the position before, if it had one.
    pub position: Option<Seq>,
}

/// Why the stream forgot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Batches were lost before this one (R4), or the reorder window gave up on a hole (R7).
    Loss {
        /// The sequence that was expected.
        expected: Seq,
        /// The sequence that arrived (or the first one the window held).
        received: Seq,
    },
    /// The batch cannot be of the position's run after it (R5).
    OtherRun,
    /// The batch could not be decoded, at its place (R8).
    Undecodable,
    /// The stream did not continue the status point within the fetch timeout (R3), or the
    /// master's status, read while the stream was quiet, showed nothing after the position it
    /// waited to see continued (R11).
    Unproven,
    /// The batches held for the status point outgrew the resync's buffer: the point could no
    /// longer place all of them.
    HoldFull,
    /// The master's status, read while the stream was quiet, showed batches after the position
    /// that did not arrive by the next check (R11): lost at the tail of a burst.
    TailLost {
        /// The sequence that was expected next.
        expected: Seq,
        /// The last sequence the master had assigned.
        status: Seq,
    },
    /// The master's status, read while the stream was quiet, cannot be of the position's run
    /// (R11): a restart nobody saw, after which no batch came.
    StatusOfOtherRun {
        /// The last sequence the master had assigned.
        status: Seq,
    },
}

/// How the stream is set up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamConfig {
    /// The reorder window.
    pub reorder: ReorderConfig,
    /// With resync on, the bounds of what waits for a status point and how long a point may
    /// stay uncontinued; `None`: resync off.
    pub resync: Option<HoldBounds>,
}

/// What the stream holds while unplaced, at most, and how long a status point may wait.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HoldBounds {
    /// The most batches held for a status point.
    pub batches: usize,
    /// The most payload bytes held for a status point.
    pub bytes: usize,
    /// How long after a batch came before the status point the stream must continue it; also
    /// how long a status check may go unanswered (R11).
    pub point_timeout: Duration,
    /// How long the stream stays quiet before the master's status is read to check it (R11);
    /// `None`: never checked.
    pub status_check: Option<Duration>,
}

/// How much reordering the transport can produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderConfig {
    /// The most out-of-order batches held while waiting for a hole to fill; 0 turns reordering
    /// off (every jump forward is loss at once, as over one ZeroMQ connection).
    pub max_held: usize,
    /// The longest a held batch waits for the hole before it is declared loss.
    pub max_delay: Option<Duration>,
}

impl ReorderConfig {
    /// Reports whether the transport can reorder (a window is configured).
    pub fn is_on(&self) -> bool {
        self.max_held > 0
    }
}

/// What a status point did to an unplaced stream ([`super::Stream::place`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Placed {
    /// The stream stands at the point; the held batches are released against it.
    AtPoint,
    /// The point is numbered below the batch heard before the fetch was asked: another run's
    /// (a restart nobody saw), and batches were held for it. The stream stays unplaced, what
    /// was held (of either run) is dropped and the batch heard is forgotten: the fetch must be
    /// asked again, the index forgetting (R6).
    OtherRun {
        /// The sequence of the batch heard before the fetch was asked.
        heard: Seq,
    },
    /// Without a status, the stream continues exactly from the last batch heard on the
    /// connection before the fetch was asked (R6).
    LastHeard,
    /// Without a status, the stream cannot be placed: the fetch must be asked again (R6).
    Unanchored,
}
