//! Placing the stream (R6): the fetch whose status point places an unplaced stream, and the
//! batches held for it.

use super::*;

impl<T> Stream<T> {
    /// Reports whether a fetch asked now could be placed without a status (R6): without a
    /// reorder window, a decodable batch arrived on the current connection (its subscription
    /// took effect), which the fetch's key list will have been read after.
    pub fn can_anchor(&self) -> bool {
        self.heard.is_some() && !self.heard_undecodable && !self.config.reorder.is_on()
    }

    /// The subscriber connected again: no batch has arrived on this connection yet.
    pub fn connected(&mut self) {
        self.heard = None;
    }

    /// A fetch whose status will place the stream was asked for: while unplaced, the batches
    /// that arrive from now on are held for it (R6).
    pub fn fetch_asked(&mut self) {
        self.hold_for_fetch(self.position == Position::Unplaced);
        self.heard_before_fetch = self.heard.filter(|_| !self.heard_undecodable);
    }

    /// The fetch under way will not place the stream (it failed, or it was superseded): what
    /// is held for it is dropped (the next fetch's key list holds it).
    pub fn fetch_dropped(&mut self) {
        if self.position == Position::Unplaced {
            self.hold_for_fetch(false);
        }
    }

    fn hold_for_fetch(&mut self, on: bool) {
        self.hold.clear();
        self.holding = on;
    }

    /// Places an unplaced stream at a fetch's status point (`None`: the master did not tell),
    /// at `now` (R6). Then the caller takes what [`Stream::release`] releases.
    pub fn place(&mut self, now: Instant, at: Option<Point>) -> Placed {
        if let (Some(point), Some(heard)) = (at, self.heard_before_fetch) {
            if point.seq < heard.seq && self.hold.len() > 0 {
                // R6: the status was read after that batch, so it is another run's; what was
                // held for the fetch may be of either, and the stream stays unplaced. The
                // next fetch compares with nothing heard before this one. The batches heard
                // keep telling twins (R5): they may be of either run too. (With nothing held,
                // the point places the stream as any other.)
                self.unplace();
                self.heard = None;
                self.heard_before_fetch = None;
                return Placed::OtherRun { heard: heard.seq };
            }
        }
        self.holding = false;
        self.unproven_since = None;
        self.placed_with_before = false;
        self.latest_applied = 0;
        self.check.placed(now, at.is_some());
        match at {
            Some(point) => {
                self.position = Position::Status {
                    point,
                    before: None,
                };
                Placed::AtPoint
            }
            None => match self
                .heard_before_fetch
                .filter(|_| !self.config.reorder.is_on())
            {
                // The key list was read after the last batch heard before the fetch: the stream
                // continues from that batch, exactly.
                Some(point) => {
                    self.position = Position::Batch(point);
                    Placed::LastHeard
                }
                None => {
                    self.hold.clear();
                    Placed::Unanchored
                }
            },
        }
    }

    /// Reports whether the batch marked `m`, arriving while the stream holds batches for a
    /// status point, is numbered at or below the last batch heard on the connection: without a
    /// window the transport keeps one run's order, so it is another run's than that one, and
    /// the status point cannot tell which run it continues (R5, R6).
    pub(super) fn behind_heard(&self, m: &Mark) -> bool {
        self.holding
            && !self.config.reorder.is_on()
            && self.position == Position::Unplaced
            && self.heard.is_some_and(|h| m.seq <= h.seq)
            && !self.hold.holds_copy_of(m)
    }
}
