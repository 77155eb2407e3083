//! The batches held aside: by the reorder window until their place comes, or while the stream
//! is unplaced, until a status point places them. With a reorder window they are released in
//! sequence order (the window's work); without one, in the order they arrived (the
//! transport's order, which is the publishers' own: a run change shows in it).

use alloc::collections::{BTreeMap, BTreeSet};

use super::mark::{Mark, Print};
use crate::time::Instant;

/// One held batch: its mark, when it arrived (or when its wait began), its place in the order
/// of arrival, its size and what the caller keeps of it.
#[derive(Debug)]
pub(super) struct Held<T> {
    pub(super) mark: Mark,
    pub(super) since: Instant,
    pub(super) arrival: u64,
    pub(super) bytes: usize,
    pub(super) item: T,
}

/// Held batches in release order: two batches of one sequence (two runs') are both kept, a
/// copy of one held is not.
#[derive(Debug)]
pub(super) struct Hold<T> {
    /// By (sequence or arrival, print).
    batches: BTreeMap<(u64, Print), Held<T>>,
    /// The (sequence, print) of every batch held, to tell copies.
    marks: BTreeSet<(u64, Print)>,
    /// Release in sequence order (a reorder window), else in arrival order.
    by_seq: bool,
    bytes: usize,
}

impl<T> Hold<T> {
    pub(super) fn new(by_seq: bool) -> Hold<T> {
        Hold {
            batches: BTreeMap::new(),
            marks: BTreeSet::new(),
            by_seq,
            bytes: 0,
        }
    }

    /// Holds a batch (the `arrival`th offered); returns false (and keeps nothing) when a copy of
    /// it is held already.
    pub(super) fn insert(
        &mut self,
        since: Instant,
        arrival: u64,
        mark: Mark,
        bytes: usize,
        item: T,
    ) -> bool {
        if !self.marks.insert((mark.seq.0, mark.print)) {
            return false;
        }
        let order = if self.by_seq { mark.seq.0 } else { arrival };
        self.bytes += bytes;
        self.batches.insert(
            (order, mark.print),
            Held {
                mark,
                since,
                arrival,
                bytes,
                item,
            },
        );
        true
    }

    /// Reports whether a copy of the batch marked `mark` is held.
    pub(super) fn holds_copy_of(&self, mark: &Mark) -> bool {
        self.marks.contains(&(mark.seq.0, mark.print))
    }

    /// Returns the mark of the lowest-numbered held batch.
    pub(super) fn first(&self) -> Option<&Mark> {
        self.batches.values().next().map(|h| &h.mark)
    }

    /// Takes the lowest-numbered held batch.
    pub(super) fn take_first(&mut self) -> Option<Held<T>> {
        let (_, held) = self.batches.pop_first()?;
        self.marks.remove(&(held.mark.seq.0, held.mark.print));
        self.bytes -= held.bytes;
        Some(held)
    }

    /// Returns how many batches are held.
    pub(super) fn len(&self) -> usize {
        self.batches.len()
    }

    /// Returns the payload bytes held.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Returns when the batch held longest began its wait.
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.batches.values().map(|h| h.since).min()
    }

    /// Drops every held batch; returns how many there were.
    pub(super) fn clear(&mut self) -> usize {
        let n = self.batches.len();
        self.batches.clear();
        self.marks.clear();
        self.bytes = 0;
        n
    }
}
