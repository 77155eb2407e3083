//! Which claims the session may make: the simulator's safety rule (see `hicache_index_sim`'s
//! `oracle` and `flight`), for the checker's small world.
//!
//! Every change of the master (a page stored or removed, a restart) gets a *history position*
//! (1, 2, ...; 0 is the start, nothing held). Two presences per page and position:
//! - **T**, the true state: what the master holds (a restart holds nothing);
//! - **E**, the event history: the same, except that a restart the stream cannot reveal (see
//!   below) removes nothing, since no signal tells the session it happened.
//!
//! A change is **pending** while the session cannot know it: its batch is held by the network
//! (in flight), or it was lost (a queue drop, a restart) and no intact message after it has
//! been handed yet, or (an undecodable batch) its damaged copy has not been handed. With a
//! reorder window, a handed message and a revealed loss stay pending for the window's
//! `max_delay` (the session may rightly hold or wait that long). Let `h` be the oldest pending
//! position, or one past the newest when none is.
//!
//! **The rule.** A claim of page `X` is *justified* iff `E(X, q)` or `T(X, q)` holds for some
//! position `q` in `[h - 1, newest]`: the master held it at a moment the session may still be
//! reflecting. An unjustified claim is a **false hit**.
//!
//! **The one excuse** (issue 26's class that no stream can tell): a restart whose first
//! message handed is intact and continues exactly (next sequence, next event id) the latest
//! position the session learned of the old run, from its messages or from a status read of it
//! handed over with a snapshot, is *invisible*: for `E` it removes nothing. A claim justified
//! by `E` alone is *stale*, and must end within [`STALE_BOUND`] of the moment the session had
//! both (the message and the position it continues): verification rounds are what bounds it.
//! Whether a restart is invisible is decided by what the session was handed so far: a later
//! message of the old run, say, makes it visible again.

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::Instant;

use crate::model::{Message, PAGES};

/// How long after an invisible restart was handed its first message a stale claim may last:
/// two verification rounds and a round's timeout (the shipped `VerifyConfig`: 5 s, 5 s).
pub const STALE_BOUND: Duration = Duration::from_secs(15);

/// One change of the master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Change {
    /// A page was stored (`true`) or removed.
    Page { page: u8, present: bool },
    /// The master restarted as run `run` (holding nothing).
    Restart { run: u8 },
}

/// Why a change is pending.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Why {
    /// Its message is held by the network.
    InFlight,
    /// It was lost and nothing revealed the loss yet (a queue drop, a restart).
    Lost,
    /// Its message is undecodable and has not been handed yet.
    Damaged,
}

/// A pending change: until `until` when it is in its grace (`None`: until resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Pending {
    pos: u64,
    why: Why,
    until: Option<Instant>,
}

/// What the stream showed of a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Seen {
    /// No message of the new run was handed yet.
    Undetermined,
    /// The session could tell.
    Visible,
    /// Its first message handed continued the old run exactly; the session had both at `at`.
    Invisible { at: Instant },
}

/// One restart and the first message of its run the session was handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Restart {
    pos: u64,
    /// The run it began.
    run: u8,
    /// The first intact message of the run handed: its sequence and first event id, and when.
    first: Option<(u64, u64, Instant)>,
    /// An undecodable message of the run was handed before any intact one (the session had to
    /// forget: no excuse is needed).
    damaged_first: bool,
}

/// The latest position of one run that the session learned: a sequence, the last event id up
/// to it, and when it learned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Known {
    seq: u64,
    last: u64,
    at: Instant,
}

/// How one claim is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The claim is justified and true now, or justified by a change still pending.
    Fine,
    /// The claim is unjustified.
    FalseHit,
    /// The claim rests on an invisible restart for `age` (see [`STALE_BOUND`]).
    Stale {
        /// How long since the invisible restart's first message was handed.
        age: Duration,
    },
}

/// The history of changes and what of it is pending for the session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Oracle {
    changes: Vec<(u64, Change)>,
    next_pos: u64,
    pending: Vec<Pending>,
    restarts: Vec<Restart>,
    /// Per run, the latest position the session learned (from intact messages and status
    /// reads handed).
    known: BTreeMap<u8, Known>,
    /// Positions whose message was handed intact.
    handed: Vec<u64>,
    grace: Duration,
}

impl Oracle {
    /// An empty history; `grace` is the reorder window's `max_delay` (zero without one).
    pub fn new(grace: Duration) -> Oracle {
        Oracle {
            changes: Vec::new(),
            next_pos: 1,
            pending: Vec::new(),
            restarts: Vec::new(),
            known: BTreeMap::new(),
            handed: Vec::new(),
            grace,
        }
    }

