//! What the session has been told, and what is still on its way to it: the horizon behind the
//! oracle's excuse of the stream's delay (see [`crate::oracle`]).
//!
//! A master event is **pending** for the session while the session cannot know it:
//! - it waits in the master's queue, unpublished;
//! - its message is in flight: in the network (latency, a partition holding it, a reordering
//!   delay) or queued at the subscriber while the driver is stalled; a message counts as told
//!   once any intact copy of it has been handed to the session (later copies, late copies
//!   included, tell nothing new);
//! - it was lost (a queue drop, a failed send, a network drop, a damaged copy, a message lost
//!   with the connection, the queue of a master that restarted, or the restart itself) and
//!   nothing has revealed the loss yet. A loss at history position `p` is revealed when the
//!   session is handed an intact message whose first event comes after `p` (its sequence or its
//!   event ids tell), or a copy of the lost message itself whose topic and sequence frame are
//!   intact (its sequence was consumed, its events are unknown). Once the master is idle and
//!   reachable and tells its counters to a session that can ask them, the world ends this
//!   excuse after a bound ([`Flight::expire_unrevealed`]): the session can ask
//!   `/kv_events/status`.
//!
//! With a reorder window the session may hold what it was handed, or wait for a missing batch,
//! for up to the window's `max_delay`: a handed message and a revealed loss stay pending for that
//! long (the **grace**). A message first handed after its place was passed (a later position's
//! grace had run out: the session had to move on) gets no grace: it must never be applied.
//!
//! This module also finds the one class no stream signal can reveal: a restart whose new run,
//! the first time the session hears of it, continues exactly what the session knew of the old
//! run ([`Flight::handed`]).
//!
//! This module keeps the losses and the grace; the world adds the master's queue and the messages
//! in flight when it asks for the horizon ([`Flight::horizon`]).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use hicache_index::Instant;

use crate::network::MasterMeta;

/// A status point a snapshot carried (`GET /kv_events/status`): the run's last sequence and its
/// event count, and the history position when its key list was read.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Point {
    /// `published_batches + dropped_events`.
    pub seq: u64,
    /// `published_events`: the last event id given.
    pub events: u64,
    /// The history position when the key list was read.
    pub at: u64,
}

/// How a message relates to a status point, by the rule a snapshot's proof uses: before the
/// point and ending at or below its count, at it and ending at it, or after it and starting
/// right after it; anything else contradicts it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Fit {
    Before,
    Passed,
    Contradicts,
}

fn fit(point: Point, m: &MasterMeta) -> Fit {
    use core::cmp::Ordering::{Equal, Greater, Less};
    let last = m.first_event_id + (m.events as u64).saturating_sub(1);
    match m.seq.cmp(&point.seq) {
        Less if last <= point.events => Fit::Before,
        Equal if last == point.events => Fit::Passed,
        Greater if m.first_event_id == point.events + 1 => Fit::Passed,
        _ => Fit::Contradicts,
    }
}

/// Restarts hidden while the new run's stream has not yet passed the old run's status point
/// that the session took: a later message may still contradict it.
#[derive(Clone, Debug)]
struct Provisional {
    epoch: u32,
    point: Point,
    restarts: Vec<u64>,
    span: (u64, u64),
}

/// What handing a message told: which restarts the stream hides, and whether it revealed a
/// loss.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Hiding {
    /// Restarts (their positions) no stream signal can reveal from now on.
    pub hidden: Vec<u64>,
    /// The positions strictly between these two hold everything the session missed behind
    /// those restarts (the old run's lost tail, the restarts, the new run's lost first
    /// messages): no signal reveals any of it.
    pub hidden_span: Option<(u64, u64)>,
    /// Restarts hidden before that this message revealed (it contradicts the status point).
    pub revealed: Vec<u64>,
    /// The span of [`Hiding::hidden_span`] that goes with them.
    pub revealed_span: Option<(u64, u64)>,
    /// It revealed a loss (its own, with a damaged payload, or one before it, a restart
    /// among them): a correct session forgets what may be stale.
    pub loss: bool,
}

