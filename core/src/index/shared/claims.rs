//! The claims a query checks again when removals overlapped it: the slot and version of every
//! page it claims, in a buffer on the query's stack (a *double collect*, see the parent
//! module's docs for why it is a point of the stream's history).

use super::PageTable;

/// Where a reader found a page it claims: the slot and the (even) version it read there, to be
/// checked again once the query has read every page ([`PageTable::unchanged`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotAt {
    pub(super) idx: u32,
    pub(super) version: u32,
}

impl SlotAt {
    /// Where a page was read: slot `idx`, at `version`.
    pub(super) fn new(idx: usize, version: u32) -> SlotAt {
        SlotAt {
            idx: idx as u32,
            version,
        }
    }
}

/// How many claimed pages a query can check again after a removal overlapped it: more, and
/// such a query reads again instead (a query of more pages beside a stream that keeps
/// removing may answer [`crate::QueryError::Busy`]).
#[cfg(not(loom))]
pub(crate) const CLAIMS: usize = 512;

/// Under loom, a handful.
#[cfg(loom)]
pub(crate) const CLAIMS: usize = 4;

/// The buffer a query of at most this many pages takes instead of one of [`CLAIMS`]: the
/// buffer is zeroed at every reading, and 4 KiB of zeroes cost a short query more than its
/// probes (13 % of the exhaustive checker's time, whose queries ask two or three pages).
pub(crate) const FEW_CLAIMS: usize = 32;

/// The slots of the pages a query claims, in a buffer the query owns (on its stack): what it
/// checks again when a removal overlapped it (see the module docs).
#[derive(Debug)]
pub(crate) struct Claims<'b> {
    slots: &'b mut [SlotAt],
    len: usize,
    overflowed: bool,
}

impl<'b> Claims<'b> {
    /// Records claims in `slots` (a query claiming more than it holds reads again).
    pub(crate) fn new(slots: &'b mut [SlotAt]) -> Claims<'b> {
        Claims {
            slots,
            len: 0,
            overflowed: false,
        }
    }

    /// Reports whether every slot recorded still holds the version read there (and none was
    /// left unrecorded for want of room).
    pub(crate) fn unchanged(&self, pages: &PageTable) -> bool {
        !self.overflowed && self.slots[..self.len].iter().all(|&at| pages.unchanged(at))
    }

    /// Records a slot a claimed page was read in.
    pub(crate) fn push(&mut self, at: SlotAt) {
        match self.slots.get_mut(self.len) {
            Some(slot) => {
                *slot = at;
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }
}
