//! Live batches older than a resync's key list. Found by a 5,000-seed sweep (`hicache-index-sim
//! --seeds 7545000..7550000`): in seed 7546970 (lossy, a master without status counters) the
//! master's queue held about 350 ms of events when the watch of its signals asked for a key list;
//! an object was removed without an event after its `stored` had been queued, so the list lacked
//! it, and the queued `stored`, delivered while the list's doubted lines were being confirmed,
//! brought it back for good: 18 pages still hit after settling. A key a live batch stores that the
//! list lacks is asked of the master with the doubted lines, and such stores that come while it is
//! asked are asked about next (see `finish_snapshot` and `ask_again` in
//! `core/src/session/resync.rs` and `questions.rs`); without the latter, this seed fails.

use hicache_index_sim::{run, Options, Preset};

const SEED: u64 = 7_546_970;

#[test]
fn a_store_older_than_the_key_list_is_not_claimed_after_settling() {
    let options = Options::for_seed(SEED, Some(Preset::Lossy), 20_000);
    assert!(
        !options.http.watermark,
        "the master gives no status counters"
    );
    let report = run(&options);
    assert!(
        report.stats.unlisted_removed > 0,
        "no store the list lacked was found gone"
    );
    assert!(report.failures.is_empty(), "{:#?}", report.failures);
}