/// The losses not yet revealed and the grace of what was handed (see the module docs).
#[derive(Debug, Default)]
pub struct Flight {
    handed: Vec<bool>,
    /// Losses not yet revealed: `(history position, message id)` (id 0 for the master's own).
    lost: BTreeSet<(u64, u64)>,
    /// Revealed losses and handed messages still in their grace: `(until, position)`.
    /// Each with whether a stall already extended it (once at most).
    grace_left: VecDeque<(Instant, u64, bool)>,
    grace: Duration,
    /// The highest position whose grace ran out: the session had to move past it.
    passed: u64,
    /// Messages first handed after their place was passed (see the module docs).
    after_passed: u64,
    /// The intact message of the highest sequence handed, per master run.
    tails: BTreeMap<u32, MasterMeta>,
    /// Per master run: the first position of its first message handed, and the lowest
    /// sequence handed (with a reorder window, a lower one handed while the first is still
    /// in its grace is the one the session applies first).
    firsts: BTreeMap<u32, (u64, u64)>,
    /// The status point of the newest snapshot the session took, per run that served it.
    points: BTreeMap<u32, Point>,
    /// The position of each restart, in order: restart `i` ended run `i`.
    restarts: Vec<u64>,
    /// Restart positions no stream signal can reveal (see [`Flight::handed`]).
    invisible: Vec<u64>,
    provisional: Vec<Provisional>,
}

impl Flight {
    /// Makes a tracker; `grace` is the reorder window's `max_delay` (zero without a window).
    pub fn new(grace: Duration) -> Flight {
        Flight {
            grace,
            ..Flight::default()
        }
    }

    /// Reports whether an intact copy of message `id` has been handed.
    pub fn is_handed(&self, id: u64) -> bool {
        self.handed.get(id as usize).copied().unwrap_or(false)
    }

    /// A loss of the master's own at `pos` (queue drop, failed send, restart).
    pub fn lost_at_master(&mut self, pos: u64) {
        self.lost.insert((pos, 0));
    }

    /// The master restarted at `pos` (also a loss: see [`Flight::lost_at_master`]).
    pub fn restarted(&mut self, pos: u64) {
        self.lost_at_master(pos);
        self.restarts.push(pos);
    }

    /// A message was lost in the network (one copy).
    pub fn lost_in_network(&mut self, first_pos: u64, id: u64) {
        if !self.is_handed(id) {
            self.lost.insert((first_pos, id));
        }
    }

    fn keep_for_grace(&mut self, now: Instant, pos: u64) {
        if !self.grace.is_zero() {
            self.grace_left.push_back((now + self.grace, pos, false));
        }
    }

    /// Drops the grace that ran out by `now`, remembering the highest position it passed.
    fn expire(&mut self, now: Instant) {
        while let Some(&(until, pos, _)) = self.grace_left.front() {
            if until > now {
                break;
            }
            self.grace_left.pop_front();
            self.passed = self.passed.max(pos);
        }
    }

    /// The session took a snapshot whose status point `point` was served by run `epoch` (the
    /// current run, or the one before a restart while the HTTP side lagged behind it).
    pub fn took_status(&mut self, epoch: u32, point: Point) {
        self.points.insert(epoch, point);
    }

    /// A master message was handed to the session; `valid_seq` says whether its topic and
    /// sequence frame are intact (a copy with a damaged payload still reveals its own loss).
    ///
    /// Returns the restarts it hides or reveals. A restart is hidden (no stream signal can
    /// reveal it) when the first message of its new run the session is handed (with a reorder
    /// window: or one of a lower sequence, handed while that first one is still in its grace,
    /// so that the session applies it first) continues exactly what the session knew of the
    /// newest older run: the next sequence and the next
    /// event id after that run's newest message handed, and, if the session took a snapshot
    /// of that run whose status point lies beyond that message (or took one and was handed
    /// none of that run), consistent with the point as the snapshot's proof reads it. While
    /// the new run has not passed that point, a later message of it that contradicts the point
    /// reveals the restart again.
    pub fn handed(&mut self, now: Instant, m: &MasterMeta, valid_seq: bool) -> Hiding {
        let mut hiding = Hiding::default();
        if !(m.intact || valid_seq) {
            return hiding;
        }
        if m.intact {
            self.expire(now);
            let i = m.id as usize;
            if self.handed.len() <= i {
                self.handed.resize(i + 1, false);
            }
            if !self.handed[i] {
                self.handed[i] = true;
                if m.first_pos < self.passed {
                    self.after_passed += 1;
                } else {
                    self.keep_for_grace(now, m.first_pos);
                }
            }
            match self.firsts.get_mut(&m.epoch) {
                None => {
                    self.firsts.insert(m.epoch, (m.first_pos, m.seq));
                    self.first_of_run(m, &mut hiding);
                }
                Some((first_pos, lowest)) => {
                    // Reordered ahead of the run's first message while that one is still held:
                    // in sequence order this one comes first, so it may hide the restart.
                    let first_pos = *first_pos;
                    let earlier = m.seq < *lowest;
                    *lowest = (*lowest).min(m.seq);
                    let held = self.grace_left.iter().any(|&(_, p, _)| p == first_pos);
                    if earlier && held {
                        self.first_of_run(m, &mut hiding);
                    }
                    self.check_provisional(m, &mut hiding);
                }
            }
            let tail = self.tails.entry(m.epoch).or_insert(*m);
            if m.seq > tail.seq {
                *tail = *m;
            }
        }
        hiding.loss = self.lost.remove(&(m.first_pos, m.id)) || !m.intact;
        // Everything lost before this message is revealed (an invisible restart is not).
        while let Some(&(pos, id)) = self.lost.first() {
            if pos >= m.first_pos {
                break;
            }
            self.lost.remove(&(pos, id));
            self.keep_for_grace(now, pos);
            // Behind a hidden restart the stream runs on: what was lost there is hidden too.
            hiding.loss |= hiding.hidden.is_empty();
        }
        hiding
    }