    fn record(&mut self, change: Change) -> u64 {
        let pos = self.next_pos;
        self.next_pos += 1;
        self.changes.push((pos, change));
        pos
    }

    /// Records that page `page` became present (or absent); returns its position.
    pub fn page(&mut self, page: usize, present: bool) -> u64 {
        self.record(Change::Page {
            page: page as u8,
            present,
        })
    }

    /// Records that the master restarted as `run`; returns its position (pending until an
    /// intact message after it is handed).
    pub fn restart(&mut self, run: u8) -> u64 {
        let pos = self.record(Change::Restart { run });
        self.pending.push(Pending {
            pos,
            why: Why::Lost,
            until: None,
        });
        self.restarts.push(Restart {
            pos,
            run,
            first: None,
            damaged_first: false,
        });
        pos
    }

    /// The message of the change at `pos` was dropped by the master's queue.
    pub fn dropped(&mut self, pos: u64) {
        self.pending.push(Pending {
            pos,
            why: Why::Lost,
            until: None,
        });
    }

    /// The message of the change at `pos` is held by the network.
    pub fn delayed(&mut self, pos: u64) {
        self.pending.push(Pending {
            pos,
            why: Why::InFlight,
            until: None,
        });
    }

    /// The message of the change at `pos` will arrive undecodable.
    pub fn damaged(&mut self, pos: u64) {
        self.pending.push(Pending {
            pos,
            why: Why::Damaged,
            until: None,
        });
    }

    /// Resolves the pending entries `which` selects: gone, or in their grace.
    fn resolve(&mut self, now: Instant, which: impl Fn(&Pending) -> bool) {
        let grace = self.grace;
        self.pending.retain_mut(|p| {
            if p.until.is_some() || !which(p) {
                return true;
            }
            if grace.is_zero() {
                return false;
            }
            p.until = Some(now + grace);
            true
        });
    }

    /// Records that the session learned position `(seq, last)` of run `run` at `now`.
    fn learn(&mut self, now: Instant, run: u8, seq: u64, last: u64) {
        let known = self
            .known
            .entry(run)
            .or_insert(Known { seq, last, at: now });
        if seq > known.seq {
            *known = Known { seq, last, at: now };
        }
    }

    /// The session was handed a snapshot whose status was read from run `run` at `seq` with
    /// `events` published.
    pub fn status_handed(&mut self, now: Instant, run: u8, seq: u64, events: u64) {
        self.learn(now, run, seq, events);
    }

    /// The session was handed `message` at `now`.
    pub fn handed(&mut self, now: Instant, message: &Message) {
        let pos = message.pos;
        for r in &mut self.restarts {
            if r.run == message.run && r.first.is_none() {
                if message.readable {
                    r.first = Some((message.seq, message.first_id, now));
                } else {
                    r.damaged_first = true;
                }
            }
        }
        if !message.readable {
            self.resolve(now, |p| p.pos == pos && p.why == Why::Damaged);
            return;
        }
        self.learn(now, message.run, message.seq, message.last_id());
        if self.handed.contains(&pos) {
            // A copy tells nothing new.
            return;
        }
        self.handed.push(pos);
        // What it reveals, and itself, stay pending through the grace (the session may hold it
        // that long, as out of order).
        self.pending
            .retain(|p| !(p.pos == pos && p.why == Why::InFlight && p.until.is_none()));
        self.resolve(now, |p| p.pos < pos && p.why == Why::Lost);
        if !self.grace.is_zero() {
            self.pending.push(Pending {
                pos,
                why: Why::InFlight,
                until: Some(now + self.grace),
            });
        }
    }

    /// What the session could tell of restart `r`, from what it was handed so far.
    fn seen(&self, r: &Restart) -> Seen {
        if r.damaged_first {
            return Seen::Visible;
        }
        let Some((seq, first_id, at)) = r.first else {
            return Seen::Undetermined;
        };
        // The latest position learned of the runs before it (of the latest such run).
        match self.known.range(..r.run).next_back() {
            Some((_, k)) if seq == k.seq + 1 && first_id == k.last + 1 => {
                Seen::Invisible { at: at.max(k.at) }
            }
            _ => Seen::Visible,
        }
    }

    /// Forgets graces that ended by `now`.
    pub fn expire(&mut self, now: Instant) {
        self.pending
            .retain(|p| p.until.is_none_or(|until| until > now));
    }

