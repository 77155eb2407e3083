//! The sequence tracker this stream machine replaced, kept for one commit as the differential
//! oracle of the migration (tests only; removed once the two agreed).
#![allow(dead_code, unreachable_pub, missing_docs)]

use alloc::collections::{BTreeMap, VecDeque};
use alloc::vec::Vec;

use core::time::Duration;

use super::ReorderConfig;
use crate::frame::{Batch, Seq, Timestamp};
use crate::time::Instant;

/// What identifies one batch beyond its sequence number, to tell a duplicate from a new batch
/// that reuses the number after a publisher restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fingerprint {
    timestamp: u64,
    /// The publisher's timestamp in milliseconds, when it sent a comparable one.
    millis: Option<u64>,
    events: usize,
    first_event_id: Option<u64>,
    last_event_id: Option<u64>,
    /// Whether the batch's events could not be read: then nothing else of it is known.
    unreadable: bool,
}

impl Fingerprint {
    /// The fingerprint of a batch whose sequence could be read but whose events could not: its
    /// stamp, size and event ids are unknown.
    pub fn unreadable() -> Fingerprint {
        Fingerprint {
            timestamp: u64::MAX,
            millis: None,
            events: 0,
            first_event_id: None,
            last_event_id: None,
            unreadable: true,
        }
    }

    /// Takes the fingerprint of a decoded batch.
    pub fn of(batch: &Batch<'_>) -> Fingerprint {
        let timestamp = match batch.timestamp {
            Timestamp::Millis(ms) => ms,
            Timestamp::Negative(v) => v as u64,
            Timestamp::Seconds(s) => s.to_bits(),
            Timestamp::Nil => u64::MAX,
        };
        let millis = match batch.timestamp {
            Timestamp::Millis(ms) => Some(ms),
            // Saturating float-to-int conversion; NaN and negative seconds are not comparable.
            Timestamp::Seconds(s) if s >= 0.0 => Some((s * 1000.0) as u64),
            _ => None,
        };
        Fingerprint {
            timestamp,
            millis,
            events: batch.events.len(),
            first_event_id: batch.events.first().and_then(|e| e.event_id),
            last_event_id: batch.events.last().and_then(|e| e.event_id),
            unreadable: false,
        }
    }

    /// Returns the event id of the batch's first event, if it carried one.
    pub fn first_event_id(&self) -> Option<u64> {
        self.first_event_id
    }

    /// Returns the event id of the batch's last event, if it carried one.
    pub fn last_event_id(&self) -> Option<u64> {
        self.last_event_id
    }
}

/// What a tracker saw before its last reset: batches no newer than this are from before it.
#[derive(Clone, Debug, Default)]
struct Fence {
    /// The highest sequence applied or held before a reset.
    seq: u64,
    /// The latest comparable publisher timestamp applied or held before a reset.
    millis: Option<u64>,
    /// The batches applied (within the reorder window) or held before the last reset.
    prints: Vec<(Seq, Fingerprint)>,
    /// The latest unreadable batch the stream had moved past or held before the last reset:
    /// what it removed is unknown, so a batch at or before it is from before the reset unless
    /// shown to be another run's (see [`Blind`]).
    blind: Option<Blind>,
}

impl Fence {
    /// Reports whether a batch is a copy of one seen before the reset.
    fn is_copy(&self, seq: Seq, fp: &Fingerprint) -> bool {
        self.prints.iter().any(|(s, f)| *s == seq && f == fp)
    }

    /// Reports whether a batch is no newer than all those seen before the reset, in sequence and
    /// timestamp.
    fn is_older(&self, seq: Seq, fp: &Fingerprint) -> bool {
        match (self.millis, fp.millis) {
            (Some(fence), Some(at)) => seq.0 <= self.seq && at <= fence,
            _ => false,
        }
    }

    fn include(&mut self, seq: Seq, fp: &Fingerprint) {
        self.seq = self.seq.max(seq.0);
        self.millis = self.millis.max(fp.millis);
    }

