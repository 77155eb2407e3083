//! The batches the stream heard, kept to tell a copy (R2) from a twin or a late copy of a run
//! the stream left (R5).

use alloc::collections::VecDeque;

use super::mark::{Mark, Print};
use crate::frame::Seq;

/// How many batches the stream remembers to tell copies (R2), at least.
const PASSED_AT_LEAST: usize = 256;

/// A batch the stream heard (applied, skipped, held or dropped with what was held).
#[derive(Clone, Copy, Debug)]
struct Passed {
    seq: Seq,
    print: Print,
    /// The run it was heard under ([`Heard`]'s `run`).
    run: u32,
    /// It tells copies: it was ruled on and decoded. A batch only held (dropped with the hold,
    /// say) or undecodable tells twins only: a copy of a batch dropped with the hold may be
    /// what a key list read before it lacks.
    tells_copies: bool,
}

/// What a batch is to the batches heard ([`Heard::kin_of`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Kin {
    /// A copy of a decodable batch heard under the followed run (R2). A batch like one of a
    /// run the stream left is not one (it is `left_run_copy`).
    pub(super) copy: bool,
    /// The sequence of a batch of the followed run that the stream heard, and other bytes:
    /// within one run a sequence is given once, so it is another run's (R5). A batch heard
    /// undecodable tells twins too (at worst a needless forget).
    pub(super) twin: bool,
    /// A copy of a batch heard under a run the stream has since left (R5): a late copy across
    /// a run change, taken for another run's even where its numbers continue the position
    /// (twin runs number alike). The followed run's own batch with the same bytes (a fast
    /// restart publishing the same events in the same millisecond), or one of its batches
    /// heard before the run change was seen, cannot be told from it: at worst a needless
    /// forget. A batch only held counts too: its bytes were heard.
    pub(super) left_run_copy: bool,
}

/// The batches heard, newest last, whatever became of them, and the run they were heard
/// under: what a copy is told by (R2), a batch of another run numbered like one of the
/// followed run, and a late copy of a batch of a run the stream left (R5).
#[derive(Debug, Default)]
pub(super) struct Heard {
    passed: VecDeque<Passed>,
    /// The number of the run the stream follows: one more at each forget for another run's
    /// batch or status (R5, R11), so that only the followed run's batches tell copies and
    /// twins, and the others tell late copies of the runs left.
    run: u32,
}

impl Heard {
    /// Relates `m` to the batches heard, in one pass over them (every batch asks, so the
    /// ingest path reads them once). An undecodable batch arriving is related to none: its
    /// bytes can be alike in two runs (an empty payload, say) and its sequence may be garbled;
    /// it forgets anyway (R8).
    pub(super) fn kin_of(&self, m: &Mark) -> Kin {
        let mut kin = Kin::default();
        if m.undecodable {
            return kin;
        }
        for p in self.passed.iter().filter(|p| p.seq == m.seq) {
            let same = p.print == m.print;
            if p.run == self.run {
                kin.copy |= same && p.tells_copies;
                kin.twin |= !same;
            } else {
                kin.left_run_copy |= same;
            }
        }
        kin
    }

    /// Records a batch heard, to tell its copies (R2), twins and late copies (R5), keeping at
    /// least the last `keep` of them (so a late copy older than that is not told).
    pub(super) fn remember(&mut self, m: &Mark, tells_copies: bool, keep: usize) {
        if self.passed.len() >= PASSED_AT_LEAST.max(keep) {
            self.passed.pop_front();
        }
        self.passed.push_back(Passed {
            seq: m.seq,
            print: m.print,
            run: self.run,
            tells_copies,
        });
    }

    /// The stream forgot because of another run's batch or status: the batches heard are that
    /// other run's, or the followed one's before it; from now on they tell no copies or twins,
    /// only late copies of a run left.
    pub(super) fn run_changed(&mut self) {
        self.run = self.run.wrapping_add(1);
    }

    /// A new stream: nothing heard tells anything of it (R9).
    pub(super) fn clear(&mut self) {
        self.passed.clear();
    }
}
