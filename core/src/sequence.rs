//! Per-stream ordering: which batch to apply, skip, hold, or read as loss or a restart.
//!
//! The rules (spec section 3):
//! - The first batch, and the first after [`SequenceTracker::reset`], is a new baseline whatever
//!   its sequence: no gap is reported for it.
//! - `seq == last + 1` applies, unless both batches carry event ids and the new batch's first
//!   event id does not come after the last one applied: event ids count a publisher's events
//!   from 1, so that is a publisher that started again whose first batches were lost (a
//!   restart). `seq == last` with the same fingerprint is a duplicate; with a different
//!   fingerprint it is a restart.
//! - A jump forward is loss. Without a reorder window it is reported at once. With one, the batch
//!   is held until the hole fills (then everything applies in order), until more than
//!   `max_held` batches wait, or until the oldest has waited `max_delay`: then the hole is loss.
//! - A jump backward is a restart, except, with a reorder window, a sequence within the window
//!   whose fingerprint matches the batch applied under that number: a late copy.
//!
//! The tracker never applies a later batch before an earlier one.

use alloc::collections::{BTreeMap, VecDeque};
use core::time::Duration;

use crate::frame::{Batch, Seq, Timestamp};
use crate::time::Instant;

/// How much reordering the transport can produce.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorderConfig {
    /// The most out-of-order batches held while waiting for a hole to fill; 0 turns reordering
    /// off (every jump forward is loss at once, as over one ZeroMQ connection).
    pub max_held: usize,
    /// The longest a held batch waits for the hole before it is declared loss.
    pub max_delay: Option<Duration>,
}

/// What identifies one batch beyond its sequence number, to tell a duplicate from a new batch
/// that reuses the number after a publisher restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    timestamp: u64,
    events: usize,
    first_event_id: Option<u64>,
    last_event_id: Option<u64>,
}

impl Fingerprint {
    /// Takes the fingerprint of a decoded batch.
    pub fn of(batch: &Batch<'_>) -> Fingerprint {
        let timestamp = match batch.timestamp {
            Timestamp::Millis(ms) => ms,
            Timestamp::Negative(v) => v as u64,
            Timestamp::Seconds(s) => s.to_bits(),
            Timestamp::Nil => u64::MAX,
        };
        Fingerprint {
            timestamp,
            events: batch.events.len(),
            first_event_id: batch.events.first().and_then(|e| e.event_id),
            last_event_id: batch.events.last().and_then(|e| e.event_id),
        }
    }
}

/// The tracker's ruling on one batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Apply it: it is the next in order, or a new baseline.
    Apply,
    /// The batch just applied under this number again: skip it.
    Duplicate,
    /// A late copy of a batch already applied within the reorder window: skip it.
    Late,
    /// Out of order within the reorder window: the caller hands it over with
    /// [`SequenceTracker::hold`].
    Hold,
    /// Batches were lost: the caller forgets what the stream taught, then applies this batch as
    /// the new baseline.
    Gap {
        /// The sequence that was expected.
        expected: Seq,
        /// How many sequence numbers were skipped.
        missing: u64,
    },
    /// The publisher started again: the caller forgets, then applies this batch as the new
    /// baseline.
    Restart {
        /// The last sequence applied from the old stream.
        last: Seq,
    },
}

/// A loss the tracker declared on its own (window overflow or deadline).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Loss {
    /// The sequence that was expected.
    pub expected: Seq,
    /// The first held sequence, now the new baseline.
    pub resumed: Seq,
}

/// Tracks one publisher stream's sequence; `T` is whatever the caller keeps of a held batch.
#[derive(Debug)]
pub struct SequenceTracker<T> {
    config: ReorderConfig,
    last: Option<(Seq, Fingerprint)>,
    recent: VecDeque<(Seq, Fingerprint)>,
    held: BTreeMap<u64, (Instant, Fingerprint, T)>,
}

impl<T> SequenceTracker<T> {
    /// Makes a tracker that has seen nothing.
    pub fn new(config: ReorderConfig) -> SequenceTracker<T> {
        SequenceTracker {
            config,
            last: None,
            recent: VecDeque::new(),
            held: BTreeMap::new(),
        }
    }

    /// Returns the last sequence applied.
    pub fn last_applied(&self) -> Option<Seq> {
        self.last.map(|(seq, _)| seq)
    }

    /// Returns how many batches are held.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Forgets the stream: the next batch is a new baseline, and held batches are dropped.
    /// Returns how many held batches were dropped.
    pub fn reset(&mut self) -> usize {
        self.last = None;
        self.recent.clear();
        let dropped = self.held.len();
        self.held.clear();
        dropped
    }