    /// The oldest pending position at `now`, or one past the newest.
    fn horizon(&self, now: Instant) -> u64 {
        self.pending
            .iter()
            .filter(|p| p.until.is_none_or(|until| until > now))
            .map(|p| p.pos)
            .min()
            .unwrap_or(self.next_pos)
    }

    fn is_invisible(&self, pos: u64) -> bool {
        self.restarts
            .iter()
            .any(|r| r.pos == pos && matches!(self.seen(r), Seen::Invisible { .. }))
    }

    /// Applies `change` at `pos` to page `page`'s presence `(T, E)`.
    fn apply(&self, page: usize, pos: u64, change: Change, presence: &mut (bool, bool)) {
        match change {
            Change::Page { page: p, present } if usize::from(p) == page => {
                *presence = (present, present);
            }
            Change::Page { .. } => {}
            Change::Restart { .. } => {
                presence.0 = false;
                if !self.is_invisible(pos) {
                    presence.1 = false;
                }
            }
        }
    }

    /// `(T, E)` of page `page` right after the changes up to position `pos`.
    fn present_at(&self, page: usize, pos: u64) -> (bool, bool) {
        let mut presence = (false, false);
        for &(at, change) in self.changes.iter().take_while(|(at, _)| *at <= pos) {
            self.apply(page, at, change, &mut presence);
        }
        presence
    }

    /// Whether page `page` is present in `T`, and in `E`, at some position from `from` on.
    fn present_in(&self, page: usize, from: u64) -> (bool, bool) {
        let mut presence = self.present_at(page, from);
        let mut any = presence;
        for &(at, change) in self.changes.iter().filter(|(at, _)| *at > from) {
            self.apply(page, at, change, &mut presence);
            any.0 |= presence.0;
            any.1 |= presence.1;
        }
        any
    }

    /// Reports whether any change touched page `page`.
    pub fn touched(&self, page: usize) -> bool {
        self.changes
            .iter()
            .any(|(_, c)| matches!(c, Change::Page { page: p, .. } if usize::from(*p) == page))
    }

    /// Reports whether page `page` is in the true state now.
    pub fn truly_present(&self, page: usize) -> bool {
        self.present_at(page, u64::MAX).0
    }

    /// Judges a claim of page `page` at `now`.
    pub fn judge(&self, now: Instant, page: usize) -> Judgement {
        let from = self.horizon(now).saturating_sub(1);
        let (t, e) = self.present_in(page, from);
        if t {
            return Judgement::Fine;
        }
        if !e {
            return Judgement::FalseHit;
        }
        // Justified by an invisible restart alone: since the first of them that came after
        // the page was last truly stored.
        let stored_at = self
            .changes
            .iter()
            .filter(|(_, c)| matches!(c, Change::Page { page: p, present: true } if usize::from(*p) == page))
            .map(|(pos, _)| *pos)
            .next_back()
            .unwrap_or(0);
        let at = self
            .restarts
            .iter()
            .filter(|r| r.pos > stored_at)
            .find_map(|r| match self.seen(r) {
                Seen::Invisible { at } => Some(at),
                _ => None,
            })
            .expect("a claim justified by E alone rests on an invisible restart");
        Judgement::Stale {
            age: now.saturating_duration_since(at),
        }
    }

    /// Returns `pos` counted from the horizon at `now` (0 for a position at or before it: a
    /// settled one).
    pub fn relative(&self, now: Instant, pos: u64) -> u64 {
        pos.saturating_sub(self.horizon(now).saturating_sub(1))
    }

