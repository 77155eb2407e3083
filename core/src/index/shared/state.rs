//! The state word, the removal count and their turns: what a query reads at its start and
//! checks at its end to know whether what it read in between may stand.
//!
//! The state word is `generation << (FLAG_BITS + 1) | changing << FLAG_BITS | flags`. A change
//! that must be read again (a batch holding an event that names no object, whose removals are
//! of unknown extent and end in a clear; a clear) sets the changing bit and moves the
//! generation before it writes, and moves the generation again when it ends
//! ([`StateWord::begin_change`], [`StateWord::end_change`]): a query that overlaps it in any way
//! reads again. A clear also moves the generation once its buckets are empty. Removals move the
//! removal count to odd before they write and to even when the input ends
//! ([`StateWord::begin_removal`]): a query that overlapped only those checks its claims again.
//! [`State`] says why a query descheduled for a whole turn of either still reads again.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32, Ordering};

#[cfg(not(loom))]
use core::sync::atomic::{fence, AtomicU32, Ordering};

/// Low bits of the state word that carry the session's query flags.
pub(crate) const FLAG_BITS: u32 = 4;

/// The state word's bit that says the writer is in the middle of a bracketed change (see
/// [`StateWord::begin_change`]); the generation sits above it.
const CHANGING: u32 = 1 << FLAG_BITS;

/// Where the generation starts in the state word.
pub(super) const GENERATION_SHIFT: u32 = FLAG_BITS + 1;

/// What a query reads of the state at its start, to check at its end ([`StateWord::still`]):
/// the state word, and how many turns its generation had made. The generation alone (27 bits)
/// comes back to the same value after 2^27 moves; a query descheduled that long would take the
/// table as unchanged. With the turns, the pair repeats only after 2^59 moves.
///
/// Why the order works: the writer stores the state word that wraps, then the turn; a query
/// loads the turns, then the word (Acquire both). A query that saw a turn sees the word that
/// wrapped, or a later one; one that ends on the word it began with after a whole turn read a
/// word stored after that turn, so it sees the turn too.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct State {
    word: u32,
    turns: u32,
    /// The removal count (see [`StateWord::begin_removal`]), loaded after the word.
    removals: u32,
}

impl State {
    /// Returns the session's query flags.
    pub(super) fn flags(self) -> u32 {
        self.word & ((1 << FLAG_BITS) - 1)
    }

    /// Reports whether the word was read while the writer was in the middle of a bracketed
    /// change: a query that starts then reads again later.
    pub(super) fn is_changing(self) -> bool {
        self.word & CHANGING != 0
    }
}

/// How a query may use what it read (see [`StateWord::still`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Still {
    /// Nothing it reads moved under it: the answer stands.
    Yes,
    /// Only removals overlapped it: the answer stands if every slot it claims a page from is
    /// [`super::PageTable::unchanged`].
    IfUnchanged,
    /// The state moved: the answer may mix two states, and is read again.
    No,
}

/// The state word and its companions (see the module docs).
pub(super) struct StateWord {
    word: AtomicU32,
    /// How many removals the writer began and ended: odd while one is under way (see
    /// [`StateWord::begin_removal`]).
    pub(super) removals: AtomicU32,
    /// How many times the state word's generation, or the removal count, went all the way
    /// round: stored after the word that wrapped, read before it (see [`State`]).
    turns: AtomicU32,
}

impl StateWord {
    /// Makes the state of an empty table: generation 0, no flags, nothing under way.
    pub(super) fn new() -> StateWord {
        StateWord {
            word: AtomicU32::new(0),
            removals: AtomicU32::new(0),
            turns: AtomicU32::new(0),
        }
    }

    /// Returns the state: the generation and the session's flags (see the module docs).
    pub(super) fn load(&self) -> State {
        let turns = self.turns.load(Ordering::Acquire);
        let word = self.word.load(Ordering::Acquire);
        let removals = self.removals.load(Ordering::Acquire);
        State {
            word,
            turns,
            removals,
        }
    }

    /// Stores the next state word (Release), and counts a turn of the generation after a word
    /// that wrapped (the writer only).
    fn move_word(&self, current: u32, next: u32) {
        self.word.store(next, Ordering::Release);
        if next >> GENERATION_SHIFT < current >> GENERATION_SHIFT {
            self.turn();
        }
    }

