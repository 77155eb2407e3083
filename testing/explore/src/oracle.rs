//! Which claims the session may make: the simulator's safety rule (see `hicache_index_sim`'s
//! `oracle` and `flight`), for the checker's small world.
//!
//! Every change of the master (a page stored or removed, a restart) gets a *history position*
//! (1, 2, ...; 0 is the start, nothing held). `T(X, q)` says whether the master held page `X`
//! right after position `q`.
//!
//! A change is **pending** while the session cannot know it:
//! - its batch was published and its message (intact or damaged) not handed yet;
//! - its batch was dropped by the master's queue and nothing revealed the loss yet: an intact
//!   later message of its run, a status of its run whose sequence covers it (the status counts
//!   dropped sequences), or an intact message of a later run after restarts the session could
//!   tell;
//! - it is a restart, and the session cannot tell yet (see below).
//!
//! With a reorder window, a handed message and a revealed loss stay pending for the window's
//! `max_delay` (the session may rightly hold or wait that long). Let `h` be the oldest pending
//! position, or one past the newest when none is.
//!
//! **The rule.** A claim of page `X` is *justified* iff `T(X, q)` holds for some position `q`
//! in `[h - 1, newest]`: the master held it at a moment the session may still be reflecting.
//! An unjustified claim is a **false hit**.
//!
//! **The one excuse** (issue 26's class that no stream can tell). A restart whose first
//! message handed is intact and continues exactly (next sequence, next event id) the latest
//! position the session learned of the old run, from its messages or from a status read of
//! it handed over with a snapshot, is *invisible*: no message reveals it, nor the old run's
//! losses after that position (the new run's numbering covers them). They stay pending, as
//! *excused*. A claim justified only because of excused entries is *stale*, and must end within
//! [`STALE_BOUND`] of the moment the session had both the message and the position it
//! continues: verification rounds are what bounds it. Whether a restart is invisible is
//! decided by what the session was handed so far: a later message of the old run, say, makes
//! it visible again, and a status handed later can make it invisible. A stale claim may also
//! begin after that moment, exactly as a key list of a run before the restart's (read before
//! it) that names the page is handed: the session cannot tell it from the new run's list
//! either.
//!
//! **Its mirror** (the same class, rule R10 of the core's sequence module): a message of an
//! older run, handed late (after the session learned a newer run's position), that continues
//! that newer position exactly (next sequence, next event id) is a *masquerade*: no signal tells
//! it from the newer run's own. A claim of a page it stored is stale from the moment it was
//! handed, within the same bound, while no later change of the page reaches the session.
//!
//! **Misses no rule can know** (asked of an idle master, [`Oracle::missing_unknowable`]): a
//! page the master holds whose last change is a batch its queue dropped and that the restart
//! hid (the invisible restart's own earlier sequences, or a restart of which no message came
//! whose status equals the position learned of the run before it), and, without the master's
//! counters, a dropped tail or a page a masquerade changed last. Each is a miss, never a hit.

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::Instant;

use crate::model::{Message, PAGES};

/// How long after an invisible restart was handed its first message a stale claim may last:
/// two verification rounds and a round's timeout (the shipped `VerifyConfig`: 5 s, 5 s).
pub const STALE_BOUND: Duration = Duration::from_secs(15);

/// What changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    /// A page was stored (`true`) or removed.
    Page { page: u8, present: bool },
    /// The master restarted (holding nothing).
    Restart,
}

/// One change of the master and how the session may learn of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Change {
    pos: u64,
    kind: Kind,
    /// The run that made it (the new run, for a restart).
    run: u8,
    /// Its batch's sequence (the first one skipped, for a dropped batch; 0 for a restart).
    seq: u64,
    /// Its batch was dropped by the master's queue.
    dropped: bool,
    /// When its message (intact or damaged) was first handed.
    handed: Option<Instant>,
}

