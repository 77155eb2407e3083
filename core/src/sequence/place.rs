//! Where the index stands in the stream, and where a batch belongs relative to it: one pure
//! function, [`Position::place`].

use super::mark::Mark;
use crate::frame::Seq;

/// A point of one run's stream: a sequence and the last event id given by then.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Point {
    /// The sequence at the point.
    pub seq: Seq,
    /// The last event id given at the point; `None` when the publisher does not number events
    /// (then event ids take no part in placing).
    pub last: Option<u64>,
}

/// Where the index stands in the stream (see [`crate::sequence`]'s terms).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// Nothing is known of this stream (a new endpoint, without resync): the next batch begins
    /// it.
    Fresh,
    /// With resync on, after a forget: only a status point can place the stream (R6).
    Unplaced,
    /// A snapshot's status point placed the stream, and no batch after it has applied yet;
    /// `before`: the last batch skipped before it (the next one must run past it: the batches
    /// before the point are one run's, in order).
    Status {
        /// The status point.
        point: Point,
        /// The last batch skipped at or before the point, if any.
        before: Option<Point>,
    },
    /// The last batch applied.
    Batch(Point),
    /// Without resync, after a loss (a reconnect, a clear, an undecodable batch): the point the
    /// next batch must run past.
    Loss(Point),
}

/// Where a batch belongs relative to a [`Position`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// It continues the position (R1).
    Next,
    /// At or before the status point, within its event ids (R3); `proves`: it is the batch at
    /// the point, ending at the point's event id, so the stream continues the point.
    Before {
        /// It is the batch at the point and ends exactly at its event id.
        proves: bool,
    },
    /// Later than the next one, with later event ids: batches were lost before it (R4).
    Ahead {
        /// The sequence that was expected.
        expected: Seq,
    },
    /// It cannot be of the position's run after it (R5).
    Other,
    /// The stream is unplaced: only a status point can place it (R6).
    Wait,
}

/// Where the master's status stands relative to a placed [`Position`] (R11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Versus {
    /// The status is the position: nothing was published after it.
    Same,
    /// The status is later than the position, with event ids no earlier: batches were
    /// published after it that have not arrived (on their way, or lost).
    Ahead,
    /// The status cannot be of the position's run after it (R5's test, for a status).
    Other,
}

/// Whether event ids run on past `last`: `first > last`, or either unknown.
fn runs_past(last: Option<u64>, first: Option<u64>) -> bool {
    match (last, first) {
        (Some(last), Some(first)) => first > last,
        _ => true,
    }
}

/// Whether event ids continue `last` exactly: `first == last + 1`, or either unknown.
fn continues(last: Option<u64>, first: Option<u64>) -> bool {
    match (last, first) {
        (Some(last), Some(first)) => last.checked_add(1) == Some(first),
        _ => true,
    }
}

impl Position {
    /// Tells where the batch marked `m` belongs relative to this position (copies are told
    /// apart before, by the stream's record of the batches it passed).
    ///
    /// Within one run sequences and event ids only grow, a batch numbered right after another
    /// starts at its last event id + 1, and a drop in the master's queue skips sequences, not
    /// event ids. So, from the last batch applied: the next sequence at the next event id is
    /// next; a later sequence at a later event id is a loss ahead; anything else is another
    /// run's. From a status point, whatever is numbered at or before it and ends within its
    /// event ids is before it.
    pub fn place(&self, m: &Mark) -> Place {
        let next = |p: &Point| p.seq.0.checked_add(1).map(Seq);
        match self {
            Position::Fresh => Place::Next,
            Position::Unplaced => Place::Wait,
            Position::Batch(p) => match next(p) {
                Some(n) if m.seq == n && continues(p.last, m.first) => Place::Next,
                Some(n) if m.seq > n && runs_past(p.last, m.first) => Place::Ahead { expected: n },
                _ => Place::Other,
            },
            Position::Loss(p) if m.seq > p.seq && runs_past(p.last, m.first) => Place::Next,
            Position::Loss(_) => Place::Other,
            Position::Status { point: p, before } if m.seq <= p.seq => {
                let past_ids = m.last.is_some() && p.last.is_some() && runs_past(p.last, m.last);
                let chained = before.is_none_or(|b| m.seq > b.seq && runs_past(b.last, m.first));
                if past_ids || !chained {
                    return Place::Other;
                }
                Place::Before {
                    proves: m.seq == p.seq && m.last.is_some() && m.last == p.last,
                }
            }
            Position::Status { point: p, .. } => match next(p) {
                Some(n) if m.seq == n && continues(p.last, m.first) => Place::Next,
                Some(n) if m.seq > n && runs_past(p.last, m.first) => Place::Ahead { expected: n },
                _ => Place::Other,
            },
        }
    }

    /// Tells where the master's status `status` stands relative to this position, `None` when
    /// the position is not placed at a point (R11). Within one run the last sequence and the
    /// last event id only grow: the same sequence at the same event id is the position, a later
    /// sequence at an event id no earlier is ahead of it, anything else is another run's.
    pub fn against(&self, status: Point) -> Option<Versus> {
        let p = match *self {
            Position::Batch(p) | Position::Status { point: p, .. } => p,
            Position::Fresh | Position::Unplaced | Position::Loss(_) => return None,
        };
        let ids_equal = match (p.last, status.last) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        let ids_no_earlier = match (p.last, status.last) {
            (Some(a), Some(b)) => b >= a,
            _ => true,
        };
        Some(if status.seq == p.seq && ids_equal {
            Versus::Same
        } else if status.seq > p.seq && ids_no_earlier {
            Versus::Ahead
        } else {
            Versus::Other
        })
    }

    /// Returns the point the stream stands at after the batch marked `m` applied here: its
    /// sequence, and its last event id (an empty batch gives none, so the last one stays).
    pub fn after(&self, m: &Mark) -> Point {
        let last = if m.events == 0 {
            self.last_id()
        } else {
            m.last
        };
        Point { seq: m.seq, last }
    }

    /// Returns the position after the batch marked `m` was skipped before the status point (R3):
    /// the next one must run past it.
    pub fn skipped_before(&self, m: &Mark) -> Position {
        match *self {
            Position::Status { point, before } => Position::Status {
                point,
                before: Some(Point {
                    seq: m.seq,
                    last: m.last.or(before.and_then(|b| b.last)),
                }),
            },
            other => other,
        }
    }

    /// Returns the point of this position, if it has one.
    pub fn point(&self) -> Option<Point> {
        match *self {
            Position::Status { point: p, .. } | Position::Batch(p) | Position::Loss(p) => Some(p),
            Position::Fresh | Position::Unplaced => None,
        }
    }

    /// Returns the last event id known at this position.
    pub fn last_id(&self) -> Option<u64> {
        self.point().and_then(|p| p.last)
    }
}
