//! A small seeded pseudo-random generator (SplitMix64), so that a run is a pure function of its
//! seed.
//!
//! Every component of the world takes its own stream ([`Rng::fork`]), so that changing how often
//! one component draws does not shift the numbers another one sees.

use core::time::Duration;

/// A SplitMix64 generator: 64 bits of state, fast, and good enough for simulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// Makes a generator from a seed (any value, zero included).
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed ^ 0x6a09_e667_f3bc_c908,
        }
    }

    /// Derives an independent generator for the component named by `stream`.
    pub fn fork(&self, stream: u64) -> Rng {
        let mut base = Rng {
            state: self.state ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        };
        Rng::new(base.next_u64())
    }

    /// Returns the next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Returns a number in `0..n` (0 when `n` is 0), by multiply-shift.
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Returns an index into a collection of `len` items (0 when it is empty).
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// Returns a number in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.below(hi - lo + 1)
    }

    /// Returns `true` with probability `p` (0 never, 1 always).
    pub fn chance(&mut self, p: f64) -> bool {
        if p <= 0.0 {
            return false;
        }
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64) < p
    }

    /// Returns a float in `0..1`.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64) * (1.0 / (1u64 << 53) as f64)
    }

    /// Returns a duration uniformly in `lo..=hi` (nanosecond resolution).
    pub fn duration(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
        Duration::from_nanos(self.range(lo, hi))
    }

    /// Returns the waiting time to the next arrival of a Poisson process with `per_sec` arrivals
    /// per second (`None` when the rate is 0), capped at one hour.
    pub fn exponential(&mut self, per_sec: f64) -> Option<Duration> {
        if per_sec <= 0.0 {
            return None;
        }
        let u = 1.0 - self.unit();
        let secs = (-u.ln() / per_sec).min(3600.0);
        Some(Duration::from_nanos((secs * 1e9) as u64))
    }

    /// Picks one item (`None` when there is none).
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        items.get(self.index(items.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_gives_the_same_numbers() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn forks_are_independent_of_each_other() {
        let root = Rng::new(1);
        let (mut a, mut b) = (root.fork(1), root.fork(2));
        assert_ne!(a.next_u64(), b.next_u64());
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = Rng::new(3);
        for n in 1..200 {
            assert!(r.below(n) < n);
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 5), 5);
    }
}
