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
    /// Eight bytes a step (a multiply and a rotate each, FxHash's mix), then the length: the
    /// whole payload is read once more after decoding, at about a byte a cycle less than the
    /// decoder's own cost (measured in the `ingest` bench).
    pub fn of(payload: &[u8]) -> Print {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut chunks = payload.chunks_exact(8);
        for chunk in &mut chunks {
            let word = u64::from_le_bytes(chunk.try_into().expect("eight bytes"));
            h = (h.rotate_left(5) ^ word).wrapping_mul(K);
        }
        let mut tail = [0u8; 8];
        tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
        h = (h.rotate_left(5) ^ u64::from_le_bytes(tail)).wrapping_mul(K);
        h = (h.rotate_left(5) ^ payload.len() as u64).wrapping_mul(K);
        Print(h ^ (h >> 29))
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
