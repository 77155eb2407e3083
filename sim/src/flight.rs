//! What the session has been told, and what is still on its way to it: the horizon behind the
//! oracle's one excuse (see [`crate::oracle`]).
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
//!   intact (its sequence was consumed, its events are unknown).
//!
//! With a reorder window the session may hold what it was handed, or wait for a missing batch,
//! for up to the window's `max_delay`: a handed message and a revealed loss stay pending for that
//! long (the **grace**).
//!
//! This module keeps the losses and the grace; the world adds the master's queue and the messages
//! in flight when it asks for the horizon ([`Flight::horizon`]).

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use hicache_index::Instant;

use crate::network::MasterMeta;

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
    /// The intact message of the highest sequence handed, per master run.
    tails: std::collections::BTreeMap<u32, MasterMeta>,
    /// Every restart position.
    restarts: Vec<u64>,
    /// Restart positions whose first message was handed as an exact continuation of the old
    /// master's last one (sequence and event ids): invisible to every stream signal.
    invisible: Vec<u64>,
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

    /// A master message was handed to the session; `valid_seq` says whether its topic and
    /// sequence frame are intact (a copy with a damaged payload still reveals its own loss).
    /// Returns how many restarts it hid: it continues exactly (next sequence, next event id) the
    /// newest message handed of an older run, so every restart in between is invisible to the
    /// stream (see [`Flight::invisible`]).
    pub fn handed(&mut self, now: Instant, m: &MasterMeta, valid_seq: bool) -> usize {
        if !(m.intact || valid_seq) {
            return 0;
        }
        let mut hidden = 0;
        if m.intact {
            let i = m.id as usize;
            if self.handed.len() <= i {
                self.handed.resize(i + 1, false);
            }
            if !self.handed[i] {
                self.handed[i] = true;
                self.keep_for_grace(now, m.first_pos);
            }
            if let Some((_, prev)) = self.tails.range(..m.epoch).next_back() {
                let continues = m.seq == prev.seq + 1
                    && m.first_event_id == prev.first_event_id + prev.events as u64;
                if continues {
                    for &p in &self.restarts {
                        if p > prev.last_pos && p < m.first_pos && !self.invisible.contains(&p) {
                            self.invisible.push(p);
                            hidden += 1;
                        }
                    }
                }
            }
            let tail = self.tails.entry(m.epoch).or_insert(*m);
            if m.seq > tail.seq {
                *tail = *m;
            }
        }
        self.lost.remove(&(m.first_pos, m.id));
        // Everything lost before this message is revealed (an invisible restart is not).
        while let Some(&(pos, id)) = self.lost.first() {
            if pos >= m.first_pos {
                break;
            }
            self.lost.remove(&(pos, id));
            self.keep_for_grace(now, pos);
        }
        hidden
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

    /// Returns the oldest pending position this tracker knows (unrevealed losses, and handed
    /// messages and revealed losses within their grace), dropping expired grace. While the
    /// driver is stalled (since `stalled_since`), no grace expires: the session cannot act on
    /// its window.
    pub fn horizon(&mut self, now: Instant, stalled_since: Option<Instant>) -> Option<u64> {
        let now = stalled_since.map_or(now, |t| t.min(now));
        while self
            .grace_left
            .front()
            .is_some_and(|&(until, _, _)| until <= now)
        {
            self.grace_left.pop_front();
        }
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
        assert_eq!(f.handed(now, &meta(3, 1, 2, 6, 3), true), 1);
        assert_eq!(f.invisible(), &[3]);
        // A restart whose next batch does not continue is revealed as usual.
        f.restarted(9);
        assert_eq!(f.handed(now, &meta(4, 2, 1, 10, 1), true), 0);
    }
}