/// One restart and the first message of its run the session was handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Restart {
    pos: u64,
    /// The run it began.
    run: u8,
    /// The first intact message of the run handed: its sequence and first event id, and when.
    first: Option<(u64, u64, Instant)>,
    /// When an undecodable message of the run was handed before any intact one (the session
    /// had to forget: no excuse is needed).
    damaged_first: Option<Instant>,
    /// No status was handed since `first`: with a reorder window the session may still hold
    /// it for one, to rule on the held messages in order.
    first_held: bool,
}

/// A message of an older run that continued the newest run's known position exactly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Masquerade {
    /// The position of the change it carried.
    pos: u64,
    /// When it was handed.
    at: Instant,
}

/// What the session could tell of a restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Seen {
    /// No message of the new run was handed yet.
    Undetermined,
    /// The session can tell, since `at`.
    Visible { at: Instant },
    /// It cannot; it has had the continuing message and the position it continues since `at`.
    Invisible { at: Instant },
}

/// A position of one run the session learned: a sequence and the last event id up to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Known {
    seq: u64,
    last: u64,
    at: Instant,
    /// From a status read (which counts dropped sequences), not a message.
    status: bool,
}

/// How one claim is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// The claim is justified.
    Fine,
    /// The claim is unjustified.
    FalseHit,
    /// The claim is justified only by what an invisible restart hides, for `age` (see
    /// [`STALE_BOUND`]).
    Stale {
        /// How long since the restart became invisible to the session.
        age: Duration,
    },
}

/// The history of changes and what the session was handed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Oracle {
    changes: Vec<Change>,
    next_pos: u64,
    restarts: Vec<Restart>,
    /// Per run, every position the session learned, in order.
    known: BTreeMap<u8, Vec<Known>>,
    masquerades: Vec<Masquerade>,
    /// The readable messages handed since the last status was: run, sequence, first event id,
    /// the position of their change.
    since_status: Vec<(u8, u64, u64, u64)>,
    /// The key lists handed whole: the run that answered `/get_all_keys`, when, and which
    /// pages it named.
    lists: Vec<(u8, Instant, [bool; PAGES])>,
    grace: Duration,
}

impl Oracle {
    /// An empty history; `grace` is the reorder window's `max_delay` (zero without one).
    pub fn new(grace: Duration) -> Oracle {
        Oracle {
            changes: Vec::new(),
            next_pos: 1,
            restarts: Vec::new(),
            known: BTreeMap::new(),
            masquerades: Vec::new(),
            since_status: Vec::new(),
            lists: Vec::new(),
            grace,
        }
    }

    fn record(&mut self, kind: Kind, run: u8, seq: u64, dropped: bool) -> u64 {
        let pos = self.next_pos;
        self.next_pos += 1;
        self.changes.push(Change {
            pos,
            kind,
            run,
            seq,
            dropped,
            handed: None,
        });
        pos
    }

    /// Records that page `page` became present (or absent) by run `run`'s batch `seq`, which
    /// the master's queue dropped or not; returns its position.
    pub fn page(&mut self, page: usize, present: bool, run: u8, seq: u64, dropped: bool) -> u64 {
        let kind = Kind::Page {
            page: page as u8,
            present,
        };
        self.record(kind, run, seq, dropped)
    }

    /// Records that the master restarted as `run`; returns its position.
    pub fn restart(&mut self, run: u8) -> u64 {
        let pos = self.record(Kind::Restart, run, 0, false);
        self.restarts.push(Restart {
            pos,
            run,
            first: None,
            damaged_first: None,
            first_held: false,
        });
        pos
    }

    /// Records that the session learned position `(seq, last)` of run `run` at `now`.
    fn learn(&mut self, now: Instant, run: u8, seq: u64, last: u64, status: bool) {
        self.known.entry(run).or_default().push(Known {
            seq,
            last,
            at: now,
            status,
        });
    }