    /// Keeps `blind` if it is the latest unreadable batch the fence knows.
    fn include_blind(&mut self, blind: Blind) {
        if self.blind.is_none_or(|b| b.seq <= blind.seq) {
            self.blind = Some(blind);
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
    /// A late copy of a batch already applied within the reorder window, or a batch from before
    /// the last reset that arrived before the new stream's baseline: skip it.
    Late,
    /// An old batch that is no copy of one applied: from this run, late (its changes are
    /// superseded), or from a restarted publisher whose clock went back. Which is unknown: the
    /// caller forgets, and skips it (the stream's position is kept).
    Stale,
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
    /// A batch whose events cannot be read took this sequence: what it changed is unknown, so
    /// the caller forgets (see [`SequenceTracker::observe_unreadable`]).
    Unreadable,
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
    /// The last event id applied in this stream (kept across batches that carry none).
    last_id: Option<u64>,
    /// The latest comparable publisher timestamp applied in this stream.
    max_millis: Option<u64>,
    recent: VecDeque<(Seq, Fingerprint)>,
    held: BTreeMap<u64, (Instant, Fingerprint, T)>,
    /// What came before the last reset, if there was one.
    fence: Option<Fence>,
    /// After a declared loss, until the next batch applies: the last sequence and event id
    /// applied before it, which the stream's next baseline must run past.
    floor: Option<(Seq, Option<u64>)>,
    /// With a reorder window, the unreadable batch the stream last moved past, until a
    /// readable batch after it applies: no batch at or before it may apply, since any of them
    /// may store what it removed.
    blind: Option<Blind>,
}

/// The least time after an unreadable batch arrived that a batch at or before its sequence is
/// still taken for a late batch of its run (see [`SequenceTracker::observe_unreadable`]); 16
/// reorder windows' `max_delay` when that is longer.
const BLIND_AT_LEAST: Duration = Duration::from_secs(2);

/// An unreadable batch the stream moved past or held (see
/// [`SequenceTracker::observe_unreadable`]), and what the stream knew when it came.
#[derive(Clone, Copy, Debug)]
struct Blind {
    seq: Seq,
    /// When a batch at or before it stops being taken for a late one of its run: it arrived
    /// then, plus [`SequenceTracker::blind_limit`].
    expires: Instant,
    /// The last readable sequence applied before it (or before the loss it followed).
    last_seq: Option<Seq>,
    /// The last event id applied before it: a batch of its run numbered after that batch has a
    /// greater first event id (ids only grow within a run; the master's queue drops skip
    /// sequences, not ids, so nothing more is known of it).
    last_id: Option<u64>,
    /// The latest publisher stamp applied before it: a batch of its run numbered at or before
    /// the last one applied is stamped no later.
    max_millis: Option<u64>,
}

impl Blind {
    /// Reports whether the batch `seq` (at or before the unreadable one) is shown to be a
    /// later run's. It must be stamped after every batch applied before the unreadable one
    /// (so it is neither one of its run's batches numbered at or before the last of them, nor
    /// an older run's: one run stamps its batches in order). And if it is numbered after that
    /// last one, its first event id must be no greater than the last id applied (a batch of
    /// the unreadable one's run numbered there runs past it). Without comparable stamps, a
    /// readable batch applied before, or ids there, nothing shows it.
    fn is_another_run(&self, seq: Seq, fp: &Fingerprint) -> bool {
        let stamped_after = matches!((self.max_millis, fp.millis), (Some(m), Some(at)) if at > m);
        let Some(last) = self.last_seq else {
            return false;
        };
        if seq <= last {
            return stamped_after;
        }
        let ids_back = matches!((self.last_id, fp.first_event_id), (Some(l), Some(f)) if f <= l);
        stamped_after && ids_back
    }

    /// Reports whether a batch that arrived at `now` can no longer be a late batch of the
    /// unreadable one's run (see [`BLIND_AT_LEAST`]).
    fn has_expired(&self, now: Instant) -> bool {
        now >= self.expires
    }
}

/// How a batch that begins a stream after lost batches is ruled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterLoss {
    /// It can be the same run's next batch: the new baseline.
    Baseline,
    /// An older batch (from before the loss, or from an older run): skip it.
    Stale,
    /// Another run of the publisher.
    Restart,
}

impl<T> SequenceTracker<T> {
    /// Makes a tracker that has seen nothing.
    pub fn new(config: ReorderConfig) -> SequenceTracker<T> {
        SequenceTracker {
            config,
            last: None,
            last_id: None,
            max_millis: None,
            recent: VecDeque::new(),
            held: BTreeMap::new(),
            fence: None,
            floor: None,
            blind: None,
        }
    }

