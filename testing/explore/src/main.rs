//! `hicache-index-explore`: runs the exhaustive checker and prints what it found.
//!
//! ```text
//! hicache-index-explore [--depth N] [--jobs N] [--window on|off|both] [--status on|off|both]
//!                       [--runs N] [--faults N]
//! ```
//! The exit status is 1 when any history failed.

use hicache_index_explore::{explore, Options, Setup, Summary};

fn main() {
    let mut depth = 8;
    let mut jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut windows = vec![false, true];
    let mut statuses = vec![true, false];
    let mut runs = 2;
    let mut faults = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage(&arg));
        match arg.as_str() {
            "--depth" => depth = value().parse().unwrap_or_else(|_| usage("--depth")),
            "--jobs" => jobs = value().parse().unwrap_or_else(|_| usage("--jobs")),
            "--runs" => runs = value().parse().unwrap_or_else(|_| usage("--runs")),
            "--faults" => faults = Some(value().parse().unwrap_or_else(|_| usage("--faults"))),
            "--window" => windows = switch(&value()),
            "--status" => statuses = switch(&value()),
            _ => usage(&arg),
        }
    }
    let mut failed = false;
    for &window in &windows {
        for &status in &statuses {
            let options = Options {
                setup: Setup {
                    window,
                    status,
                    max_runs: runs,
                    max_faults: faults,
                },
                depth,
                jobs,
                audits: 200,
            };
            #[allow(clippy::disallowed_methods)]
            let started = std::time::Instant::now();
            let summary = explore(options);
            print(&summary, started.elapsed());
            failed |= summary.failed() > 0 || summary.unsound.is_some();
        }
    }
    std::process::exit(i32::from(failed));
}

fn switch(value: &str) -> Vec<bool> {
    match value {
        "on" => vec![true],
        "off" => vec![false],
        "both" => vec![false, true],
        _ => usage(value),
    }
}

fn usage(what: &str) -> ! {
    eprintln!(
        "unexpected {what}\nusage: hicache-index-explore [--depth N] [--jobs N] [--window on|off|both] [--status on|off|both] [--runs N] [--faults N]"
    );
    std::process::exit(2)
}

fn print(summary: &Summary, took: std::time::Duration) {
    print!("{}", hicache_index_explore::explore::render(summary, took));
}
