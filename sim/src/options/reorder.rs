//! Reordering turned on for a run: a reorder window in the session and network jitter for it to
//! reorder ([`reordering`]).

use core::time::Duration;

use hicache_index::ReorderConfig;

use crate::rng::Rng;

use super::durations::{ms, us};
use super::parts::{NetworkOptions, SessionOptions};

/// Turns on a reorder window of 2 to 16 batches held up to 2 to 30 ms, and network jitter of
/// 100 us to `max_jitter` for it to reorder.
pub(super) fn reordering(
    s: &mut SessionOptions,
    n: &mut NetworkOptions,
    r: &mut Rng,
    max_jitter: Duration,
) {
    s.reorder = ReorderConfig {
        max_held: r.range(2, 16) as usize,
        max_delay: Some(r.duration(ms(2), ms(30))),
    };
    n.reorder_jitter = r.duration(us(100), max_jitter);
}
