//! Histories the exhaustive checker found, each played through the real session and judged
//! as the checker judges it: kept as tests so that they stay answered.

use hicache_index_explore::explore::replay;
use hicache_index_explore::world::Ending;
use hicache_index_explore::{Fate, Letter, Setup};

/// The shipped setup: no reorder window, a master with status counters.
const SHIPPED: Setup = Setup {
    window: false,
    status: true,
    max_runs: 2,
    max_faults: None,
};

/// Found at depth 7 over the whole alphabet (2026-12-06): the key list run 1 answered, read
/// before a restart the transport did not see, is handed after run 2's first batch, which
/// continues run 1's status point exactly (run 2's batches of run 1's sizes or not; its
/// removal of B delayed, or a status of run 2 read on the way). The session cannot tell that
/// list from run 2's (the one class no stream can tell): the claim of page A is stale, a
/// verification round must end it within the bound, and the idle master finds the index live
/// and exact. Each failed as a false hit before the oracle excused a claim made when an older
/// run's key list is handed.
#[test]
fn an_old_runs_key_list_handed_after_an_unseen_restart_is_stale_only_until_verified() {
    let (a, b) = (0, 1);
    let store = |page, fate| Letter::Toggle { page, fate };
    for same_sizes in [true, false] {
        for tail in [
            [store(b, Fate::Delayed), Letter::Deliver],
            [Letter::Deliver, Letter::Tick],
        ] {
            let mut history = vec![
                Letter::ReadStatus,
                store(a, Fate::Dropped),
                Letter::ReadKeys,
                Letter::Restart { same_sizes },
                store(b, Fate::Delivered),
            ];
            history.extend(tail);
            let mut world = replay(SHIPPED, &history, true);
            let ending = world.play(Letter::Idle);
            assert!(
                world.problem().is_none() && ending == Some(Ending::Live),
                "{history:?}\n{}",
                world.trace()
            );
            assert!(world.saw_excused_claim(), "{history:?}\n{}", world.trace());
        }
    }
}