    /// The session was handed a snapshot whose status was read from run `run` at `seq` with
    /// `events` published.
    pub fn status_handed(&mut self, now: Instant, run: u8, seq: u64, events: u64) {
        // A message of an older run handed since the last status (held for this one) that
        // continues this newer run's point exactly masquerades as its next batch.
        for &(r, m_seq, first, pos) in &self.since_status {
            if r < run && m_seq == seq + 1 && first == events + 1 {
                self.masquerades.push(Masquerade { pos, at: now });
            }
        }
        self.since_status.clear();
        for r in &mut self.restarts {
            r.first_held = false;
        }
        self.learn(now, run, seq, events, true);
    }

    /// The session was handed the whole key list that run `run` answered, at `now`, naming
    /// the pages `named`.
    pub fn list_handed(&mut self, now: Instant, run: u8, named: [bool; PAGES]) {
        self.lists.push((run, now, named));
    }

    /// The session was handed `message` at `now`.
    pub fn handed(&mut self, now: Instant, message: &Message) {
        let grace = self.grace;
        for r in &mut self.restarts {
            if r.run != message.run || r.damaged_first.is_some() {
                continue;
            }
            match r.first {
                None if message.readable => {
                    r.first = Some((message.seq, message.first_id, now));
                    r.first_held = true;
                }
                None => r.damaged_first = Some(now),
                // With a reorder window the session puts the run's messages in order: its
                // first is the lowest-numbered one handed while the window, or the wait for a
                // status point, may hold them.
                Some((seq, _, at))
                    if message.readable
                        && message.seq < seq
                        && !grace.is_zero()
                        && (now <= at + grace || r.first_held) =>
                {
                    r.first = Some((message.seq, message.first_id, now));
                }
                Some(_) => {}
            }
        }
        if let Some(c) = self.changes.iter_mut().find(|c| c.pos == message.pos) {
            c.handed = c.handed.or(Some(now));
        }
        if message.readable {
            let newest = self.known.iter().next_back();
            if let Some((_, ks)) = newest.filter(|(&r, _)| r > message.run) {
                let latest = ks.iter().max_by_key(|k| k.seq).copied();
                if latest
                    .is_some_and(|k| message.seq == k.seq + 1 && message.first_id == k.last + 1)
                {
                    self.masquerades.push(Masquerade {
                        pos: message.pos,
                        at: now,
                    });
                }
            }
            self.since_status
                .push((message.run, message.seq, message.first_id, message.pos));
            self.learn(now, message.run, message.seq, message.last_id(), false);
        }
    }

    /// The latest position learned of the latest run before `run` of which any was learned.
    fn latest_before(&self, run: u8) -> Option<(u8, Known)> {
        self.known
            .range(..run)
            .next_back()
            .and_then(|(&r, k)| k.iter().max_by_key(|k| k.seq).map(|k| (r, *k)))
    }

    /// What the session can tell of restart `r`, from what it was handed so far.
    fn seen(&self, r: &Restart) -> Seen {
        if let Some(at) = r.damaged_first {
            return Seen::Visible { at };
        }
        let Some((seq, first_id, at)) = r.first else {
            return Seen::Undetermined;
        };
        match self.latest_before(r.run) {
            Some((_, k)) if seq == k.seq + 1 && first_id == k.last + 1 => {
                Seen::Invisible { at: at.max(k.at) }
            }
            Some((_, k)) => Seen::Visible { at: at.max(k.at) },
            None => Seen::Visible { at },
        }
    }

    fn restart_of(&self, run: u8) -> Option<&Restart> {
        self.restarts.iter().find(|r| r.run == run)
    }

    /// Whether the dropped change `c` is hidden by its own run's invisible restart: that run's
    /// first message continues the old run's position exactly, so the sequences its queue
    /// skipped before it read as the old run's (R10); no later message or status tells them.
    fn hidden_by_own_restart(&self, c: &Change) -> bool {
        c.dropped
            && matches!(c.kind, Kind::Page { .. })
            && self.restart_of(c.run).is_some_and(|r| {
                matches!(self.seen(r), Seen::Invisible { .. })
                    && r.first.is_some_and(|(seq, _, _)| c.seq < seq)
            })
    }

