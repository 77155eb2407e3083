//! The claims a query checks again when removals overlapped it: the slot and version of every
//! page it claims, in a buffer on the query's stack (a *double collect*, see the parent
//! module's docs for why it is a point of the stream's history).

/// Where a reader found a page it claims: the slot and the (even) version it read there, to be
/// checked again once the query has read every page (`PageTable::unchanged`).
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

/// The claims a query records in its first buffer; the rest go to a spill buffer of
/// [`CLAIMS`] in all, zeroed only when the first of them comes. A buffer is zeroed at every
/// reading, and 4 KiB of zeroes cost a short query more than its probes (13 % of the exhaustive
/// checker's time, whose queries ask two or three pages; 3 % of a 256-page token query that
/// misses at page 8).
pub(crate) const FEW_CLAIMS: usize = 32;

/// Where the claims past a query's first buffer go: `None` until the first comes.
pub(crate) type Spill = Option<[SlotAt; CLAIMS]>;

/// The slots of the pages a query claims, in buffers the query owns (on its stack): what it
/// checks again when a removal overlapped it (see the module docs).
#[derive(Debug)]
pub(crate) struct Claims<'b> {
    slots: &'b mut [SlotAt],
    /// Where the claims past `slots` go, if anywhere (up to [`CLAIMS`] in all).
    spill: Option<&'b mut Spill>,
    len: usize,
    overflowed: bool,
}

impl<'b> Claims<'b> {
    /// Records claims in `slots` (a query claiming more than it holds reads again).
    pub(crate) fn new(slots: &'b mut [SlotAt]) -> Claims<'b> {
        Claims {
            slots,
            spill: None,
            len: 0,
            overflowed: false,
        }
    }

    /// Records claims in `slots`, then in `spill` ([`CLAIMS`] in all), which is zeroed only if
    /// the claims outgrow `slots`.
    pub(crate) fn spilling(slots: &'b mut [SlotAt], spill: &'b mut Spill) -> Claims<'b> {
        Claims {
            spill: Some(spill),
            ..Claims::new(slots)
        }
    }

    /// Reports whether every slot recorded still holds the version read there, as `unchanged`
    /// says of each (and none was left unrecorded for want of room).
    pub(crate) fn unchanged(&self, unchanged: impl Fn(SlotAt) -> bool) -> bool {
        let first = self.len.min(self.slots.len());
        let spilled = match self.spill.as_deref() {
            Some(Some(spill)) => &spill[..self.len - first],
            _ => &[],
        };
        !self.overflowed
            && self.slots[..first]
                .iter()
                .chain(spilled)
                .all(|&at| unchanged(at))
    }

    /// Records a slot a claimed page was read in.
    pub(crate) fn push(&mut self, at: SlotAt) {
        if let Some(slot) = self.slots.get_mut(self.len) {
            *slot = at;
            self.len += 1;
            return;
        }
        let spilled = self.len - self.slots.len();
        match self.spill.as_deref_mut() {
            Some(spill) if spilled < CLAIMS.saturating_sub(self.slots.len()) => {
                spill.get_or_insert([SlotAt::default(); CLAIMS])[spilled] = at;
                self.len += 1;
            }
            _ => self.overflowed = true,
        }
    }
}