    /// The first message handed of run `m.epoch`: does it hide the restarts before it?
    fn first_of_run(&mut self, m: &MasterMeta, hiding: &mut Hiding) {
        if self.points.contains_key(&m.epoch) {
            // The session took this run's counters before any of its messages: whether they
            // told it the restart is not modelled, so the restart is not hidden (stricter).
            return;
        }
        let older = self
            .tails
            .range(..m.epoch)
            .next_back()
            .map(|(&e, _)| e)
            .into_iter()
            .chain(self.points.range(..m.epoch).next_back().map(|(&e, _)| e))
            .max();
        let Some(old) = older else {
            return;
        };
        let tail = self.tails.get(&old);
        let point = self
            .points
            .get(&old)
            .copied()
            .filter(|p| tail.is_none_or(|t| p.seq > t.seq));
        // The newest thing the session knew of the old run: a status point beyond its last
        // message (checked below), or else that message, which the new run must continue.
        if let (Some(t), None) = (tail, point) {
            let continues =
                m.seq == t.seq + 1 && m.first_event_id == t.first_event_id + t.events as u64;
            if !continues {
                return;
            }
        }
        let fits = point.map(|p| fit(p, m));
        if fits == Some(Fit::Contradicts) {
            return;
        }
        // What the session missed: after the newest thing it knew of the old run (its last
        // message, or the key list it took after that), up to this message.
        let from = tail
            .map(|t| t.last_pos)
            .into_iter()
            .chain(point.map(|p| p.at))
            .max()
            .unwrap_or(0);
        let span = (from, m.first_pos);
        let restarts: Vec<u64> = self
            .restarts
            .iter()
            .take(m.epoch as usize)
            .skip(old as usize)
            .copied()
            .filter(|p| !self.invisible.contains(p))
            .collect();
        if restarts.is_empty() {
            return;
        }
        self.invisible.extend(&restarts);
        hiding.hidden.extend(&restarts);
        hiding.hidden_span = Some(span);
        if let (Some(point), Some(Fit::Before)) = (point, fits) {
            self.provisional.push(Provisional {
                epoch: m.epoch,
                point,
                restarts,
                span,
            });
        }
    }

    /// A later message of a run whose restart is hidden until it passes a status point.
    fn check_provisional(&mut self, m: &MasterMeta, hiding: &mut Hiding) {
        let mut i = 0;
        while i < self.provisional.len() {
            let p = &self.provisional[i];
            if p.epoch != m.epoch {
                i += 1;
                continue;
            }
            match fit(p.point, m) {
                Fit::Before => i += 1,
                Fit::Passed => {
                    self.provisional.swap_remove(i);
                }
                Fit::Contradicts => {
                    let p = self.provisional.swap_remove(i);
                    self.invisible.retain(|r| !p.restarts.contains(r));
                    hiding.revealed.extend(p.restarts);
                    hiding.revealed_span = Some(p.span);
                }
            }
        }
    }

    /// The driver was stalled from `from` to `until`: it handed nothing, and the session could
    /// not act on its reorder window; what was still in its grace when the stall began keeps it
    /// until just after the stall (the session's overdue timer fires at once when the driver
    /// comes back, before any new stall: a millisecond of slack for the order of things at that
    /// instant). Once only: the excuse stays bounded by the window plus one stall.
    pub fn stalled(&mut self, from: Instant, until: Instant) {
        let slack = until + Duration::from_millis(1);
        for entry in &mut self.grace_left {
            if entry.0 > from && !entry.2 {
                entry.0 = entry.0.max(slack);
                entry.2 = true;
            }
        }
        self.grace_left.make_contiguous().sort_unstable();
    }