    /// Rules on a batch with sequence `seq`. After [`Verdict::Apply`], [`Verdict::Gap`] or
    /// [`Verdict::Restart`] the caller MUST apply the batch and then call
    /// [`SequenceTracker::applied`].
    pub fn observe(&mut self, seq: Seq, fingerprint: Fingerprint) -> Verdict {
        let Some((last, last_fp)) = self.last else {
            return Verdict::Apply;
        };
        if seq == last {
            return if fingerprint == last_fp {
                Verdict::Duplicate
            } else {
                self.restart(last)
            };
        }
        if seq.0 == last.0.wrapping_add(1) && seq.0 != 0 {
            return match (last_fp.last_event_id, fingerprint.first_event_id) {
                (Some(last_id), Some(first_id)) if first_id <= last_id => self.restart(last),
                _ => Verdict::Apply,
            };
        }
        if seq > last {
            if self.config.max_held == 0 {
                return Verdict::Gap {
                    expected: Seq(last.0 + 1),
                    missing: seq.0 - last.0 - 1,
                };
            }
            return match self.held.get(&seq.0) {
                Some((_, held_fp, _)) if *held_fp == fingerprint => Verdict::Duplicate,
                Some(_) => self.restart(last),
                None => Verdict::Hold,
            };
        }
        let late = self
            .recent
            .iter()
            .any(|&(s, fp)| s == seq && fp == fingerprint);
        if late {
            Verdict::Late
        } else {
            self.restart(last)
        }
    }

    fn restart(&mut self, last: Seq) -> Verdict {
        self.held.clear();
        self.recent.clear();
        Verdict::Restart { last }
    }

    /// Records that the batch `seq` was applied.
    pub fn applied(&mut self, seq: Seq, fingerprint: Fingerprint) {
        self.last = Some((seq, fingerprint));
        if self.config.max_held > 0 {
            self.recent.push_back((seq, fingerprint));
            while self.recent.len() > self.config.max_held {
                self.recent.pop_front();
            }
        }
    }

    /// Holds an out-of-order batch (after [`Verdict::Hold`]). Returns a loss when the window
    /// overflows: the caller then forgets, and drains with [`SequenceTracker::pop_ready`] from the
    /// new baseline.
    pub fn hold(
        &mut self,
        now: Instant,
        seq: Seq,
        fingerprint: Fingerprint,
        item: T,
    ) -> Option<Loss> {
        self.held.insert(seq.0, (now, fingerprint, item));
        if self.held.len() > self.config.max_held {
            return self.declare_loss();
        }
        None
    }

    /// Takes the held batch that applies next, if it is there. The caller MUST apply it and call
    /// [`SequenceTracker::applied`], then call this again until it returns `None`.
    pub fn pop_ready(&mut self) -> Option<(Seq, T)> {
        let next = match self.last {
            Some((last, _)) => last.0.checked_add(1)?,
            None => *self.held.keys().next()?,
        };
        let (_, _, item) = self.held.remove(&next)?;
        Some((Seq(next), item))
    }

    /// Returns when the batch held longest was held (it arrived then); `None` when none is.
    pub fn held_since(&self) -> Option<Instant> {
        self.held.values().map(|(at, _, _)| *at).min()
    }