    /// Returns the last event id applied in this stream (`None` when none carried one).
    pub fn last_event_id(&self) -> Option<u64> {
        self.last_id
    }

    /// Returns the last sequence applied (`None` when the stream begins again with the next
    /// batch: at first, after a reset or a declared loss, and after an unreadable batch).
    pub fn last_applied(&self) -> Option<Seq> {
        self.last
            .filter(|(_, fp)| !fp.unreadable)
            .map(|(seq, _)| seq)
    }

    /// Returns how many batches are held.
    pub fn held_count(&self) -> usize {
        self.held.len()
    }

    /// Forgets the stream: the next batch newer than everything seen so far is a new baseline,
    /// and held batches are dropped. What was applied or held becomes the fence against late
    /// copies (see the module docs). Returns how many held batches were dropped.
    pub fn reset(&mut self) -> usize {
        let dropped = self.end_run(|_, _| false);
        self.last = None;
        dropped
    }

    /// Ends what the stream knows of its run: fences what it applied and the held batches
    /// `keep` does not keep ([`SequenceTracker::fence_run`]), and forgets its ids, stamps,
    /// copies, floor and fence of an unreadable batch (`last` is the caller's). Returns how
    /// many held batches were dropped.
    fn end_run(&mut self, keep: impl Fn(u64, &Fingerprint) -> bool) -> usize {
        let dropped = self.fence_run(keep);
        self.last_id = None;
        self.max_millis = None;
        self.recent.clear();
        self.floor = None;
        self.blind = None;
        dropped
    }

    /// Adds what this run applied to the fence, drops the held batches `keep` does not keep
    /// (adding them to the fence too), so that the run's late batches are never taken for a new
    /// baseline. Returns how many held batches were dropped.
    fn fence_run(&mut self, keep: impl Fn(u64, &Fingerprint) -> bool) -> usize {
        let mut fence = self.fence.take().unwrap_or_default();
        let seen = self.last.iter().chain(self.recent.iter()).copied().chain(
            self.held
                .iter()
                .filter(|(s, (_, fp, _))| !keep(**s, fp))
                .map(|(s, (_, fp, _))| (Seq(*s), *fp)),
        );
        for (seq, fp) in seen {
            fence.include(seq, &fp);
            if !fence.prints.contains(&(seq, fp)) {
                fence.prints.push((seq, fp));
            }
        }
        if let Some(blind) = self.blind {
            fence.include_blind(blind);
        }
        let held_blind = self
            .held
            .iter()
            .filter(|(s, (_, fp, _))| fp.unreadable && !keep(**s, fp))
            .map(|(s, (at, _, _))| (*s, *at))
            .next_back();
        if let Some((seq, arrived)) = held_blind {
            fence.include_blind(Blind {
                seq: Seq(seq),
                expires: arrived + self.blind_limit(),
                last_seq: self.last_readable(),
                last_id: self.last_id.or(self.floor.and_then(|(_, id)| id)),
                max_millis: self.max_millis,
            });
        }
        let before = self.held.len();
        self.held.retain(|&s, (_, fp, _)| keep(s, fp));
        let dropped = before - self.held.len();
        let keep = self.config.max_held.max(1).saturating_mul(2);
        if fence.prints.len() > keep {
            let excess = fence.prints.len() - keep;
            fence.prints.drain(..excess);
        }
        if fence.seq > 0 || !fence.prints.is_empty() || fence.blind.is_some() {
            self.fence = Some(fence);
        }
        dropped
    }

