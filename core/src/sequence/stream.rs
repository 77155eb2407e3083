//! The stream machine: the position, the batches it passed (to tell copies) and the batches it
//! holds, and the one ruling that turns a batch's place into what the session does.

use super::check::StatusCheck;
use super::hold::Hold;
use super::mark::Mark;
use super::passed::Heard;
use super::place::{Place, Point, Position};
use super::ruling::{Forgot, Placed, Ruling, Skip, StreamConfig, Why};
use crate::frame::Seq;
use crate::time::Instant;
use core::time::Duration;

/// One publisher stream's rules ([`crate::sequence`]); `T` is what the caller keeps of a held
/// batch.
#[derive(Debug)]
pub struct Stream<T> {
    config: StreamConfig,
    position: Position,
    /// The batches heard and the run they were heard under (R2, R5).
    passed: Heard,
    hold: Hold<T>,
    /// While unplaced: a fetch is under way whose status will place the stream, so batches are
    /// held for it (R6).
    holding: bool,
    /// The last batch that arrived on the current connection (no copy), if one did: its
    /// subscription took effect, and the stream stood there.
    heard: Option<Point>,
    /// The last batch heard could not be decoded: nothing continues it exactly (R6).
    heard_undecodable: bool,
    /// `heard` when the fetch under way was asked for, if it was decodable.
    heard_before_fetch: Option<Point>,
    /// At a status point: when a batch came before it while the stream had not continued it.
    unproven_since: Option<Instant>,
    /// Since the last placement, a held batch was skipped before its point.
    placed_with_before: bool,
    /// The stream continued a status point after batches before it came: only numbers proved
    /// it, and they cannot tell another run of the same sizes (R3).
    proved_after_doubt: bool,
    /// How many batches were offered (a held batch remembers its number: the order of arrival).
    arrivals: u64,
    /// The latest arrival among the batches the stream moved to since it was placed (0: none).
    latest_applied: u64,
    /// The batch just released arrived before one the stream moved to earlier (R7).
    reordered: bool,
    /// The holes the stream showed: how many, and how many sequences they skipped.
    holes: (u64, u64),
    /// The batch being offered was measured against a batch heard before it (its hole, if
    /// any, is counted already).
    hole_measured: bool,
    /// The check of the quiet stream against the master's status (R11).
    check: StatusCheck,
}

impl<T> Stream<T> {
    /// Makes the stream of a new connection's endpoint: fresh, or unplaced with resync on.
    pub fn new(config: StreamConfig) -> Stream<T> {
        Stream {
            position: Self::start(&config),
            config,
            passed: Heard::default(),
            hold: Hold::new(config.reorder.is_on()),
            holding: false,
            heard: None,
            heard_undecodable: false,
            heard_before_fetch: None,
            unproven_since: None,
            placed_with_before: false,
            proved_after_doubt: false,
            arrivals: 0,
            latest_applied: 0,
            reordered: false,
            holes: (0, 0),
            hole_measured: false,
            check: StatusCheck::new(
                config.resync.and_then(|b| b.status_check),
                config.resync.map_or(Duration::ZERO, |b| b.point_timeout),
            ),
        }
    }

    fn start(config: &StreamConfig) -> Position {
        if config.resync.is_some() {
            Position::Unplaced
        } else {
            Position::Fresh
        }
    }

    /// Returns the position.
    pub fn position(&self) -> Position {
        self.position
    }

    /// Returns the sequence of the last batch applied, if the stream stands at one.
    pub fn last_applied(&self) -> Option<Seq> {
        match self.position {
            Position::Batch(p) => Some(p.seq),
            _ => None,
        }
    }

    /// Returns how many batches are held.
    pub fn held(&self) -> usize {
        self.hold.len()
    }

    /// Returns when the batch held longest began its wait.
    pub fn held_since(&self) -> Option<Instant> {
        self.hold.oldest()
    }

    /// Returns the holes the stream showed: how many, and how many sequences they skipped
    /// (without a reorder window, every batch numbered past the one heard before it; with one,
    /// each hole the window gave up on).
    pub fn holes(&self) -> (u64, u64) {
        self.holes
    }

