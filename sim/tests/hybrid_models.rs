//! SGLang's hybrid pools in the simulator: every model of the hybrid catalogue is served, hit
//! and judged by the oracle with its own pools, alone and beside others.

use hicache_index_sim::models::{catalogue, hybrid_catalogue};
use hicache_index_sim::options::Worlds;
use hicache_index_sim::{run, Options, Preset};

#[test]
fn every_hybrid_model_is_hit_and_judged_in_a_calm_world() {
    let legacy = catalogue().len();
    for (i, spec) in hybrid_catalogue().iter().enumerate() {
        // No named world: this test is about the pools (a world's frequent restarts would leave
        // a short calm run no time to be hit).
        let worlds = Some(Worlds::NONE);
        let mut options = Options::for_seed_with(i as u64, Some(Preset::Calm), 3_000, worlds);
        options.master.models = vec![legacy + i];
        let report = run(&options);
        assert!(
            report.passed(),
            "{}: {}",
            spec.name,
            report.describe_failure()
        );
        let s = &report.stats;
        assert!(s.hit_pages > 0, "{}: no page was ever a hit", spec.name);
        assert!(
            s.liveness_pages > 0 || s.liveness_skipped,
            "{}: liveness judged no page",
            spec.name
        );
    }
}

#[test]
fn hybrid_models_share_a_world_with_the_others() {
    let legacy = catalogue().len();
    let all: Vec<usize> = (0..legacy + hybrid_catalogue().len()).collect();
    for (seed, preset) in [
        (1, Preset::Calm),
        (2, Preset::Lossy),
        (3, Preset::RestartHeavy),
    ] {
        let mut options = Options::for_seed(seed, Some(preset), 6_000);
        // One legacy model and every hybrid one: the logical anchor next to KV pools.
        options.master.models = std::iter::once(seed as usize % legacy)
            .chain(all[legacy..].iter().copied())
            .collect();
        let report = run(&options);
        assert!(report.passed(), "{}", report.describe_failure());
        assert!(report.stats.hit_pages > 0);
    }
}
