//! Short ways to write the durations the options are drawn from.

use core::time::Duration;

/// `n` milliseconds.
pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `n` microseconds.
pub(super) fn us(n: u64) -> Duration {
    Duration::from_micros(n)
}
