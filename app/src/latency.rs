//! Latency figures for the demo's report: an `hdrhistogram` behind a lock, recorded from any
//! thread, read for quantiles and the maximum. (`serve`'s `/metrics` histogram is the
//! Prometheus exporter's.)

use std::sync::Mutex;
use std::time::Duration;

use hdrhistogram::Histogram;

/// Significant decimal digits kept: values within 0.1 % of the truth.
const SIGFIG: u8 = 3;

/// Records durations from any thread, in nanoseconds (1 ns to about 18 minutes; longer ones
/// count as the longest).
#[derive(Debug)]
pub(crate) struct Latency {
    histogram: Mutex<Recorded>,
}

/// The histogram and the exact longest duration (the histogram's own is its bucket's edge).
#[derive(Debug)]
struct Recorded {
    histogram: Histogram<u64>,
    max_ns: u64,
}

impl Latency {
    /// The longest duration told apart, in nanoseconds (2^40, about 18 minutes).
    const HIGHEST_NS: u64 = 1 << 40;

    /// Makes an empty histogram.
    pub(crate) fn new() -> Latency {
        let histogram = Histogram::new_with_bounds(1, Self::HIGHEST_NS, SIGFIG)
            .expect("1 ns to 2^40 ns at 3 digits are valid bounds");
        Latency {
            histogram: Mutex::new(Recorded {
                histogram,
                max_ns: 0,
            }),
        }
    }

    /// Records one duration.
    pub(crate) fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let mut r = self.lock();
        r.histogram.saturating_record(ns.max(1));
        r.max_ns = r.max_ns.max(ns);
    }

    /// Returns the longest duration recorded; `None` when empty.
    pub(crate) fn max(&self) -> Option<Duration> {
        let r = self.lock();
        (!r.histogram.is_empty()).then(|| Duration::from_nanos(r.max_ns))
    }

    /// Returns how many durations were recorded.
    pub(crate) fn count(&self) -> u64 {
        self.lock().histogram.len()
    }

    /// Returns the `q`-quantile (0..=1); `None` when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let r = self.lock();
        let h = &r.histogram;
        (!h.is_empty()).then(|| Duration::from_nanos(h.value_at_quantile(q.clamp(0.0, 1.0))))
    }

    /// The histogram; a panic while recording leaves it usable (counts are plain numbers).
    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.histogram
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket_of_the_truth() {
        let h = Latency::new();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let p50 = h.quantile(0.5).unwrap().as_secs_f64() * 1e6;
        let p99 = h.quantile(0.99).unwrap().as_secs_f64() * 1e6;
        assert!((p50 - 500.0).abs() < 500.0 * 0.13, "p50 {p50}");
        assert!((p99 - 990.0).abs() < 990.0 * 0.13, "p99 {p99}");
        assert_eq!(h.count(), 1000);
        assert_eq!(h.max(), Some(Duration::from_micros(1000)));
        assert_eq!(Latency::new().max(), None);
    }

    #[test]
    fn durations_past_the_range_count_as_the_longest() {
        let h = Latency::new();
        h.record(Duration::from_secs(100_000));
        h.record(Duration::ZERO);
        assert_eq!(h.count(), 2);
        assert_eq!(h.max(), Some(Duration::from_secs(100_000)));
        assert!(h.quantile(1.0).unwrap() >= Duration::from_nanos(Latency::HIGHEST_NS / 2));
    }
}