    /// Returns the restarts the stream could not reveal (see [`Flight::handed`]).
    pub fn invisible(&self) -> &[u64] {
        &self.invisible
    }

    /// Returns how many messages were first handed after their place was passed.
    pub fn after_passed(&self) -> u64 {
        self.after_passed
    }

    /// Returns the position of the oldest loss nothing has revealed yet.
    pub fn first_unrevealed(&self) -> Option<u64> {
        self.lost.first().map(|&(p, _)| p)
    }

    /// Ends the excuse of every loss nothing revealed (the master has been idle and reachable
    /// long enough for the session to ask its counters); returns how many there were.
    pub fn expire_unrevealed(&mut self) -> usize {
        let n = self.lost.len();
        self.lost.clear();
        n
    }

    /// Returns the oldest pending position this tracker knows (unrevealed losses, and handed
    /// messages and revealed losses within their grace), dropping expired grace. While the
    /// driver is stalled (since `stalled_since`), no grace expires: the session cannot act on
    /// its window.
    pub fn horizon(&mut self, now: Instant, stalled_since: Option<Instant>) -> Option<u64> {
        let now = stalled_since.map_or(now, |t| t.min(now));
        self.expire(now);
        let lost = self.lost.first().map(|&(p, _)| p);
        let grace = self.grace_left.iter().map(|&(_, p, _)| p).min();
        lost.into_iter().chain(grace).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(id: u64, epoch: u32, seq: u64, first_pos: u64, first_event_id: u64) -> MasterMeta {
        MasterMeta {
            id,
            epoch,
            seq,
            first_pos,
            last_pos: first_pos + 1,
            first_event_id,
            events: 2,
            intact: true,
            late: false,
        }
    }

    #[test]
    fn a_loss_is_pending_until_a_later_message_is_handed() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.handed(now, &meta(1, 0, 1, 1, 1), true);
        f.lost_in_network(3, 2);
        assert_eq!(f.horizon(now, None), Some(3));
        f.handed(now, &meta(3, 0, 3, 5, 5), true);
        assert_eq!(f.horizon(now, None), None);
    }