    /// Reports whether, with a reorder window, a batch that breaks the stream is a late one of an
    /// older time rather than a restart: stamped no later than the newest batch applied, or not
    /// comparable at all (then which is unknown, and doubt must not become a baseline).
    fn is_late_with_reordering(&self, fp: &Fingerprint) -> bool {
        if self.config.max_held == 0 {
            return false;
        }
        match (self.max_millis, fp.millis) {
            (Some(max), Some(at)) => at <= max,
            _ => true,
        }
    }

    /// Reports whether, with a reorder window, a batch is stamped before the newest batch
    /// applied (one run stamps its batches in order).
    fn stamped_before(&self, fp: &Fingerprint) -> bool {
        self.config.max_held > 0
            && matches!((self.max_millis, fp.millis), (Some(max), Some(at)) if at < max)
    }

    /// Reports whether a batch whose first event id is `first_id` breaks the stream's event-id
    /// continuity.
    /// After an unreadable batch, whose ids are unknown, only a first id no greater than the last
    /// one known breaks it (ids only grow within a run).
    fn breaks_ids(&self, first_id: Option<u64>) -> bool {
        let after_unreadable = matches!(self.last, Some((_, fp)) if fp.unreadable);
        match (self.last_id, first_id) {
            (Some(last), Some(first)) if after_unreadable => first <= last,
            (Some(last), Some(first)) => last.checked_add(1) != Some(first),
            _ => false,
        }
    }

    /// Rules on a batch that begins the stream again after lost batches, whose last event id
    /// was `last_id`. Within one run of the master event ids only grow (they do not skip over
    /// events its queue dropped, and skip over messages lost after publishing), so a first id
    /// no greater than the last is an older run's batch or another run's. With a reorder
    /// window, a batch stamped before the newest batch applied is older than the stream: a late
    /// batch of an older run (libzmq queues each connection's messages apart, so a restarted
    /// master's late messages can follow the new run's), never a baseline. A publisher whose
    /// clock went back is skipped until its clock passes the stream's again: misses, counted.
    fn rule_after_loss(&self, fp: &Fingerprint, last_id: Option<u64>) -> AfterLoss {
        let regressed = matches!((last_id, fp.first_event_id), (Some(l), Some(f)) if f <= l);
        if regressed || self.stamped_before(fp) {
            self.not_next(fp)
        } else {
            AfterLoss::Baseline
        }
    }

    /// Rules on a batch that cannot be the stream's next one: with a reorder window, stamped no
    /// later than the stream (or not comparably), a late batch; else another run. (A batch
    /// [`Self::stamped_before`] the stream is always the former.)
    fn not_next(&self, fp: &Fingerprint) -> AfterLoss {
        if self.is_late_with_reordering(fp) {
            AfterLoss::Stale
        } else {
            AfterLoss::Restart
        }
    }

