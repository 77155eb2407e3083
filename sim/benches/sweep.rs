//! Row 5: simulated events per second, on one thread and on every core: the same seeds (mixed
//! presets, 20,000 events each, every check on) swept by [`run_seeds`] with one job, then with
//! one job per core. Writes `<target>/perf/sim.json`.
//!
//! ```text
//! cargo bench -p hicache-index-sim --bench sweep [-- sim/1_thread|sim/all_threads]
//! ```
//! `cargo bench -- --test` sweeps a few short seeds once and checks they pass, without writing
//! figures. Figures are written only when both parts ran.

use hicache_index_bench::perf::{self, BenchArgs};
use hicache_index_sim::options::DEFAULT_EVENTS;
use hicache_index_sim::sweep::{run_seeds, Summary};
use hicache_index_sim::Options;

/// One sweep's figures.
struct Rate {
    jobs: usize,
    events: u64,
    seconds: f64,
}

impl Rate {
    fn events_per_second(&self) -> f64 {
        self.events as f64 / self.seconds
    }

    fn json(&self) -> String {
        format!(
            "{{\"jobs\":{},\"events\":{},\"seconds\":{},\"events_per_second\":{}}}",
            self.jobs,
            self.events,
            self.seconds,
            self.events_per_second()
        )
    }
}

/// Sweeps `seeds` on `jobs` threads; panics when a seed fails (the rate of a broken run means
/// nothing).
fn sweep(seeds: std::ops::Range<u64>, events: u64, jobs: usize) -> Rate {
    // Wall time only measures the sweep's speed; it never reaches the simulation.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let reports = run_seeds(seeds.clone(), jobs, |seed| {
        Options::for_seed(seed, None, events)
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut summary = Summary::default();
    for r in &reports {
        summary.add(r);
        assert!(r.passed(), "{}", r.describe_failure());
    }
    let rate = Rate {
        jobs,
        events: summary.events,
        seconds,
    };
    println!(
        "sim: seeds {}..{} ({events} events each) on {jobs} thread(s): {} events in {:.2} s = {:.0} simulated events/s",
        seeds.start,
        seeds.end,
        rate.events,
        rate.seconds,
        rate.events_per_second()
    );
    rate
}

fn main() {
    let args = BenchArgs::from_env();
    let (seeds, events) = if args.quick {
        (0..4, 2_000)
    } else {
        (0..500, DEFAULT_EVENTS)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let one = args
        .is_selected("sim/1_thread")
        .then(|| sweep(seeds.clone(), events, 1));
    let all = args
        .is_selected("sim/all_threads")
        .then(|| sweep(seeds.clone(), events, cores));
    if let (false, Some(one), Some(all)) = (args.quick, one, all) {
        perf::write_result(
            "sim.json",
            &format!(
                "{{\"seeds\":{},\"events_per_seed\":{events},\"one_thread\":{},\"all_threads\":{}}}\n",
                seeds.end - seeds.start,
                one.json(),
                all.json()
            ),
        );
    }
}
