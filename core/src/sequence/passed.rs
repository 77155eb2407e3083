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
    /// Reports whether `m` is a copy of a decodable batch heard under the followed run (R2).
    /// An undecodable batch is never taken for one (bytes that cannot be read can be alike in
    /// two runs, an empty payload say; its own forget costs misses only), nor a batch like one
    /// of a run the stream left (a late copy of that run is R5's: [`Heard::left_run_copy_of`]).
    pub(super) fn copy_of(&self, m: &Mark) -> bool {
        !m.undecodable
            && self.passed.iter().any(|p| {
                p.seq == m.seq && p.print == m.print && p.run == self.run && p.tells_copies
            })
    }

    /// Reports whether `m` has the sequence of a batch of the followed run that the stream
    /// heard, and other bytes: within one run a sequence is given once, so it is another run's
    /// (R5). An undecodable batch arriving takes no part (its sequence may be garbled; it
    /// forgets anyway, R8); one heard tells twins (at worst a needless forget).
    pub(super) fn twin_of(&self, m: &Mark) -> bool {
        !m.undecodable
            && self
                .passed
                .iter()
                .any(|p| p.seq == m.seq && p.run == self.run && p.print != m.print)
    }

    /// Reports whether `m` is a copy of a batch heard under a run the stream has since left
    /// (R5): a late copy across a run change, taken for another run's even where its numbers
    /// continue the position (twin runs number alike). The followed run's own batch with the
    /// same bytes (a fast restart publishing the same events in the same millisecond), or one
    /// of its batches heard before the run change was seen, cannot be told from it: at worst a
    /// needless forget. A batch only held counts too: its bytes were heard.
    pub(super) fn left_run_copy_of(&self, m: &Mark) -> bool {
        !m.undecodable
            && self
                .passed
                .iter()
                .any(|p| p.seq == m.seq && p.print == m.print && p.run != self.run)
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