    /// When the session learned of change `c`, if it did.
    fn revealed(&self, c: &Change) -> Option<Instant> {
        if let Kind::Restart = c.kind {
            let r = self.restart_of(c.run).expect("a restart is recorded");
            return match self.seen(r) {
                Seen::Visible { at } => Some(at),
                _ => None,
            };
        }
        if !c.dropped {
            return c.handed;
        }
        if self.hidden_by_own_restart(c) {
            return None;
        }
        // Its run's later positions learned: a later message, or a status covering it.
        let same_run = self.known.get(&c.run).and_then(|ks| {
            ks.iter()
                .filter(|k| {
                    if k.status {
                        k.seq >= c.seq
                    } else {
                        k.seq > c.seq
                    }
                })
                .map(|k| k.at)
                .min()
        });
        // A later run's message, after restarts the session can tell.
        let mut through = Instant::ZERO;
        let mut later: Option<Instant> = None;
        for r in self.restarts.iter().filter(|r| r.run > c.run) {
            match self.seen(r) {
                Seen::Visible { at } => through = through.max(at),
                _ => break,
            }
            let first = self
                .known
                .get(&r.run)
                .and_then(|ks| ks.iter().filter(|k| !k.status).map(|k| k.at).min());
            if let Some(at) = first {
                later = Some(at.max(through));
                break;
            }
        }
        match (same_run, later) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Since when change `c`, not revealed, is excused (an invisible restart hides it).
    fn excused(&self, c: &Change) -> Option<Instant> {
        let hiding = match c.kind {
            Kind::Restart => self.restart_of(c.run),
            Kind::Page { .. } if self.hidden_by_own_restart(c) => self.restart_of(c.run),
            Kind::Page { .. } if c.dropped => self.restarts.iter().find(|r| r.run > c.run),
            Kind::Page { .. } => None,
        }?;
        match self.seen(hiding) {
            Seen::Invisible { at } => Some(at),
            _ => None,
        }
    }

    /// The pending changes at `now`: positions, and since when each is excused.
    fn pending(&self, now: Instant) -> impl Iterator<Item = (u64, Option<Instant>)> + '_ {
        self.changes
            .iter()
            .filter_map(move |c| match self.revealed(c) {
                Some(at) if now >= at + self.grace => None,
                Some(_) => Some((c.pos, None)),
                None => Some((c.pos, self.excused(c))),
            })
    }

    /// The oldest pending position at `now` (`excused`: counting excused ones too), or one
    /// past the newest.
    fn horizon(&self, now: Instant, excused: bool) -> u64 {
        self.pending(now)
            .filter(|(_, e)| excused || e.is_none())
            .map(|(pos, _)| pos)
            .min()
            .unwrap_or(self.next_pos)
    }

    /// Applies `change` to page `page`'s presence.
    fn apply(page: usize, change: &Change, present: &mut bool) {
        match change.kind {
            Kind::Page {
                page: p,
                present: now,
            } if usize::from(p) == page => *present = now,
            Kind::Page { .. } => {}
            Kind::Restart => *present = false,
        }
    }

    /// Page `page`'s presence right after the changes up to position `pos`.
    fn present_at(&self, page: usize, pos: u64) -> bool {
        let mut present = false;
        for c in self.changes.iter().take_while(|c| c.pos <= pos) {
            Self::apply(page, c, &mut present);
        }
        present
    }

    /// Whether page `page` is present at some position from `from` on.
    fn present_from(&self, page: usize, from: u64) -> bool {
        let mut present = self.present_at(page, from);
        let mut any = present;
        for c in self.changes.iter().filter(|c| c.pos > from) {
            Self::apply(page, c, &mut present);
            any |= present;
        }
        any
    }

    /// Reports whether the last change of page `page` (or a restart after it) is a batch the
    /// master's queue dropped that nothing revealed: without the master's counters no signal
    /// can tell it, so an idle master's index cannot be asked to reflect it.
    pub fn unknowable(&self, page: usize) -> bool {
        self.changes
            .iter()
            .rev()
            .find(|c| match c.kind {
                Kind::Page { page: p, .. } => usize::from(p) == page,
                Kind::Restart => true,
            })
            .is_some_and(|c| c.dropped && self.revealed(c).is_none())
    }

