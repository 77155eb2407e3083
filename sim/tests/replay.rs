//! Replays one seed, as a failing sweep prints it:
//! `SIM_SEED=n [SIM_PRESET=name] [SIM_EVENTS=n] [SIM_WORLDS=name,...|none] [SIM_TRACE=1] cargo
//! test -p hicache-index-sim --test replay -- --nocapture`.
//!
//! Without `SIM_SEED` it replays a fixed seed, so the test always runs something.

use hicache_index::Session;
use hicache_index_sim::options::{Worlds, DEFAULT_EVENTS};
use hicache_index_sim::{Options, Preset, World};

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[test]
fn replay_seed_from_env() {
    let seed = env("SIM_SEED").map_or(7, |s| s.parse().expect("SIM_SEED is a number"));
    let preset = env("SIM_PRESET").map(|p| Preset::from_name(&p).expect("a preset name"));
    let events = env("SIM_EVENTS").map_or(DEFAULT_EVENTS / 4, |s| {
        s.parse().expect("SIM_EVENTS is a number")
    });
    let worlds = env("SIM_WORLDS").map(|w| Worlds::from_names(&w).expect("world names"));
    let options = Options::for_seed_with(seed, preset, events, worlds);
    let session = Session::new(options.session_config()).expect("a valid config");
    let mut world = World::new(options.clone(), session);
    world.set_trace(env("SIM_TRACE").is_some());
    let report = world.run();
    println!(
        "seed {} ({}, worlds {}): {} events, transcript {:016x}, expected stall {}",
        seed,
        report.options.preset,
        report.options.worlds,
        report.stats.events,
        report.transcript,
        report.stalled()
    );
    assert!(report.passed(), "{}", report.describe_failure());
}
