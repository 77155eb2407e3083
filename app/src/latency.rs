//! A lock-free latency histogram: fine log-linear buckets for quantiles (the demo's p50/p99)
//! and the cumulative buckets of a Prometheus histogram (`/metrics`).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: bucket widths are 1/8 of their lower edge (12.5 %).
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Fine buckets: values up to 2^40 ns (about 18 minutes); larger ones land in the last.
const FINE: usize = (40 - SUB_BITS as usize + 1) * SUB;

/// The upper bounds of the Prometheus buckets, in seconds.
const BOUNDS: [f64; 16] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 1e-1,
    1.0, 10.0,
];

/// Records durations from any thread without locks.
#[derive(Debug)]
pub(crate) struct Latency {
    fine: Box<[AtomicU64]>,
    bounds: [AtomicU64; BOUNDS.len()],
    count: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl Latency {
    /// Makes an empty histogram.
    pub(crate) fn new() -> Latency {
        Latency {
            fine: (0..FINE).map(|_| AtomicU64::new(0)).collect(),
            bounds: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
        }
    }

    /// Records one duration.
    pub(crate) fn record(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.fine[fine_index(ns)].fetch_add(1, Ordering::Relaxed);
        let secs = d.as_secs_f64();
        if let Some(i) = BOUNDS.iter().position(|&b| secs <= b) {
            self.bounds[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.max_ns.fetch_max(ns, Ordering::Relaxed);
    }

    /// Returns the longest duration recorded; `None` when empty.
    pub(crate) fn max(&self) -> Option<Duration> {
        (self.count() > 0).then(|| Duration::from_nanos(self.max_ns.load(Ordering::Relaxed)))
    }

    /// Returns how many durations were recorded.
    pub(crate) fn count(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Returns the `q`-quantile (0..=1), interpolated within its bucket; `None` when empty.
    pub(crate) fn quantile(&self, q: f64) -> Option<Duration> {
        let counts: Vec<u64> = self
            .fine
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * total as f64).max(1.0);
        let mut seen = 0u64;
        for (i, &c) in counts.iter().enumerate() {
            if c == 0 {
                continue;
            }
            if (seen + c) as f64 >= rank {
                let (low, high) = fine_bounds(i);
                let within = (rank - seen as f64) / c as f64;
                let ns = low as f64 + (high - low) as f64 * within;
                return Some(Duration::from_nanos(ns as u64));
            }
            seen += c;
        }
        None
    }

    /// Appends the histogram in the Prometheus text format, named `name`, with `labels` (e.g.
    /// `transport="http"`; empty for none) on every sample.
    pub(crate) fn write_prometheus(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0u64;
        for (bound, count) in BOUNDS.iter().zip(&self.bounds) {
            cumulative += count.load(Ordering::Relaxed);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {cumulative}"
            );
        }
        let count = self.count.load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {count}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {sum}", braces(labels));
        let _ = writeln!(out, "{name}_count{} {count}", braces(labels));
    }
}

/// The fine bucket of `ns`: exact below 8 ns, then 8 buckets per power of two.
fn fine_index(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let exp = 63 - ns.leading_zeros();
    let sub = ((ns >> (exp - SUB_BITS)) as usize) & (SUB - 1);
    let index = (exp - SUB_BITS + 1) as usize * SUB + sub;
    index.min(FINE - 1)
}

/// The lower and upper edges of fine bucket `i`, in nanoseconds.
fn fine_bounds(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64 + 1);
    }
    let exp = (i / SUB) as u32 + SUB_BITS - 1;
    let sub = (i % SUB) as u64;
    let width = 1u64 << (exp - SUB_BITS);
    let low = (1u64 << exp) + sub * width;
    (low, low + width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_the_bucket_whose_edges_hold_it() {
        for ns in (0..5000u64).chain([1 << 20, (1 << 20) + 12345, 987_654_321]) {
            let (low, high) = fine_bounds(fine_index(ns));
            assert!(low <= ns && ns < high, "{ns} in [{low}, {high})");
        }
    }

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
    fn prometheus_buckets_are_cumulative_and_end_with_the_count() {
        let h = Latency::new();
        h.record(Duration::from_nanos(500));
        h.record(Duration::from_micros(30));
        h.record(Duration::from_secs(100));
        let mut out = String::new();
        h.write_prometheus(&mut out, "q", "transport=\"http\"");
        assert!(
            out.contains("q_bucket{transport=\"http\",le=\"0.000001\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("q_bucket{transport=\"http\",le=\"0.00005\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("q_bucket{transport=\"http\",le=\"10\"} 2"),
            "{out}"
        );
        assert!(
            out.contains("q_bucket{transport=\"http\",le=\"+Inf\"} 3"),
            "{out}"
        );
        assert!(out.contains("q_count{transport=\"http\"} 3"), "{out}");
    }
}