    /// Returns when the oldest held batch stops waiting for its hole.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let delay = self.config.max_delay?;
        self.held_since().map(|at| at + delay)
    }

    /// Declares loss when the oldest held batch has waited too long. The caller then forgets and
    /// drains with [`SequenceTracker::pop_ready`].
    pub fn handle_timeout(&mut self, now: Instant) -> Option<Loss> {
        let deadline = self.poll_timeout()?;
        if now < deadline {
            return None;
        }
        self.declare_loss()
    }

    fn declare_loss(&mut self) -> Option<Loss> {
        let (&first, _) = self.held.iter().next()?;
        let expected = self
            .last
            .map_or(Seq(first), |(last, _)| Seq(last.0.wrapping_add(1)));
        self.last = None;
        self.recent.clear();
        Some(Loss {
            expected,
            resumed: Seq(first),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: u64) -> Fingerprint {
        Fingerprint {
            timestamp: n,
            events: 1,
            first_event_id: Some(n),
            last_event_id: Some(n),
        }
    }

    fn apply(t: &mut SequenceTracker<()>, seq: u64) -> Verdict {
        let v = t.observe(Seq(seq), fp(seq));
        if matches!(
            v,
            Verdict::Apply | Verdict::Gap { .. } | Verdict::Restart { .. }
        ) {
            t.applied(Seq(seq), fp(seq));
        }
        v
    }

    #[test]
    fn any_first_sequence_is_a_baseline() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        assert_eq!(apply(&mut t, 9_000), Verdict::Apply);
        assert_eq!(apply(&mut t, 9_001), Verdict::Apply);
    }

    #[test]
    fn same_sequence_same_fingerprint_is_a_duplicate() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 1);
        assert_eq!(t.observe(Seq(1), fp(1)), Verdict::Duplicate);
    }

    #[test]
    fn same_sequence_other_fingerprint_is_a_restart() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 1);
        assert_eq!(t.observe(Seq(1), fp(77)), Verdict::Restart { last: Seq(1) });
    }

    #[test]
    fn jump_forward_is_a_gap_counting_the_missing() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 1);
        assert_eq!(
            apply(&mut t, 5),
            Verdict::Gap {
                expected: Seq(2),
                missing: 3
            }
        );
        assert_eq!(apply(&mut t, 6), Verdict::Apply);
    }

    #[test]
    fn next_sequence_with_event_ids_starting_over_is_a_restart() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 7);
        let restarted = Fingerprint {
            timestamp: 1,
            events: 1,
            first_event_id: Some(1),
            last_event_id: Some(1),
        };
        assert_eq!(
            t.observe(Seq(8), restarted),
            Verdict::Restart { last: Seq(7) }
        );
        let continued = Fingerprint {
            timestamp: 8,
            events: 1,
            first_event_id: Some(8),
            last_event_id: Some(8),
        };
        assert_eq!(t.observe(Seq(8), continued), Verdict::Apply);
    }

    #[test]
    fn jump_backward_is_a_restart() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 10);
        assert_eq!(apply(&mut t, 1), Verdict::Restart { last: Seq(10) });
        assert_eq!(apply(&mut t, 2), Verdict::Apply);
    }

    #[test]
    fn reset_makes_the_next_batch_a_silent_baseline() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, 1);
        t.reset();
        assert_eq!(apply(&mut t, 50), Verdict::Apply);
    }

    #[test]
    fn sequence_at_u64_max_does_not_wrap_into_a_continuation() {
        let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
        apply(&mut t, u64::MAX);
        assert_eq!(
            apply(&mut t, 0),
            Verdict::Restart {
                last: Seq(u64::MAX)
            }
        );
    }

    #[test]
    fn reorder_within_window_applies_in_order() {
        let cfg = ReorderConfig {
            max_held: 4,
            max_delay: None,
        };
        let mut t = SequenceTracker::<u64>::new(cfg);
        apply_u(&mut t, 1);
        assert_eq!(t.observe(Seq(3), fp(3)), Verdict::Hold);
        assert!(t.hold(Instant::ZERO, Seq(3), fp(3), 3).is_none());
        assert_eq!(t.observe(Seq(2), fp(2)), Verdict::Apply);
        t.applied(Seq(2), fp(2));
        assert_eq!(t.pop_ready(), Some((Seq(3), 3)));
        t.applied(Seq(3), fp(3));
        assert_eq!(t.pop_ready(), None);
    }

    #[test]
    fn late_copy_within_window_is_skipped() {
        let cfg = ReorderConfig {
            max_held: 4,
            max_delay: None,
        };
        let mut t = SequenceTracker::<u64>::new(cfg);
        for s in 1..=3 {
            apply_u(&mut t, s);
        }
        assert_eq!(t.observe(Seq(2), fp(2)), Verdict::Late);
        assert_eq!(t.observe(Seq(2), fp(99)), Verdict::Restart { last: Seq(3) });
    }

    #[test]
    fn window_overflow_declares_loss() {
        let cfg = ReorderConfig {
            max_held: 2,
            max_delay: None,
        };
        let mut t = SequenceTracker::<u64>::new(cfg);
        apply_u(&mut t, 1);
        for s in [3, 4] {
            assert_eq!(t.observe(Seq(s), fp(s)), Verdict::Hold);
            assert!(t.hold(Instant::ZERO, Seq(s), fp(s), s).is_none());
        }
        assert_eq!(t.observe(Seq(5), fp(5)), Verdict::Hold);
        let loss = t.hold(Instant::ZERO, Seq(5), fp(5), 5);
        assert_eq!(
            loss,
            Some(Loss {
                expected: Seq(2),
                resumed: Seq(3)
            })
        );
        let order: alloc::vec::Vec<u64> = core::iter::from_fn(|| {
            let (seq, item) = t.pop_ready()?;
            t.applied(seq, fp(seq.0));
            Some(item)
        })
        .collect();
        assert_eq!(order, [3, 4, 5]);
    }

    #[test]
    fn held_batch_deadline_declares_loss_and_moves_forward() {
        let delay = Duration::from_millis(10);
        let cfg = ReorderConfig {
            max_held: 8,
            max_delay: Some(delay),
        };
        let mut t = SequenceTracker::<u64>::new(cfg);
        apply_u(&mut t, 1);
        let at = Instant::from_millis(100);
        assert_eq!(t.observe(Seq(3), fp(3)), Verdict::Hold);
        assert!(t.hold(at, Seq(3), fp(3), 3).is_none());
        assert_eq!(t.poll_timeout(), Some(at + delay));
        assert_eq!(t.handle_timeout(at), None, "an early timeout is a no-op");
        assert!(t.handle_timeout(at + delay).is_some());
        assert_eq!(t.pop_ready(), Some((Seq(3), 3)));
        t.applied(Seq(3), fp(3));
        assert_eq!(t.poll_timeout(), None);
    }

    fn apply_u(t: &mut SequenceTracker<u64>, seq: u64) {
        let v = t.observe(Seq(seq), fp(seq));
        assert!(matches!(
            v,
            Verdict::Apply | Verdict::Gap { .. } | Verdict::Restart { .. }
        ));
        t.applied(Seq(seq), fp(seq));
    }
}
