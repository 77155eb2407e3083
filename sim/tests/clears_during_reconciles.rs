//! A publisher's `cleared` that reaches the session while a reconcile waits for its status point
//! or is being applied: the hostile seeds below each put one there (the master clears within 5 ms
//! of serving a key list, [`hicache_index_sim::options::HttpOptions::clear_after_keys`]). A
//! session whose reconcile does not fall back on such a clear (the checks of
//! `Reconcile::cleared` in `core/src/session/reconcile.rs` when the stream reaches the status
//! point and at each slice taken out) claims pages the clear took, in every one of them; the
//! same 2,000 hostile seeds without that world found none. (The check at each slice alone is
//! not reached here: the simulator's indexes are small enough for a reconcile of one slice;
//! `tests/tests/store_watch.rs` puts a clear between two.)

use hicache_index_sim::{run, Options, Preset};

/// Hostile seeds (20,000 events) that failed with those checks taken out (chosen again when the
/// resync began asking the master about stores its key list lacks, which moved the runs).
const SEEDS: [u64; 4] = [900_073, 900_475, 900_821, 901_101];

#[test]
fn a_publisher_clear_while_a_reconcile_is_under_way_claims_nothing_it_took() {
    for seed in SEEDS {
        let options = Options::for_seed(seed, Some(Preset::Hostile), 20_000);
        assert!(
            options.http.clear_after_keys > 0.0,
            "seed {seed}: the master no longer clears after a key list"
        );
        let report = run(&options);
        assert!(
            report.stats.clears_while_reconciling > 0,
            "seed {seed}: no clear came while the session reconciled"
        );
        assert!(
            report.failures.is_empty(),
            "seed {seed}: {:#?}",
            report.failures
        );
    }
}