    /// Counts a turn of the state word's generation or of the removal count (the writer only,
    /// after storing the word that wrapped).
    fn turn(&self) {
        let turns = self.turns.load(Ordering::Relaxed);
        self.turns.store(turns.wrapping_add(1), Ordering::Release);
    }

    /// Moves the removal count on by one (the writer only).
    fn move_removals(&self, current: u32) {
        let next = current.wrapping_add(1);
        self.removals.store(next, Ordering::Release);
        if next == 0 {
            self.turn();
        }
    }

    /// Moves the generation on by one (the writer only): what a clear does once its buckets
    /// are empty.
    pub(super) fn next_generation(&self) {
        let word = self.word.load(Ordering::Relaxed);
        self.move_word(word, word.wrapping_add(1 << GENERATION_SHIFT));
    }

    /// Sets the session's query flags (a new state: queries under way are answered again).
    pub(super) fn set_flags(&self, flags: u32) {
        let word = self.word.load(Ordering::Relaxed);
        let mask = (1 << FLAG_BITS) - 1;
        if word & mask == flags & mask {
            return;
        }
        let next = (word & !mask).wrapping_add(1 << GENERATION_SHIFT) | (flags & mask);
        self.move_word(word, next);
    }

    /// Reports how a query that read `before` at its start may use what it read since:
    /// [`Still::Yes`] when the state did not move under it and no removal overlapped it;
    /// [`Still::IfUnchanged`] when removals overlapped it, but nothing else did: the pages it
    /// claims stand if their slots are unchanged; [`Still::No`] when a change that must be read
    /// again (a clear, a change of the flags, a change the writer brackets) overlapped it.
    pub(super) fn still(&self, before: State) -> Still {
        // The removal count before the turns: a count that came round to the same value was
        // stored after its turn (see `State`).
        let removals = self.removals.load(Ordering::Acquire);
        fence(Ordering::Acquire);
        let same = !before.is_changing()
            && self.word.load(Ordering::Acquire) == before.word
            && self.turns.load(Ordering::Acquire) == before.turns;
        if !same {
            Still::No
        } else if removals == before.removals && removals & 1 == 0 {
            Still::Yes
        } else {
            Still::IfUnchanged
        }
    }

    /// Marks the start of a removal of pages from their slots (a keyed removal, an eviction):
    /// moves the removal count to odd before any of it is written, so that a query that
    /// overlaps it checks the pages it claims again ([`Still::IfUnchanged`]). Idempotent until
    /// [`StateWord::end_change`].
    pub(super) fn begin_removal(&self) {
        let removals = self.removals.load(Ordering::Relaxed);
        if removals & 1 == 1 {
            return;
        }
        self.move_removals(removals);
        // Like a slot's odd version: the writes that follow are ordered after the store.
        fence(Ordering::Release);
    }

    /// Marks the start of a change that must be read again (a clear, a batch of doubt): moves
    /// the generation and sets the changing bit before any of the change is written, so that a
    /// query that reads any of it, or that starts before [`StateWord::end_change`], reads
    /// again. Idempotent while a change is under way: one move for a whole batch.
    pub(super) fn begin_change(&self) {
        let word = self.word.load(Ordering::Relaxed);
        if word & CHANGING != 0 {
            return;
        }
        self.move_word(word, word.wrapping_add(1 << GENERATION_SHIFT) | CHANGING);
        // Like a slot's odd version: the writes that follow are ordered after the store.
        fence(Ordering::Release);
    }

    /// Marks the end of the change [`StateWord::begin_change`] started, and of the removal
    /// [`StateWord::begin_removal`] started (nothing if none is under way): moves the
    /// generation (or the removal count) again, so a query that started before reads again (or
    /// checks its pages again).
    pub(super) fn end_change(&self) {
        let removals = self.removals.load(Ordering::Relaxed);
        if removals & 1 == 1 {
            self.move_removals(removals);
        }
        let word = self.word.load(Ordering::Relaxed);
        if word & CHANGING == 0 {
            return;
        }
        self.move_word(word, (word & !CHANGING).wrapping_add(1 << GENERATION_SHIFT));
    }
}