    /// Rules on a batch with sequence `seq`. After [`Verdict::Apply`], [`Verdict::Gap`] or
    /// [`Verdict::Restart`] the caller MUST apply the batch and then call
    /// [`SequenceTracker::applied`].
    pub fn observe(&mut self, now: Instant, seq: Seq, fingerprint: Fingerprint) -> Verdict {
        if let Some(fence) = &mut self.fence {
            if fence.is_copy(seq, &fingerprint) {
                return Verdict::Late;
            }
            if self.config.max_held > 0 && fence.is_older(seq, &fingerprint) {
                // Only a transport that reorders can deliver it; the caller forgets if the
                // index holds anything (a snapshot may be claimed), and skips it.
                return Verdict::Stale;
            }
            if let Some(blind) = fence.blind.filter(|b| seq <= b.seq) {
                if !blind.is_another_run(seq, &fingerprint) && !blind.has_expired(now) {
                    // At or before an unreadable batch from before the reset: it may store
                    // what that one removed, and it may remove what a snapshot taken since
                    // holds (it is no copy of a batch applied), so it is stale, never merely
                    // late, even before the new stream's baseline.
                    return Verdict::Stale;
                }
                // Another run's (or too late to be of the unreadable one's): the fence of
                // the unreadable batch has done its work.
                fence.blind = None;
            }
        }
        if let Some(blind) = self.blind.filter(|b| seq <= b.seq) {
            // At or before an unreadable batch the stream moved past: a copy of a batch
            // applied, or a late batch of its run (it may store what the unreadable one
            // removed), unless shown to be another run's, which numbers its batches anew, or
            // arriving too long after it to be of its run.
            if self.recent.contains(&(seq, fingerprint)) {
                return Verdict::Late;
            }
            if blind.is_another_run(seq, &fingerprint) || blind.has_expired(now) {
                return self.restart(self.last.map_or(blind.seq, |(s, _)| s), seq, &fingerprint);
            }
            return Verdict::Stale;
        }
        let Some((last, last_fp)) = self.last else {
            let Some((last, last_id)) = self.floor else {
                return Verdict::Apply;
            };
            if self.recent.contains(&(seq, fingerprint)) {
                // A copy of a batch applied before the loss: never the stream's new beginning.
                return Verdict::Late;
            }
            let rule = if seq <= last {
                // Back to or before the stream's last batch: no batch of its run after the loss.
                self.not_next(&fingerprint)
            } else {
                self.rule_after_loss(&fingerprint, last_id)
            };
            return self.verdict(rule, last, seq, &fingerprint);
        };
        if seq == last {
            return if fingerprint == last_fp {
                Verdict::Duplicate
            } else if self.is_late_with_reordering(&fingerprint) {
                Verdict::Stale
            } else {
                self.restart(last, seq, &fingerprint)
            };
        }
        if seq.0 == last.0.wrapping_add(1) && seq.0 != 0 {
            if self.breaks_ids(fingerprint.first_event_id) || self.stamped_before(&fingerprint) {
                let rule = self.not_next(&fingerprint);
                return self.verdict(rule, last, seq, &fingerprint);
            }
            return Verdict::Apply;
        }
        if seq > last {
            if self.config.max_held == 0 {
                return match self.rule_after_loss(&fingerprint, self.last_id) {
                    AfterLoss::Restart => self.restart(last, seq, &fingerprint),
                    _ => Verdict::Gap {
                        expected: Seq(last.0 + 1),
                        missing: seq.0 - last.0 - 1,
                    },
                };
            }
            return match self.held.get(&seq.0) {
                Some((_, held_fp, _)) if *held_fp == fingerprint => Verdict::Duplicate,
                Some(_) if self.is_late_with_reordering(&fingerprint) => Verdict::Stale,
                Some(_) => self.restart(last, seq, &fingerprint),
                None => Verdict::Hold,
            };
        }
        let late = self
            .recent
            .iter()
            .any(|&(s, fp)| s == seq && fp == fingerprint);
        if late {
            return Verdict::Late;
        }
        if self.is_late_with_reordering(&fingerprint) {
            // With reordering, an older sequence stamped no later than the stream (or not
            // comparable) is a late batch, not a restart: it must not become the baseline.
            return Verdict::Stale;
        }
        self.restart(last, seq, &fingerprint)
    }

    /// Turns a ruling on the batch `seq`, observed (not held), into its verdict; `last` is the
    /// last sequence applied before.
    fn verdict(&mut self, rule: AfterLoss, last: Seq, seq: Seq, fp: &Fingerprint) -> Verdict {
        match rule {
            AfterLoss::Baseline => Verdict::Apply,
            AfterLoss::Stale => Verdict::Stale,
            AfterLoss::Restart => self.restart(last, seq, fp),
        }
    }