    /// A canonical form of what decides future judgements, with positions counted from the
    /// horizon at `now` (two histories that differ only in older, settled changes agree).
    pub fn canonical(&self, now: Instant) -> impl std::hash::Hash + '_ {
        let base = self.horizon(now).saturating_sub(1);
        let at_base: Vec<(bool, bool)> = (0..PAGES)
            .map(|p| {
                let (t, e) = self.present_at(p, base);
                (t, e)
            })
            .collect();
        let rel = move |pos: u64| pos.saturating_sub(base);
        let changes: Vec<(u64, Change)> = self
            .changes
            .iter()
            .filter(|(pos, _)| *pos > base)
            .map(|&(pos, c)| (rel(pos), c))
            .collect();
        let pending: Vec<(u64, Why, Option<Instant>)> = self
            .pending
            .iter()
            .filter(|p| p.until.is_none_or(|until| until > now))
            .map(|p| (rel(p.pos), p.why, p.until))
            .collect();
        let restarts: Vec<(u64, u8, Seen)> = self
            .restarts
            .iter()
            .map(|r| (rel(r.pos), r.run, self.seen(r)))
            .collect();
        let handed: Vec<u64> = self
            .handed
            .iter()
            .filter(|pos| **pos > base)
            .map(|&pos| rel(pos))
            .collect();
        (
            at_base,
            changes,
            pending,
            restarts,
            self.known.clone(),
            handed,
            self.next_pos - base,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Key;

    const A: usize = 0;

    fn at(ms: u64) -> Instant {
        Instant::from_millis(ms)
    }

    /// A one-event message of run `run` carrying the change at `pos`.
    fn message(run: u8, seq: u64, id: u64, pos: u64) -> Message {
        Message {
            run,
            seq,
            first_id: id,
            events: vec![(true, Key::Page(0))],
            stamp_ms: 0,
            readable: true,
            pos,
        }
    }

    #[test]
    fn a_claim_after_the_removal_was_handed_is_a_false_hit() {
        let mut o = Oracle::new(Duration::ZERO);
        let stored = o.page(A, true);
        o.handed(at(0), &message(1, 1, 1, stored));
        assert_eq!(o.judge(at(0), A), Judgement::Fine);
        let removed = o.page(A, false);
        // Not handed yet: the session cannot know.
        o.delayed(removed);
        assert_eq!(o.judge(at(0), A), Judgement::Fine);
        o.handed(at(1), &message(1, 2, 2, removed));
        assert_eq!(o.judge(at(1), A), Judgement::FalseHit);
    }

    #[test]
    fn a_dropped_removal_excuses_the_claim_until_a_later_message_reveals_it() {
        let mut o = Oracle::new(Duration::ZERO);
        let stored = o.page(A, true);
        o.handed(at(0), &message(1, 1, 1, stored));
        let removed = o.page(A, false);
        o.dropped(removed);
        assert_eq!(o.judge(at(0), A), Judgement::Fine);
        let other = o.page(1, true);
        o.handed(at(1), &message(1, 3, 2, other));
        assert_eq!(o.judge(at(1), A), Judgement::FalseHit);
    }

    #[test]
    fn a_reorder_window_excuses_a_handed_removal_for_its_delay_only() {
        let mut o = Oracle::new(Duration::from_millis(50));
        let stored = o.page(A, true);
        o.handed(at(0), &message(1, 1, 1, stored));
        let removed = o.page(A, false);
        o.handed(at(10), &message(1, 2, 2, removed));
        assert_eq!(o.judge(at(59), A), Judgement::Fine);
        assert_eq!(o.judge(at(60), A), Judgement::FalseHit);
    }

    #[test]
    fn a_restart_whose_first_message_continues_the_old_run_exactly_is_excused_for_a_bound() {
        let mut o = Oracle::new(Duration::ZERO);
        let stored = o.page(A, true);
        o.handed(at(0), &message(1, 1, 1, stored));
        o.restart(2);
        let other = o.page(1, true);
        // The new run's seq 1 was lost after publishing: its seq 2 starts at id 2.
        o.handed(at(100), &message(2, 2, 2, other));
        assert_eq!(
            o.judge(at(100) + STALE_BOUND, A),
            Judgement::Stale { age: STALE_BOUND }
        );
        // A later message of the old run shows the session it was fooled.
        o.handed(at(200), &message(1, 3, 3, stored));
        assert_eq!(o.judge(at(200), A), Judgement::FalseHit);
    }

    #[test]
    fn a_restart_whose_first_message_does_not_continue_the_old_run_is_no_excuse() {
        let mut o = Oracle::new(Duration::ZERO);
        let stored = o.page(A, true);
        o.handed(at(0), &message(1, 1, 1, stored));
        o.restart(2);
        let other = o.page(1, true);
        o.handed(at(100), &message(2, 1, 1, other));
        assert_eq!(o.judge(at(100), A), Judgement::FalseHit);
    }

    #[test]
    fn a_restart_continuing_the_old_runs_status_exactly_is_excused_from_when_both_were_handed() {
        let mut o = Oracle::new(Duration::ZERO);
        // Page A was stored, its batch dropped (seq 1, no id); the status says (1, 0).
        let stored = o.page(A, true);
        o.dropped(stored);
        o.restart(2);
        let other = o.page(1, true);
        o.handed(at(100), &message(2, 2, 1, other));
        assert_eq!(o.judge(at(100), A), Judgement::FalseHit);
        o.status_handed(at(300), 1, 1, 0);
        assert_eq!(
            o.judge(at(400), A),
            Judgement::Stale {
                age: Duration::from_millis(100)
            }
        );
    }
}
