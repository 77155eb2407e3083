//! The stream's timers: the reorder window, a status point to continue, and the check of a
//! quiet stream against the master's status (R11).

use super::*;

impl<T> Stream<T> {
    /// Returns when [`Stream::handle_timeout`] is next due: the reorder window's oldest batch
    /// giving up, a status point that must be continued, or a status check's (R11).
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.window_due(),
            self.point_due(),
            self.check.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn window_due(&self) -> Option<Instant> {
        match (self.position, self.config.reorder.max_delay) {
            (Position::Unplaced, _) | (_, None) => None,
            (_, Some(delay)) => self.hold.oldest().map(|at| at + delay),
        }
    }

    fn point_due(&self) -> Option<Instant> {
        let bounds = self.config.resync?;
        self.unproven_since
            .map(|since| since + bounds.point_timeout)
    }

    /// Does what is due at `now`: a forget ruling, or `None`.
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Ruling> {
        if self.point_due().is_some_and(|due| due <= now) {
            let position = self.position.point().map(|p| p.seq);
            self.unplace();
            return Some(Ruling::Forget(Forgot {
                why: Why::Unproven,
                apply: false,
                position,
            }));
        }
        if self.window_due().is_some_and(|due| due <= now) {
            return Some(self.declare_loss());
        }
        let (ruling, missing) = self.check.handle_timeout(now, self.position)?;
        self.count_hole(missing);
        self.unplace();
        Some(ruling)
    }

    /// Returns when the master's status must be asked for to check the quiet stream (R11), if
    /// a check is to be asked: the stream stands placed by a status point, and nothing arrived
    /// for the check interval.
    pub fn status_due(&self) -> Option<Instant> {
        self.check.due(self.position)
    }

    /// The master's status was asked for by `request` at `now` (R11).
    pub fn status_asked(&mut self, now: Instant, request: u64) {
        self.check.asked(now, request);
    }

    /// Rules on the master's status `status` (`None`: not told) answering `request` at `now`
    /// (R11): a forget the caller acts on, or `None`. An answer to a check asked before the last
    /// batch arrived is stale, and ignored.
    pub fn status_answered(
        &mut self,
        now: Instant,
        request: u64,
        status: Option<Point>,
    ) -> Option<Ruling> {
        let unproven = self.is_unproven();
        let ruling = self
            .check
            .answered(now, request, status, self.position, unproven)?;
        // Only a status of another run changes the run; a lost batch (`Unproven`) does not,
        // and the batches heard keep telling twins (R5).
        if let Ruling::Forget(Forgot {
            why: Why::StatusOfOtherRun { .. },
            ..
        }) = ruling
        {
            self.run_changed();
        }
        self.unplace();
        Some(ruling)
    }
}

#[cfg(test)]
#[path = "check_tests.rs"]
mod tests;
