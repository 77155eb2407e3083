//! The mark of a batch: what places it in the stream.

use crate::frame::{Batch, Seq};

/// A print of a batch's bytes: two batches with one sequence and one print are copies.
///
/// It is a 64-bit hash of the payload (the sequence is kept apart), so that a copy is told
/// from another run's batch that happens to carry the same sequence, event ids and stamp,
/// without trusting a publisher's clock. Not a cryptographic digest: a publisher that crafts a
/// colliding payload only makes its own batch skipped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Print(pub u64);

impl Print {
    /// Takes the print of a payload.
    ///
    /// Four lanes of eight bytes a step, so that their multiplies overlap; then the lanes, the
    /// last words and the length, into one. Each step is a folded 128-bit multiply (the high
    /// half XORed into the low), which spreads every bit of the step's input over the whole
    /// word: a difference one word makes is then not undone by a plausible difference in the
    /// next word. (FxHash's multiply and rotate, the first print, moved a difference only
    /// upwards: a payload differing in bit 63 of one word and bit 4 of the next had the same
    /// print.) One lane, one chain of multiplies over the payload, cost 17 % of ingest (perf
    /// of the `ingest` bench's loop): the payload is read once more after decoding, so this is
    /// on the hot path.
    pub fn of(payload: &[u8]) -> Print {
        const K: u64 = 0x9e37_79b9_7f4a_7c15;
        let step = |h: u64, word: u64| {
            let p = u128::from(h ^ word) * u128::from(K);
            (p as u64) ^ ((p >> 64) as u64)
        };
        let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("eight bytes"));
        let mut lanes: [u64; 4] = [
            0xcbf2_9ce4_8422_2325,
            0x243f_6a88_85a3_08d3,
            0xbf58_476d_1ce4_e5b9,
            0x94d0_49bb_1331_11eb,
        ];
        let mut blocks = payload.chunks_exact(32);
        for block in &mut blocks {
            for (lane, bytes) in lanes.iter_mut().zip(block.chunks_exact(8)) {
                *lane = step(*lane, word(bytes));
            }
        }
        let mut h = lanes[1..].iter().fold(lanes[0], |h, &lane| step(h, lane));
        let mut words = blocks.remainder().chunks_exact(8);
        for bytes in &mut words {
            h = step(h, word(bytes));
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        h = step(h, u64::from_le_bytes(tail));
        Print(step(h, payload.len() as u64))
    }
}

/// What places one batch in the stream: its sequence, event ids and print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mark {
    /// The batch's sequence number.
    pub seq: Seq,
    /// The event id of its first event, when the publisher numbers events.
    pub first: Option<u64>,
    /// The event id of its last event, when the publisher numbers events.
    pub last: Option<u64>,
    /// How many events it holds (0 when undecodable).
    pub events: usize,
    /// The print of its payload.
    pub print: Print,
    /// Its sequence could be read but its events could not: what it changed is unknown (R8).
    pub undecodable: bool,
}

impl Mark {
    /// Takes the mark of a decoded batch and its payload.
    pub fn of(batch: &Batch<'_>, payload: &[u8]) -> Mark {
        Mark {
            seq: batch.seq,
            first: batch.events.first().and_then(|e| e.event_id),
            last: batch.events.last().and_then(|e| e.event_id),
            events: batch.events.len(),
            print: Print::of(payload),
            undecodable: false,
        }
    }

    /// Takes the mark of a batch whose sequence is `seq` and whose payload cannot be decoded.
    pub fn undecodable(seq: Seq, payload: &[u8]) -> Mark {
        Mark {
            seq,
            first: None,
            last: None,
            events: 0,
            print: Print::of(payload),
            undecodable: true,
        }
    }
}
