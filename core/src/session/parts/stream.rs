//! A batch the session keeps for later ([`HeldBatch`]): held by the reorder window or buffered
//! while a key list is read (what the session does with batches: `session/stream.rs`).

use alloc::vec::Vec;

use crate::frame::{decode, Batch, FrameError};
use crate::time::Instant;

/// A batch kept for later: its sequence frame and payload, and when it arrived.
#[derive(Clone, Debug)]
pub(in crate::session) struct HeldBatch {
    seq: [u8; 8],
    pub(in crate::session) payload: Vec<u8>,
    /// When the session received it: what it stores was present at the master then.
    pub(in crate::session) arrived: Instant,
}

impl HeldBatch {
    pub(in crate::session) fn copy(arrived: Instant, frames: &[&[u8]]) -> HeldBatch {
        let mut seq = [0u8; 8];
        seq.copy_from_slice(frames[1]);
        HeldBatch {
            seq,
            payload: frames[2].to_vec(),
            arrived,
        }
    }

    /// Decodes it again (an undecodable one fails again: its mark says so).
    pub(in crate::session) fn decode(&self) -> Result<Batch<'_>, FrameError> {
        decode(&[&[], &self.seq, &self.payload])
    }
}