    #[test]
    fn a_damaged_copy_with_its_sequence_reveals_its_own_loss() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.lost_in_network(3, 2);
        let mut m = meta(2, 0, 2, 3, 3);
        m.intact = false;
        f.handed(now, &m, false);
        assert_eq!(
            f.horizon(now, None),
            Some(3),
            "a damaged sequence frame tells nothing"
        );
        f.handed(now, &m, true);
        assert_eq!(f.horizon(now, None), None);
    }

    #[test]
    fn grace_keeps_what_was_handed_pending_for_the_reorder_window() {
        let mut f = Flight::new(Duration::from_millis(10));
        f.handed(Instant::from_millis(1), &meta(1, 0, 1, 1, 1), true);
        assert_eq!(f.horizon(Instant::from_millis(5), None), Some(1));
        assert_eq!(f.horizon(Instant::from_millis(11), None), None);
    }

    #[test]
    fn grace_does_not_expire_while_the_driver_is_stalled() {
        let mut f = Flight::new(Duration::from_millis(10));
        f.handed(Instant::from_millis(1), &meta(1, 0, 1, 1, 1), true);
        let stalled = Some(Instant::from_millis(5));
        assert_eq!(f.horizon(Instant::from_millis(50), stalled), Some(1));
        f.stalled(Instant::from_millis(5), Instant::from_millis(60));
        assert_eq!(f.horizon(Instant::from_millis(60), None), Some(1));
        assert_eq!(f.horizon(Instant::from_millis(62), None), None);
    }

    #[test]
    fn a_restart_continued_exactly_is_invisible() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.handed(now, &meta(1, 0, 1, 1, 1), true);
        f.restarted(3);
        // The new master's first batch (seq 1, ids 1-2) was lost; its seq 2 starts at id 3.
        f.lost_in_network(4, 2);
        let told = f.handed(now, &meta(3, 1, 2, 6, 3), true);
        assert_eq!(told.hidden, [3]);
        // Everything after the old run's last message (position 2) up to this one is hidden.
        assert_eq!(told.hidden_span, Some((2, 6)));
        assert_eq!(f.invisible(), &[3]);
        // A restart whose next batch does not continue is revealed as usual.
        f.restarted(9);
        assert!(f.handed(now, &meta(4, 2, 1, 10, 1), true).hidden.is_empty());
    }

    #[test]
    fn a_continuing_message_reordered_ahead_of_the_runs_first_hides_the_restart() {
        let mut f = Flight::new(Duration::from_millis(10));
        let t = Instant::from_millis;
        f.handed(t(1), &meta(1, 0, 2, 1, 3), true);
        f.restarted(3);
        // The new run's seq 4 comes first, its seq 3 (continuing seq 2 exactly) 2 ms later,
        // while seq 4 is still held: the session applies seq 3 first.
        assert!(f
            .handed(t(20), &meta(3, 1, 4, 7, 7), true)
            .hidden
            .is_empty());
        assert_eq!(f.handed(t(22), &meta(2, 1, 3, 5, 5), true).hidden, [3]);
        // After the first one's grace, a lower sequence hides nothing.
        let mut g = Flight::new(Duration::from_millis(10));
        g.handed(t(1), &meta(1, 0, 2, 1, 3), true);
        g.restarted(3);
        g.handed(t(20), &meta(3, 1, 4, 7, 7), true);
        assert!(g
            .handed(t(31), &meta(2, 1, 3, 5, 5), true)
            .hidden
            .is_empty());
    }

    #[test]
    fn only_the_first_message_of_a_run_can_hide_its_restart() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.handed(now, &meta(1, 0, 1, 1, 1), true);
        f.restarted(3);
        // The new run's seq 1 went back: the restart is seen.
        assert!(f.handed(now, &meta(2, 1, 1, 4, 1), true).hidden.is_empty());
        // Its seq 2 (ids 3-4) continues the old run's last batch too: it hides nothing now.
        assert!(f.handed(now, &meta(3, 1, 2, 6, 3), true).hidden.is_empty());
        assert!(f.invisible().is_empty());
    }

    #[test]
    fn an_old_runs_status_point_hides_a_restart_until_the_new_run_contradicts_it() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        // A snapshot of run 0 at sequence 3, 6 events; no batch of run 0 was handed.
        f.took_status(
            0,
            Point {
                seq: 3,
                events: 6,
                at: 4,
            },
        );
        f.restarted(5);
        // Run 1's seq 1 (ids 1-2) fits before the point: hidden for now.
        assert_eq!(f.handed(now, &meta(1, 1, 1, 6, 1), true).hidden, [5]);
        // Its seq 2 ends at id 7 (5 events), before the point's sequence but past its count:
        // revealed.
        let mut m = meta(2, 1, 2, 8, 3);
        m.events = 5;
        assert_eq!(f.handed(now, &m, true).revealed, [5]);
        assert!(f.invisible().is_empty());
    }

    #[test]
    fn a_twin_run_that_passes_the_old_status_point_stays_hidden() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.took_status(
            0,
            Point {
                seq: 2,
                events: 4,
                at: 4,
            },
        );
        f.restarted(5);
        assert_eq!(f.handed(now, &meta(1, 1, 1, 6, 1), true).hidden, [5]);
        // Seq 2 ends exactly at id 4: the point is passed, as the proof would pass it.
        assert_eq!(f.handed(now, &meta(2, 1, 2, 8, 3), true), Hiding::default());
        // Nothing later can reveal it.
        let mut m = meta(3, 1, 3, 10, 5);
        m.events = 9;
        assert_eq!(f.handed(now, &m, true), Hiding::default());
        assert_eq!(f.invisible(), &[5]);
    }

    #[test]
    fn a_message_handed_after_its_place_was_passed_has_no_grace() {
        let mut f = Flight::new(Duration::from_millis(10));
        // Message 2 (position 5) is handed; message 1 (position 3) is still on its way.
        f.handed(Instant::from_millis(1), &meta(2, 0, 2, 5, 3), true);
        assert_eq!(f.horizon(Instant::from_millis(5), None), Some(5));
        // Its grace runs out: the session had to move past position 5.
        assert_eq!(f.horizon(Instant::from_millis(12), None), None);
        // Message 1 comes now: it must never be applied, so it excuses nothing.
        f.handed(Instant::from_millis(13), &meta(1, 0, 1, 3, 1), true);
        assert_eq!(f.horizon(Instant::from_millis(13), None), None);
        assert_eq!(f.after_passed(), 1);
    }

    #[test]
    fn an_unrevealed_loss_excuses_until_it_is_expired() {
        let mut f = Flight::new(Duration::ZERO);
        let now = Instant::from_millis(1);
        f.handed(now, &meta(1, 0, 1, 1, 1), true);
        // The last message was lost and nothing follows it.
        f.lost_in_network(3, 2);
        assert_eq!(f.first_unrevealed(), Some(3));
        assert_eq!(f.horizon(Instant::from_millis(10_000), None), Some(3));
        assert_eq!(f.expire_unrevealed(), 1);
        assert_eq!(f.horizon(Instant::from_millis(10_000), None), None);
    }
}