    /// Reports whether queries must miss: at a status point, a batch came before it and the
    /// stream has not continued it yet (R3).
    pub fn is_unproven(&self) -> bool {
        self.unproven_since.is_some()
    }

    /// Reports whether the stream continued a status point after batches before it came since
    /// this was last asked (R3: the master is asked whether it holds what the index claims).
    pub fn take_proved_after_doubt(&mut self) -> bool {
        core::mem::take(&mut self.proved_after_doubt)
    }

    /// Reports whether the batch just released by [`Stream::release`] arrived before a batch
    /// the stream moved to earlier (R7: the master is asked whether it holds what that batch
    /// stored, and queries miss until it answers).
    pub fn take_reordered(&mut self) -> bool {
        core::mem::take(&mut self.reordered)
    }

    /// Reports whether the stream waits for a status point to place it (R6).
    pub fn is_unplaced(&self) -> bool {
        self.position == Position::Unplaced
    }

    /// Rules on a batch that arrived at `now` (`bytes`: its payload's size; `keep` makes what
    /// is held of it, called only when the stream holds it). After [`Ruling::Apply`], or
    /// [`Ruling::Forget`] with `apply`, the caller MUST apply it; then it takes what
    /// [`Stream::release`] releases until `None`.
    pub fn offer(
        &mut self,
        now: Instant,
        mark: Mark,
        bytes: usize,
        keep: impl FnOnce() -> T,
    ) -> Ruling {
        // Without a window, the order batches arrive in is the publisher's: a batch numbered past
        // the one heard before it shows a hole, whatever it is ruled.
        // (An undecodable batch's own sequence may be as garbled as its payload: no hole.)
        let before = self
            .heard
            .filter(|_| !self.config.reorder.is_on() && !mark.undecodable);
        self.hole_measured = before.is_some();
        let arrival_hole =
            before.map_or(0, |h| mark.seq.0.saturating_sub(h.seq.0.saturating_add(1)));
        self.count_hole(arrival_hole);
        self.arrivals += 1;
        let mut ruling = self.rule(now, &mark, None);
        self.hole_measured = false;
        if ruling == Ruling::Hold && !mark.undecodable && self.hold.holds_copy_of(&mark) {
            // R2: a copy of a batch held, not heard again (an undecodable one is heard: R8).
            ruling = Ruling::Skip(Skip::Copy);
        }
        if ruling != Ruling::Skip(Skip::Copy) {
            self.check.heard(now);
            let last = if mark.undecodable {
                None
            } else if mark.events == 0 {
                self.heard.and_then(|p| p.last)
            } else {
                mark.last
            };
            self.heard = Some(Point {
                seq: mark.seq,
                last,
            });
            self.heard_undecodable = mark.undecodable;
            if ruling == Ruling::Hold {
                // Heard now, whatever becomes of it: if the hold is dropped, its twins still
                // show another run (R5).
                self.remember(&mark, false);
            }
        }
        match ruling {
            Ruling::Hold => self.keep(now, mark, bytes, keep()),
            ruling => ruling,
        }
    }