    /// Reports whether page `page`, held by the master but not claimed once it is idle, is
    /// beyond what any rule can know (a miss, never a hit), given the master's counters
    /// (`status`: its run and status point, or `None` when it gives none):
    /// - without counters, a dropped tail ([`Oracle::unknowable`]), or a change an older run's
    ///   message carried that continued the newer run exactly (a masquerade, R10's mirror)
    ///   when no later change of the page reached the session;
    /// - the page's last change is a dropped batch hidden by its run's invisible restart
    ///   (R10: the run's first message continues the old run exactly);
    /// - a restart of which no message came, whose run's status is exactly the position the
    ///   session learned of the run before it (the status check cannot tell the two runs, R11),
    ///   and the page's last change is that run's dropped batch (or the restart).
    pub fn missing_unknowable(&self, page: usize, status: Option<(u8, u64, u64)>) -> bool {
        let Some((run, seq, events)) = status else {
            return self.unknowable(page) || self.masquerade_last(page);
        };
        let Some(last) = self.last_change(page) else {
            return false;
        };
        if self.hidden_by_own_restart(last) {
            return true;
        }
        let coincides = self.restart_of(run).is_some_and(|r| {
            matches!(self.seen(r), Seen::Undetermined)
                && self
                    .latest_before(run)
                    .is_some_and(|(_, k)| k.seq == seq && k.last == events)
        });
        coincides && last.run == run && (last.dropped || matches!(last.kind, Kind::Restart))
    }

    /// The last change of page `page`, or a restart after it.
    fn last_change(&self, page: usize) -> Option<&Change> {
        self.changes.iter().rev().find(|c| match c.kind {
            Kind::Page { page: p, .. } => usize::from(p) == page,
            Kind::Restart => true,
        })
    }

    /// Whether the last change of page `page` that reached the session was one a masquerade
    /// carried.
    fn masquerade_last(&self, page: usize) -> bool {
        let of_page = |pos: u64| {
            self.changes.iter().find(|c| c.pos == pos).is_some_and(
                |c| matches!(c.kind, Kind::Page { page: p, .. } if usize::from(p) == page),
            )
        };
        self.masquerades.iter().any(|m| {
            of_page(m.pos)
                && !self.changes.iter().any(|c| {
                    c.pos != m.pos
                        && matches!(c.kind, Kind::Page { page: p, .. } if usize::from(p) == page)
                        && c.handed.is_some_and(|at| at > m.at)
                })
        })
    }

    /// Reports whether the master restarted in this history.
    pub fn has_restart(&self) -> bool {
        !self.restarts.is_empty()
    }

    /// Reports whether any change touched page `page`.
    pub fn touched(&self, page: usize) -> bool {
        self.changes
            .iter()
            .any(|c| matches!(c.kind, Kind::Page { page: p, .. } if usize::from(p) == page))
    }

