//! Key lists whose doubted lines no question answers: the world `query-keys-down`, where the
//! master's `POST /batch_query_keys` fails every request for a while from when it begins to serve a
//! fetch. Before that world, the simulator never ran a fetch's three questions out (12,000 hostile
//! seeds passed with the fetch's failure then taken out), so only unit tests checked it. With the
//! failure taken out (the doubted lines dropped as the fetch completes), 8 of the 400 seeds
//! 9000000..9000400 of this world fail the idle master's check: a page the master holds is a miss
//! once it is idle, its object one of the dropped lines. These two are among them.

use hicache_index_sim::options::Worlds;
use hicache_index_sim::{run, Options, Preset};

#[test]
fn a_fetch_whose_questions_all_fail_fails_and_a_later_fetch_restores_its_doubted_lines() {
    for (seed, preset) in [(9_000_011, Preset::Calm), (9_000_118, Preset::Hostile)] {
        let worlds = Worlds::from_names("query-keys-down");
        let report = run(&Options::for_seed_with(seed, Some(preset), 20_000, worlds));
        assert!(report.passed(), "{}", report.describe_failure());
        assert!(
            report.stats.fetches_unconfirmed > 0,
            "seed {seed}: no fetch ran its questions out ({} outages)",
            report.stats.query_keys_outages
        );
    }
}