    /// The rules (module [`crate::sequence`]): the batch's place, then what the session does.
    /// `held`: a held batch released (never held again), with its place in the order of
    /// arrival.
    fn rule(&mut self, now: Instant, m: &Mark, held: Option<u64>) -> Ruling {
        let arriving = held.is_none();
        let kin = self.passed.kin_of(m);
        // R2: a copy of a batch heard under the followed run.
        if kin.copy {
            return Ruling::Skip(Skip::Copy);
        }
        let reorder = self.config.reorder.is_on();
        // R5: a late copy of a batch of a run the stream left, where it would continue or pass
        // the position (before a point, R3 skips it anyway). Only with resync: without, the
        // batch that forgets for another run begins the stream (R6), so forgetting gains
        // nothing.
        let mut left_run_copy = false;
        let place = if kin.twin || (arriving && self.behind_heard(m)) {
            // R5: numbered like a batch of the followed run with other bytes, or, held for a
            // status point, at or below the batch heard before it over one connection.
            Place::Other
        } else {
            match self.position.place(m) {
                Place::Next | Place::Ahead { .. }
                    if self.config.resync.is_some() && kin.left_run_copy =>
                {
                    left_run_copy = true;
                    Place::Other
                }
                place => place,
            }
        };
        let ruling = match place {
            Place::Ahead { .. } if reorder && arriving => return Ruling::Hold, // R7
            Place::Wait if self.holding && arriving => return Ruling::Hold,    // R6
            Place::Next | Place::Ahead { .. } | Place::Before { .. } | Place::Other
                if m.undecodable =>
            {
                self.forgot(Why::Undecodable, m) // R8
            }
            Place::Next => {
                self.position = Position::Batch(self.position.after(m)); // R1
                self.continued(now, arriving);
                self.moved(held); // R7
                Ruling::Apply
            }
            Place::Before { proves } => {
                // R3: skipped (in the key list); at the point's own batch the stream continues
                // it and stands there; before, queries miss until it continues.
                self.placed_with_before |= !arriving;
                if proves {
                    self.position = Position::Batch(self.position.after(m));
                    self.moved(held);
                    // Arriving after the point placed the stream, it came late like the others
                    // before the point: numbers alone prove the point, so it is checked.
                    if arriving {
                        self.unproven_since.get_or_insert(now);
                    }
                    self.continued(now, arriving);
                } else {
                    self.position = self.position.skipped_before(m);
                    self.unproven_since.get_or_insert(now);
                }
                Ruling::Skip(Skip::BeforePoint)
            }
            Place::Ahead { expected } => {
                // Its hole is counted as it arrived, against the batch heard before it, as the
                // stream showed it (a held batch released was measured so, or had none before
                // it); the first batch of a connection is measured against the position.
                let received = m.seq;
                if arriving && !self.hole_measured {
                    self.count_hole(received.0.saturating_sub(expected.0));
                }
                self.forgot(Why::Loss { expected, received }, m) // R4
            }
            Place::Other => self.forgot(Why::OtherRun, m), // R5
            Place::Wait => Ruling::Skip(Skip::Unplaced),   // R6
        };
        // A late copy of a left run's batch stays that run's: heard under the run just begun,
        // it would make the new run's own batch of its number a twin (a second forget).
        if !left_run_copy {
            self.remember(m, !m.undecodable);
        }
        ruling
    }

    /// The stream continued its position with the batch just ruled: if a batch came before a
    /// status point, queries trust the point again only once a batch that arrived after the
    /// placement continues it (R3: the held batches' order cannot show a run change among them).
    fn continued(&mut self, now: Instant, arriving: bool) {
        if arriving {
            self.proved_after_doubt |= self.unproven_since.take().is_some();
        } else if self.placed_with_before {
            self.unproven_since.get_or_insert(now);
        }
    }

    /// The stream moved to a batch (`held`: a held batch released, with its place in the order
    /// of arrival): one that arrived before a batch the stream moved to earlier may be a late
    /// batch of a run the stream left, continued by the next run's (R7).
    fn moved(&mut self, held: Option<u64>) {
        let arrival = held.unwrap_or(self.arrivals);
        self.reordered = arrival < self.latest_applied;
        self.latest_applied = self.latest_applied.max(arrival);
    }

    /// Forgets because of the batch `m`: with resync on the stream is unplaced and `m` dropped;
    /// without, `m` begins the stream (R6), or, undecodable, the next batch must run past the
    /// point the stream stood at (R8: its own sequence may be as garbled as its payload).
    fn forgot(&mut self, why: Why, m: &Mark) -> Ruling {
        let before = self.position;
        let position = before.point().map(|p| p.seq);
        if why == Why::OtherRun {
            self.run_changed();
        }
        self.unplace();
        if self.config.resync.is_some() {
            return Ruling::Forget(Forgot {
                why,
                apply: false,
                position,
            });
        }
        self.position = match before.point() {
            _ if !m.undecodable => Position::Batch(Position::Fresh.after(m)),
            Some(point) => Position::Loss(point),
            None => Position::Fresh,
        };
        Ruling::Forget(Forgot {
            why,
            apply: !m.undecodable,
            position,
        })
    }