    /// Rules the batch `seq` (stamped as `fp`) another run's first: the stream begins again
    /// with it, as after [`SequenceTracker::reset`], except that the batches held after it that
    /// may be the new run's stay held: released after it, they are ruled then (dropped, the
    /// new run's batch that removed what it stored would be lost without a trace). Those
    /// stamped before it are the old run's, sent before the restart: dropped, as the index
    /// forgets what the old run taught.
    fn restart(&mut self, last: Seq, seq: Seq, fp: &Fingerprint) -> Verdict {
        let from = fp.millis;
        self.end_run(|s, held| {
            s > seq.0
                && match (from, held.millis) {
                    (Some(from), Some(at)) => at >= from,
                    _ => true,
                }
        });
        self.last = None;
        Verdict::Restart { last }
    }

    /// The last readable sequence applied (through the unreadable batches passed since), or
    /// the one before a declared loss: what a fence of an unreadable batch is measured from.
    fn last_readable(&self) -> Option<Seq> {
        match self.last {
            Some((seq, fp)) if !fp.unreadable => Some(seq),
            Some(_) => self.blind.and_then(|b| b.last_seq),
            None => self.floor.map(|(seq, _)| seq),
        }
    }

    /// How long after an unreadable batch arrived a batch at or before it is still taken for a
    /// late batch of its run: [`BLIND_AT_LEAST`], or 16 reorder windows when longer.
    fn blind_limit(&self) -> Duration {
        let window = self.config.max_delay.unwrap_or(Duration::ZERO);
        BLIND_AT_LEAST.max(window.saturating_mul(16))
    }

    /// Rules on a batch of this stream (its sequence readable) whose events cannot be read,
    /// which arrived at `now`. Its sequence was consumed and what it changed is unknown:
    /// - [`Verdict::Unreadable`]: the caller forgets. Without a reorder window, the stream
    ///   begins again with the next batch, as after [`SequenceTracker::reset`] (one connection
    ///   delivers in order: no batch from before it can follow). With one, it is the stream's
    ///   next batch, or the first after a reset or a loss: the tracker moves past it.
    /// - [`Verdict::Hold`]: with a reorder window, ahead of a hole. The caller holds it with
    ///   [`Fingerprint::unreadable`]; when [`SequenceTracker::pop_ready`] releases it, the
    ///   ruling is [`Verdict::Unreadable`]. A batch of the same sequence already held is
    ///   replaced: which of the two is the run's is unknown.
    /// - [`Verdict::Duplicate`]: an unreadable batch of that sequence is held already.
    /// - [`Verdict::Stale`]: with a reorder window, at or before the stream's position.
    ///
    /// Once moved past it with a reorder window, and until a readable batch after it applies,
    /// a batch at or before it is [`Verdict::Stale`] (a late batch of its run may store what
    /// it removed), unless shown to be a later run's: stamped after every batch applied before
    /// the unreadable one and, if numbered after the last readable one of them, with a first
    /// event id no greater than its last (a batch of the run numbered there runs past it). Then,
    /// or when it arrives 2 s (`BLIND_AT_LEAST`, or 16 windows) after the
    /// unreadable one (a bound on how late a batch comes; its stamp is unknown), it is a
    /// [`Verdict::Restart`]. A reset keeps this fence: after it, such a batch is stale until so
    /// shown (and then the new stream's baseline). A restarted publisher without ids or
    /// comparable stamps, numbered below it, misses that long; so does one whose first batches
    /// came after an unreadable batch of the old run that was held when it restarted (which
    /// run an unreadable batch is of cannot be told, and the fence must hold for its own).
    pub fn observe_unreadable(&mut self, now: Instant, seq: Seq) -> Verdict {
        if self.config.max_held == 0 {
            self.reset();
            return Verdict::Unreadable;
        }
        if self.blind.is_some_and(|b| seq <= b.seq) {
            return Verdict::Stale;
        }
        match self.last {
            Some((last, _)) if seq.0 == last.0.wrapping_add(1) && seq.0 != 0 => {
                self.pass_unreadable(now, seq)
            }
            Some((last, _)) if seq <= last => Verdict::Stale,
            Some(_) => match self.held.get(&seq.0) {
                Some((_, fp, _)) if fp.unreadable => Verdict::Duplicate,
                _ => Verdict::Hold,
            },
            None => match self.floor {
                Some((floor, _)) if seq <= floor => Verdict::Stale,
                _ => self.pass_unreadable(now, seq),
            },
        }
    }

