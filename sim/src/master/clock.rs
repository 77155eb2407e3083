//! The publisher's clock: the batch timestamps are the true time plus an offset that jumps
//! forward now and then and is often stepped back to the true time a while later (a clock
//! stepped by hand or by NTP). Only the timestamps move; nothing else in the model reads it.

use std::time::Duration;

use hicache_index::Instant;

use crate::options::MasterOptions;
use crate::rng::Rng;

/// The publisher's clock (see the module docs).
#[derive(Clone, Debug)]
pub(super) struct Clock {
    rng: Rng,
    per_sec: f64,
    jump: (Duration, Duration),
    back: f64,
    back_after: (Duration, Duration),
    /// Milliseconds the clock is ahead of the true time.
    offset_ms: u64,
    next_jump: Option<Instant>,
    step_back_at: Option<Instant>,
    /// Forward jumps and steps back so far.
    pub(super) jumps: u64,
    pub(super) steps_back: u64,
}

impl Clock {
    pub(super) fn new(opts: &MasterOptions, mut rng: Rng) -> Clock {
        let next_jump = rng
            .exponential(opts.clock_jumps_per_sec)
            .map(|d| Instant::ZERO + d);
        Clock {
            rng,
            per_sec: opts.clock_jumps_per_sec,
            jump: opts.clock_jump,
            back: opts.clock_back,
            back_after: opts.clock_back_after,
            offset_ms: 0,
            next_jump,
            step_back_at: None,
            jumps: 0,
            steps_back: 0,
        }
    }

    /// Stops further jumps (the faults stop); an offset already taken stays until its step
    /// back, if one is due.
    pub(super) fn steady(&mut self) {
        self.next_jump = None;
    }

    /// Returns how far ahead of the true time the clock reads at `now`, after what was due.
    pub(super) fn offset_ms(&mut self, now: Instant) -> u64 {
        loop {
            let back = self.step_back_at.filter(|&t| t <= now);
            let jump = self.next_jump.filter(|&t| t <= now);
            match (back, jump) {
                (Some(b), j) if j.is_none_or(|j| b <= j) => {
                    self.step_back_at = None;
                    self.offset_ms = 0;
                    self.steps_back += 1;
                }
                (_, Some(j)) => {
                    let d = self.rng.duration(self.jump.0, self.jump.1);
                    self.offset_ms += d.as_millis() as u64;
                    self.jumps += 1;
                    if self.rng.chance(self.back) {
                        let after = self.rng.duration(self.back_after.0, self.back_after.1);
                        self.step_back_at = Some(j + after);
                    }
                    self.next_jump = self.rng.exponential(self.per_sec).map(|d| j + d);
                }
                _ => return self.offset_ms,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{Options, Preset};

    #[test]
    fn a_jump_moves_the_clock_forward_and_a_step_back_returns_it() {
        let mut o = Options::for_seed(1, Some(Preset::Calm), 100).master;
        o.clock_jumps_per_sec = 10.0;
        o.clock_jump = (Duration::from_secs(60), Duration::from_secs(60));
        o.clock_back = 1.0;
        o.clock_back_after = (Duration::from_millis(1), Duration::from_millis(1));
        let mut clock = Clock::new(&o, Rng::new(1));
        // One jump only.
        clock.per_sec = 0.0;
        let first = clock.next_jump.expect("a jump is drawn");
        assert_eq!(clock.offset_ms(Instant::ZERO), 0);
        assert_eq!(clock.offset_ms(first), 60_000);
        assert_eq!(clock.offset_ms(first + Duration::from_millis(1)), 0);
        assert_eq!((clock.jumps, clock.steps_back), (1, 1));
    }

    #[test]
    fn a_steady_clock_draws_nothing() {
        let o = Options::for_seed(1, Some(Preset::Calm), 100).master;
        let rng = Rng::new(5);
        let mut clock = Clock::new(&o, rng.clone());
        assert_eq!(clock.offset_ms(Instant::from_millis(10_000)), 0);
        assert_eq!(clock.rng, rng);
    }
}