    /// Holds `item` (marked `mark`); the window or the hold may overflow into a forget.
    fn keep(&mut self, now: Instant, mark: Mark, bytes: usize, item: T) -> Ruling {
        if !self.hold.insert(now, self.arrivals, mark, bytes, item) {
            return Ruling::Skip(Skip::Copy); // R2: a copy of a batch held
        }
        if self.position == Position::Unplaced {
            let bounds = self
                .config
                .resync
                .expect("only a resyncing stream holds unplaced");
            if self.hold.len() > bounds.batches || self.hold.bytes() > bounds.bytes {
                self.unplace();
                return Ruling::Forget(Forgot {
                    why: Why::HoldFull,
                    apply: false,
                    position: None,
                });
            }
        } else if self.hold.len() > self.config.reorder.max_held {
            return self.declare_loss(); // R7
        }
        Ruling::Hold
    }

    /// R7: the window gives up on its hole: forget (the window needs resync: the stream is
    /// unplaced, and what it held came before the next fetch is asked, R6).
    fn declare_loss(&mut self) -> Ruling {
        let position = self.position.point().map(|p| p.seq);
        let expected = position.map_or(Seq(0), |p| Seq(p.0.saturating_add(1)));
        let received = self.hold.first().map_or(expected, |m| m.seq);
        // With a window, a hole is one it gave up on.
        self.count_hole(received.0.saturating_sub(expected.0).max(1));
        self.unplace();
        Ruling::Forget(Forgot {
            why: Why::Loss { expected, received },
            apply: false,
            position,
        })
    }

    /// Takes the next held batch whose place has come, with its ruling (as in
    /// [`Stream::offer`]); `None` when none has.
    pub fn release(&mut self, now: Instant) -> Option<(Mark, T, Ruling)> {
        let first = *self.hold.first()?;
        match self.position.place(&first) {
            Place::Wait => return None,
            Place::Ahead { .. } if self.config.reorder.is_on() => return None,
            _ => {}
        }
        let held = self.hold.take_first().expect("a first held batch");
        let ruling = self.rule(now, &held.mark, Some(held.arrival));
        Some((held.mark, held.item, ruling))
    }

    /// Counts a hole of `missing` sequences (none: no hole).
    fn count_hole(&mut self, missing: u64) {
        if missing > 0 {
            self.holes.0 += 1;
            self.holes.1 += missing;
        }
    }

    /// The stream forgot because of another run's batch or status (R5, R11).
    pub(super) fn run_changed(&mut self) {
        self.passed.run_changed();
    }

    /// Records a batch heard, to tell its copies (R2) and twins (R5).
    fn remember(&mut self, m: &Mark, tells_copies: bool) {
        let keep = self.config.reorder.max_held.saturating_mul(4);
        self.passed.remember(m, tells_copies, keep);
    }

    /// Drops what is held and unplaces the stream (resync on).
    fn unplace(&mut self) {
        self.hold.clear();
        self.holding = false;
        self.latest_applied = 0;
        self.reordered = false;
        self.unproven_since = None;
        self.placed_with_before = false;
        self.proved_after_doubt = false;
        if self.config.resync.is_some() {
            self.position = Position::Unplaced;
        }
    }

    /// The index forgot for a reason outside the stream (a lost or new connection, a clear, a
    /// verification, a stopped driver): R6 with resync on; without, the position stays, as a
    /// point the next batch must run past (R9).
    pub fn forget(&mut self) {
        self.unplace();
        if let Position::Batch(p) | Position::Status { point: p, .. } = self.position {
            self.position = Position::Loss(p);
        }
    }

    /// A new endpoint or leader: a new stream, of which nothing is known (R9).
    pub fn begin_anew(&mut self) {
        self.unplace();
        self.passed.clear();
        self.position = Self::start(&self.config);
    }
}

#[path = "placing.rs"]
mod placing;

#[path = "timers.rs"]
mod timers;

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
