//! A copy of a batch delivered late across a restart, after a key list of the next run placed
//! the stream exactly where the copy's numbers continue it (twin runs number alike). Found by a
//! 3,000-seed reorder-heavy sweep (`hicache-index-sim --seeds 7400000..7403000 --preset
//! reorder-heavy`): the session applied the copy, claiming pages whose objects the restart had
//! taken (3 false hits; another tenant's pages, which verification does not sample). The
//! stream now takes a copy of a batch heard under a run it has since left for another run's
//! (R5 of `core/src/sequence.rs`); take that rule out and this seed fails.

use hicache_index_sim::{run, Options, Preset};

/// The reorder-heavy seed (20,000 events) whose session applied such a copy.
const SEED: u64 = 7_400_825;

#[test]
fn a_late_copy_of_a_batch_of_a_run_left_claims_nothing_it_stored() {
    let options = Options::for_seed(SEED, Some(Preset::ReorderHeavy), 20_000);
    let report = run(&options);
    assert!(
        report.stats.cross_restart_reorders > 0,
        "no batch came after a later run's"
    );
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}
