//! `hicache-index-sim`: sweeps seeds through the simulator and prints a summary.
//!
//! ```text
//! cargo run -p hicache-index-sim --release -- --seeds 0..10000 [--preset NAME] [--events N] [--jobs N]
//!     [--worlds NAME,...|none] [--verbose]
//! ```
//! `--worlds` replaces the named worlds each seed draws ([`hicache_index_sim::options::WorldKind`])
//! by the ones given (`none`: the presets alone).
//! Prints every failing seed with the options it expanded to and the command that replays it,
//! then the summary; exits 1 when any seed failed.

use std::process::ExitCode;
use std::time::Duration;

use hicache_index_sim::options::{Options, WorldKind, Worlds, DEFAULT_EVENTS};
use hicache_index_sim::sweep::{run_seeds, run_seeds_by, Summary};
use hicache_index_sim::Bug;
use hicache_index_sim::Preset;

struct Args {
    seeds: std::ops::Range<u64>,
    preset: Option<Preset>,
    events: u64,
    jobs: usize,
    verbose: bool,
    trace: bool,
    without: Vec<String>,
    planted: Option<Bug>,
    worlds: Option<Worlds>,
}

impl Args {
    fn options(&self, seed: u64) -> Options {
        let mut o = Options::for_seed_with(seed, self.preset, self.events, self.worlds);
        for class in &self.without {
            o.without(class);
        }
        o
    }
}

const USAGE: &str = "usage: hicache-index-sim --seeds A..B [--preset calm|lossy|restart-heavy|reorder-heavy|hostile|pristine] [--events N] [--jobs N] [--verbose] [--trace] [--without CLASS,...] [--planted BUG] [--worlds stale-key-list,unseen-restarts,foreign-flood,tail-loss-idle,clock-jump,segments,query-keys-down|none]";

fn parse() -> Result<Args, String> {
    let mut args = Args {
        seeds: 0..100,
        preset: None,
        events: DEFAULT_EVENTS,
        jobs: 1,
        verbose: false,
        trace: false,
        without: Vec::new(),
        planted: None,
        worlds: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--seeds" => {
                let v = value()?;
                args.seeds = match v.split_once("..") {
                    Some((a, b)) => {
                        let a = a.parse().map_err(|_| format!("bad seed range {v}"))?;
                        let b = b.parse().map_err(|_| format!("bad seed range {v}"))?;
                        a..b
                    }
                    None => {
                        let a: u64 = v.parse().map_err(|_| format!("bad seed {v}"))?;
                        a..a + 1
                    }
                };
            }
            "--preset" => {
                let v = value()?;
                args.preset =
                    Some(Preset::from_name(&v).ok_or_else(|| format!("unknown preset {v}"))?);
            }
            "--events" => {
                let v = value()?;
                args.events = v.parse().map_err(|_| format!("bad event count {v}"))?;
            }
            "--jobs" => {
                let v = value()?;
                args.jobs = v.parse().map_err(|_| format!("bad job count {v}"))?;
            }
            "--verbose" => args.verbose = true,
            "--trace" => args.trace = true,
            "--planted" => {
                let v = value()?;
                args.planted = Some(Bug::from_name(&v).ok_or_else(|| {
                    let names: Vec<&str> = Bug::ALL.iter().map(|b| b.name()).collect();
                    format!("unknown planted bug {v}; known: {}", names.join(","))
                })?);
            }
            "--without" => {
                for class in value()?.split(',') {
                    let mut probe = Options::for_seed(0, None, 1);
                    if !probe.without(class) {
                        return Err(format!(
                            "unknown fault class {class}; known: {}",
                            Options::CLASSES.join(",")
                        ));
                    }
                    args.without.push(class.to_owned());
                }
            }
            "--worlds" => {
                let v = value()?;
                args.worlds = Some(Worlds::from_names(&v).ok_or_else(|| {
                    let names: Vec<&str> = WorldKind::ALL.iter().map(|k| k.name()).collect();
                    format!("unknown world in {v}; known: {}", names.join(","))
                })?);
            }
            "--help" | "-h" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    Ok(args)
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    if args.trace {
        for seed in args.seeds.clone() {
            let options = args.options(seed);
            let report = hicache_index_sim::world::trace(&options);
            println!("{}", report.describe_failure());
        }
        return ExitCode::SUCCESS;
    }
    // Wall time only measures the sweep's speed; it never reaches the simulation.
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let reports = match args.planted {
        Some(bug) => run_seeds_by(args.seeds.clone(), args.jobs, |seed| {
            bug.run(&args.options(seed))
        }),
        None => run_seeds(args.seeds.clone(), args.jobs, |seed| args.options(seed)),
    };
    #[allow(clippy::disallowed_methods)]
    let wall: Duration = started.elapsed();
    let mut summary = Summary::default();
    for r in &reports {
        summary.add(r);
        if !r.passed() {
            println!("{}", r.describe_failure());
        } else if args.verbose {
            println!(
                "seed {} ({}, worlds {}) {}: {} events, transcript {:016x}, longest excuse {:?}",
                r.options.seed,
                r.options.preset,
                r.options.worlds,
                if r.stalled() { "expected stall" } else { "ok" },
                r.stats.events,
                r.transcript,
                r.stats.longest_excuse
            );
        }
    }
    println!(
        "sweep seeds {}..{} preset {} events {}",
        args.seeds.start,
        args.seeds.end,
        args.preset.map_or("from seed", Preset::name),
        args.events
    );
    print!("{}", summary.render(Some(wall)));
    if summary.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        let seeds: Vec<String> = reports
            .iter()
            .filter(|r| !r.passed())
            .map(|r| {
                format!(
                    "{} ({}, {})",
                    r.options.seed, r.options.preset, r.options.worlds
                )
            })
            .collect();
        println!("FAILED seeds: {}", seeds.join(", "));
        ExitCode::FAILURE
    }
}
