//! The check of a quiet stream against the master's status (R11): when it is due, and what an
//! answer means.

use core::time::Duration;

use super::place::{Point, Position, Versus};
use super::ruling::{Forgot, Ruling, Why};
use crate::frame::Seq;
use crate::time::Instant;

/// Where the check stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing asked since `since` (the last batch that arrived, the placement, or the last
    /// answer): the next check is due `every` after it.
    Quiet { since: Instant },
    /// The status was asked for by `request`; it is given up on at `deadline`.
    Asked { request: u64, deadline: Instant },
    /// The status was ahead of the position at `status`: unless a batch arrives by `until`,
    /// what it showed was lost.
    Ahead { status: Point, until: Instant },
}

/// The check of a quiet stream (R11).
#[derive(Clone, Copy, Debug)]
pub(super) struct StatusCheck {
    /// How long the stream stays quiet before a check; `None`: never checked.
    every: Option<Duration>,
    /// How long an answer may take.
    answer_within: Duration,
    /// The master told its counters when it last placed the stream: checks can compare.
    tells: bool,
    state: State,
}

impl StatusCheck {
    pub(super) fn new(every: Option<Duration>, answer_within: Duration) -> StatusCheck {
        StatusCheck {
            every,
            answer_within,
            tells: false,
            state: State::Quiet {
                since: Instant::ZERO,
            },
        }
    }

    /// A batch arrived at `now`: the stream is not quiet, and an answer under way is stale.
    pub(super) fn heard(&mut self, now: Instant) {
        self.state = State::Quiet { since: now };
    }

    /// The stream was placed at `now`, at a status point when `tells`.
    pub(super) fn placed(&mut self, now: Instant, tells: bool) {
        self.tells = tells;
        self.state = State::Quiet { since: now };
    }

    /// Reports whether checks can run at `position`.
    fn armed(&self, position: Position) -> bool {
        self.every.is_some()
            && self.tells
            && matches!(position, Position::Batch(_) | Position::Status { .. })
    }

    /// Returns when the next status must be asked for, if a check is to be asked.
    pub(super) fn due(&self, position: Position) -> Option<Instant> {
        match (self.state, self.every) {
            (State::Quiet { since }, Some(every)) if self.armed(position) => Some(since + every),
            _ => None,
        }
    }

    /// The status was asked for at `now` by `request`.
    pub(super) fn asked(&mut self, now: Instant, request: u64) {
        self.state = State::Asked {
            request,
            deadline: now + self.answer_within,
        };
    }

    /// Rules on the status `status` (`None`: not told) answering `request` at `now`: a forget,
    /// or `None` (the same point, an answer not awaited, or not told). `unproven`: the stream
    /// waits for a batch to continue its position (R3), which the same point shows will not
    /// come.
    pub(super) fn answered(
        &mut self,
        now: Instant,
        request: u64,
        status: Option<Point>,
        position: Position,
        unproven: bool,
    ) -> Option<Ruling> {
        if !matches!(self.state, State::Asked { request: r, .. } if r == request) {
            return None; // a batch arrived since it was asked, or another was asked
        }
        self.state = State::Quiet { since: now };
        if !self.armed(position) {
            return None;
        }
        match position.against(status?)? {
            // Nothing was published after the position the stream waits to see continued:
            // its batch was lost, and nothing will continue it while the master stays quiet.
            Versus::Same if unproven => Some(forget(Why::Unproven, position)),
            Versus::Same => None,
            Versus::Ahead => {
                let every = self.every.expect("armed");
                self.state = State::Ahead {
                    status: status?,
                    until: now + every,
                };
                None
            }
            Versus::Other => Some(forget(
                Why::StatusOfOtherRun {
                    status: status?.seq,
                },
                position,
            )),
        }
    }

    /// Returns when [`StatusCheck::handle_timeout`] is due: an answer given up on, or the end of
    /// the wait for what a status ahead showed.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Quiet { .. } => None,
            State::Asked { deadline, .. } => Some(deadline),
            State::Ahead { until, .. } => Some(until),
        }
    }

    /// Does what is due at `now`: a forget when a status ahead was not caught up with, and the
    /// missing sequences; `None` otherwise.
    pub(super) fn handle_timeout(
        &mut self,
        now: Instant,
        position: Position,
    ) -> Option<(Ruling, u64)> {
        match self.state {
            State::Asked { deadline, .. } if deadline <= now => {
                self.state = State::Quiet { since: now };
                None
            }
            State::Ahead { status, until } if until <= now => {
                self.state = State::Quiet { since: now };
                let at = position.point()?.seq;
                let expected = Seq(at.0.saturating_add(1));
                let missing = status.seq.0.saturating_sub(at.0);
                let why = Why::TailLost {
                    expected,
                    status: status.seq,
                };
                Some((forget(why, position), missing))
            }
            _ => None,
        }
    }
}

/// A forget at `position` (with resync on, the only way checks run: the caller unplaces).
fn forget(why: Why, position: Position) -> Ruling {
    Ruling::Forget(Forgot {
        why,
        apply: false,
        position: position.point().map(|p| p.seq),
    })
}