    /// Moves the stream past the unreadable batch `seq`, which arrived at `arrived`: it becomes
    /// the position (its event ids unknown: the last known one stays, so that the next batch
    /// must run past it).
    fn pass_unreadable(&mut self, arrived: Instant, seq: Seq) -> Verdict {
        if self.last.is_none() {
            self.last_id = self.floor.and_then(|(_, id)| id);
        }
        let last_seq = self.last_readable();
        self.last = Some((seq, Fingerprint::unreadable()));
        self.floor = None;
        self.blind = Some(Blind {
            seq,
            expires: arrived + self.blind_limit(),
            last_seq,
            last_id: self.last_id,
            max_millis: self.max_millis,
        });
        self.held.retain(|&s, _| s > seq.0);
        Verdict::Unreadable
    }

    /// Records that the batch `seq` was applied.
    pub fn applied(&mut self, seq: Seq, fingerprint: Fingerprint) {
        self.last = Some((seq, fingerprint));
        self.floor = None;
        self.blind = None;
        if fingerprint.last_event_id.is_some() {
            self.last_id = fingerprint.last_event_id;
        }
        self.max_millis = self.max_millis.max(fingerprint.millis);
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

    /// Takes the held batch that applies next, if it is there, with its ruling: [`Verdict::Unreadable`]
    /// (its events could not be read: the caller forgets; the tracker moved past it),
    /// [`Verdict::Apply`]
    /// (the next in order, or the new baseline after a loss), [`Verdict::Restart`] (its event
    /// ids do not run on from the batch applied before it: the caller forgets first) or
    /// [`Verdict::Stale`] (they do not, and it is stamped no later than the stream: the caller
    /// forgets and skips it). After `Apply` or `Restart` the caller MUST apply it and call
    /// [`SequenceTracker::applied`]; then it calls this again until it returns `None`.
    pub fn pop_ready(&mut self) -> Option<(Seq, T, Verdict)> {
        let next = match self.last {
            Some((last, _)) => last.0.checked_add(1)?,
            None => *self.held.keys().next()?,
        };
        let (arrived, fp, item) = self.held.remove(&next)?;
        if fp.unreadable {
            let verdict = self.pass_unreadable(arrived, Seq(next));
            return Some((Seq(next), item, verdict));
        }
        let rule = match (self.last, self.floor) {
            (Some(_), _) if self.breaks_ids(fp.first_event_id) || self.stamped_before(&fp) => {
                self.not_next(&fp)
            }
            (None, Some((_, last_id))) => self.rule_after_loss(&fp, last_id),
            _ => AfterLoss::Baseline,
        };
        let verdict = match rule {
            AfterLoss::Baseline => Verdict::Apply,
            // Older than the stream: a late batch, skipped (the caller forgets).
            AfterLoss::Stale => Verdict::Stale,
            AfterLoss::Restart => {
                let last = self
                    .last
                    .map(|(s, _)| s)
                    .or(self.floor.map(|(s, _)| s))
                    .unwrap_or(Seq(next));
                // The batches still held stay: they come after this one.
                self.end_run(|_, _| true);
                Verdict::Restart { last }
            }
        };
        Some((Seq(next), item, verdict))
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
        if let Some((last, _)) = self.last {
            self.floor = Some((last, self.last_id));
        }
        self.last = None;
        self.last_id = None;
        Some(Loss {
            expected,
            resumed: Seq(first),
        })
    }
}