    /// Judges a claim of page `page` at `now`, claimed without a break since `since`.
    ///
    /// The excuse covers only what the old run held before the invisible restart (within
    /// the window the session may still be reflecting), while no change of the page since the
    /// restart has reached the session, and only a claim held since the restart became
    /// invisible, or one that began as a key list of a run before the restart's, naming the
    /// page, was handed after it (read before the restart: the session cannot tell that list
    /// from the new run's): any other claim made later (a claim made again after a break
    /// included), or of a page the new run changed visibly, rests on something else.
    pub fn judge(&self, now: Instant, page: usize, since: Instant) -> Judgement {
        let plain = self.horizon(now, false);
        if self.present_from(page, plain.saturating_sub(1)) {
            return Judgement::Fine;
        }
        let all = self.horizon(now, true);
        let excuse = self
            .restarts
            .iter()
            .filter_map(|r| match self.seen(r) {
                Seen::Invisible { at } if r.pos >= all => Some((r.pos, r.run, at)),
                _ => None,
            })
            .min();
        let Some((restart, run, excused_since)) = excuse else {
            return self.judge_masquerade(now, page, since);
        };
        let held_before = (all.saturating_sub(1)..restart).any(|q| self.present_at(page, q));
        let changed_since = self.changes.iter().any(|c| {
            c.pos > restart
                && matches!(c.kind, Kind::Page { page: p, .. } if usize::from(p) == page)
                && self.revealed(c).is_some()
        });
        // A claim made since the restart became invisible rests on something else, unless it
        // began as a key list of a run before the restart's, naming the page, was handed (read
        // before the restart, handed after it).
        let from_old_list = self
            .lists
            .iter()
            .any(|&(r, at, named)| r < run && at == since && named[page]);
        if !held_before || changed_since || (since > excused_since && !from_old_list) {
            return Judgement::FalseHit;
        }
        Judgement::Stale {
            age: now.saturating_duration_since(excused_since),
        }
    }

    /// Judges a claim no invisible restart excuses: stale if a masquerade stored the page, the
    /// claim is held since then, and no later change of the page reached the session.
    fn judge_masquerade(&self, now: Instant, page: usize, since: Instant) -> Judgement {
        let stored = |m: &Masquerade| {
            self.changes.iter().any(|c| {
                c.pos == m.pos
                    && c.kind
                        == Kind::Page {
                            page: page as u8,
                            present: true,
                        }
            })
        };
        let changed_after = |m: &Masquerade| {
            self.changes.iter().any(|c| {
                matches!(c.kind, Kind::Page { page: p, .. } if usize::from(p) == page)
                    && c.handed.is_some_and(|h| h > m.at)
            })
        };
        match self
            .masquerades
            .iter()
            .filter(|m| stored(m) && !changed_after(m) && since >= m.at)
            .map(|m| m.at)
            .min()
        {
            Some(at) => Judgement::Stale {
                age: now.saturating_duration_since(at),
            },
            None => Judgement::FalseHit,
        }
    }

    /// Returns `pos` counted from the horizon at `now` (0 for a position at or before it: a
    /// settled one).
    pub fn relative(&self, now: Instant, pos: u64) -> u64 {
        pos.saturating_sub(self.horizon(now, true).saturating_sub(1))
    }

    /// A canonical form of what decides future judgements. Without a restart, what is settled
    /// stays settled (only a restart's visibility can change later): positions are counted
    /// from the horizon at `now`, and two histories that differ only in older, settled changes
    /// agree. With a restart, the whole history counts.
    pub fn canonical(&self, now: Instant) -> impl std::hash::Hash + '_ {
        let base = if self.restarts.is_empty() {
            self.horizon(now, true).saturating_sub(1)
        } else {
            0
        };
        let at_base: Vec<bool> = (0..PAGES).map(|p| self.present_at(p, base)).collect();
        let changes: Vec<Change> = self
            .changes
            .iter()
            .filter(|c| c.pos > base)
            .map(|c| Change {
                pos: c.pos - base,
                // A grace over is the same as none.
                handed: c
                    .handed
                    .map(|at| at.max(now.saturating_sub_duration(self.grace))),
                ..*c
            })
            .collect();
        let restarts: Vec<Restart> = self
            .restarts
            .iter()
            .map(|r| Restart {
                pos: r.pos.saturating_sub(base),
                ..*r
            })
            .collect();
        (
            at_base,
            changes,
            restarts,
            self.known.clone(),
            self.masquerades.clone(),
            self.since_status.clone(),
            self.lists.clone(),
            self.next_pos - base,
        )
    }
}

/// `Instant` minus a duration, saturating at the origin.
trait SaturatingSub {
    fn saturating_sub_duration(self, d: Duration) -> Instant;
}

impl SaturatingSub for Instant {
    fn saturating_sub_duration(self, d: Duration) -> Instant {
        Instant::from_nanos(
            self.as_nanos()
                .saturating_sub(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests;
