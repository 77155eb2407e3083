//! The state of the connection: down, connecting or up, the reconnects' backoff with jitter, and
//! the endpoint in use (what the session does with it: `session/link.rs`).

use alloc::string::String;
use core::time::Duration;

use rand_xoshiro::rand_core::{RngCore, SeedableRng};
use rand_xoshiro::SplitMix64;

use crate::time::Instant;

use super::super::config::BackoffConfig;

/// The connection to the event endpoint: where it stands, the reconnects' backoff, and the
/// endpoint in use (configured, chosen from worker metadata, or the HA leader's).
#[derive(Debug)]
pub(in crate::session) struct Connection {
    pub(in crate::session) state: Link,
    pub(in crate::session) backoff: Backoff,
    pub(in crate::session) endpoint: Option<String>,
}

impl Connection {
    /// Returns when [`Connection::handle_timeout`] is next due.
    pub(in crate::session) fn poll_timeout(&self) -> Option<Instant> {
        self.state.poll_timeout()
    }

    /// Returns what is due at `now`, if anything.
    pub(in crate::session) fn handle_timeout(&self, now: Instant) -> Option<LinkDue> {
        self.state.handle_timeout(now)
    }

    /// Reports whether the subscriber is connected.
    pub(in crate::session) fn is_up(&self) -> bool {
        matches!(self.state, Link::Up { .. })
    }
}

/// The connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum Link {
    /// Not connected; connect at the given time (never, without an endpoint).
    Down { retry_at: Option<Instant> },
    /// A connection was asked for.
    Connecting { deadline: Instant },
    /// Connected since.
    Up { since: Instant },
}

/// What the connection's timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::session) enum LinkDue {
    /// The reconnect time came: connect.
    Connect,
    /// The connection did not come up in time: drop it, as lost.
    ConnectTimedOut,
}

impl Link {
    /// Returns when [`Link::handle_timeout`] is next due.
    fn poll_timeout(&self) -> Option<Instant> {
        match *self {
            Link::Down { retry_at } => retry_at,
            Link::Connecting { deadline } => Some(deadline),
            Link::Up { .. } => None,
        }
    }

    /// Returns what is due at `now`, if anything (the session acts on it).
    fn handle_timeout(&self, now: Instant) -> Option<LinkDue> {
        match *self {
            Link::Down { retry_at: Some(at) } if at <= now => Some(LinkDue::Connect),
            Link::Connecting { deadline } if deadline <= now => Some(LinkDue::ConnectTimedOut),
            _ => None,
        }
    }
}

/// The reconnect backoff: attempts failed in a row, and the seeded generator of its jitter.
#[derive(Debug)]
pub(in crate::session) struct Backoff {
    /// How many attempts failed in a row.
    pub(in crate::session) attempts: u32,
    /// The jitter: the same stream as SplitMix64 seeded with `seed ^ 0x9e37_79b9_7f4a_7c15`
    /// always gave.
    rng: SplitMix64,
}

impl Backoff {
    pub(in crate::session) fn new(seed: u64) -> Backoff {
        Backoff {
            attempts: 0,
            rng: SplitMix64::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
        }
    }

    /// The next delay: `initial * 2^attempts` capped at `max`, then a uniformly random point in
    /// its upper half (jitter from the seeded generator).
    pub(in crate::session) fn delay(&mut self, b: &BackoffConfig) -> Duration {
        let exp = b.initial.saturating_mul(1u32 << self.attempts.min(20));
        let full = exp.min(b.max);
        let nanos = u64::try_from(full.as_nanos()).unwrap_or(u64::MAX);
        let half = nanos / 2;
        let jitter = if half == 0 {
            0
        } else {
            self.rng.next_u64() % (half + 1)
        };
        Duration::from_nanos(half + jitter)
    }
}

#[cfg(test)]
mod tests {
    use rand_xoshiro::rand_core::{RngCore, SeedableRng};
    use rand_xoshiro::SplitMix64;

    /// The hand-written SplitMix64 the backoff drew its jitter from before `rand_xoshiro`'s.
    fn hand_written(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    #[test]
    fn the_backoff_generator_draws_the_stream_it_always_drew() {
        // SplitMix64's published first output from state 0.
        assert_eq!(
            SplitMix64::seed_from_u64(0).next_u64(),
            0xe220_a839_7b1d_cdaf
        );
        for seed in [0u64, 1, 7, 0x9e37_79b9_7f4a_7c15, u64::MAX] {
            let (mut state, mut rng) = (seed, SplitMix64::seed_from_u64(seed));
            for _ in 0..64 {
                assert_eq!(rng.next_u64(), hand_written(&mut state), "seed {seed}");
            }
        }
    }
}
