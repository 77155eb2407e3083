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

/// With a reorder window, a master with status counters.
const WINDOW: Setup = Setup {
    window: true,
    ..SHIPPED
};

/// Found at depth 8 with at most two faults (2026-12-07), both with a reorder window. After a
/// forget the next fetch is asked, and the master restarts unseen before the fetch reads its
/// status: run 2's (sequence 0). The batches held for the fetch lie after that point:
/// - run 1 removes and stores page A again; the fetch reads run 2's empty key list; run 2's
///   first batch (a store of B, sequence 1, event id 1) fills the hole before run 1's two, whose
///   ids run on exactly: A was claimed, live, though run 2 never stored it;
/// - run 1 stores B, run 2 stores A, and the fetch hands run 2's key list (A) when the master
///   is idle: B was claimed (health confirming) though run 2 never stored it.
///
/// The status point is below the batch heard before the fetch was asked, so it is another
/// run's: the fetch places nothing, the held batches (of either run) go, and the index forgets
/// and fetches again (R6).
#[test]
fn an_old_runs_batches_held_for_a_fetch_that_reads_another_run_are_not_applied() {
    let (a, b) = (0, 1);
    let change = |page| Letter::Toggle {
        page,
        fate: Fate::Delivered,
    };
    let restart = Letter::Restart { same_sizes: true };
    let histories: [&[Letter]; 2] = [
        &[
            change(a),
            Letter::Answer,
            Letter::Tick,
            change(a),
            change(a),
            restart,
            Letter::Answer,
            change(b),
        ],
        &[
            change(a),
            Letter::Answer,
            Letter::Tick,
            change(b),
            restart,
            Letter::ReadStatus,
            change(a),
            Letter::Tick,
        ],
    ];
    for history in histories {
        let mut world = replay(WINDOW, history, true);
        let ending = world.play(Letter::Idle);
        assert!(
            world.problem().is_none() && ending == Some(Ending::Live),
            "{history:?}\n{}",
            world.trace()
        );
    }
}

/// Found at depth 8 with at most two faults (2026-12-07), with a reorder window: a false hit,
/// live. Run 1's batch storing B is delayed past the window; the master restarts unseen; run 2's
/// status places the stream at sequence 0 (after a status check forgets and fetches again).
/// The late batch (sequence 2, event id 2) arrives before run 2's first, is held for the hole at
/// 1, and run 2's first batch fills it with event ids that run on: B was claimed, though run 2
/// never stored it. The window cannot tell a late batch of the run it left from a reordered one
/// of the run it follows; the master can. A batch applied after one that arrived after it is
/// asked about (R7): the master lacks B, and the index forgets before any query claims it.
#[test]
fn a_late_batch_of_a_run_left_is_not_applied_after_the_next_runs_point() {
    let (a, b) = (0, 1);
    let history = [
        Letter::Toggle {
            page: a,
            fate: Fate::Delivered,
        },
        Letter::Toggle {
            page: b,
            fate: Fate::Delayed,
        },
        Letter::Restart { same_sizes: true },
        Letter::Answer,
        Letter::Tick,
        Letter::Answer,
        Letter::Release,
        Letter::Toggle {
            page: a,
            fate: Fate::Delivered,
        },
    ];
    let mut world = replay(WINDOW, &history, true);
    let ending = world.play(Letter::Idle);
    assert!(
        world.problem().is_none() && ending == Some(Ending::Live),
        "{history:?}\n{}",
        world.trace()
    );
}
