//! The exhaustive checker as tests: every history of `EXPLORE_DEPTH` letters (4 unless set;
//! CI runs 6 in release mode, see `.ci/run`) over the whole alphabet, in each of the four
//! worlds (reorder window off, the shipped setup, and on; a master with status counters and
//! one without); and, in each world, every history of `EXPLORE_DEEP_DEPTH` letters (5 unless
//! set; CI runs 8) holding at most one fault of the master or the network (with a window, such
//! a history of 8 letters once claimed a page another run never stored: see
//! `tests/histories.rs`). Each prints what it explored; any failure class fails the test, with
//! a shortest history of each in the output.

use hicache_index_explore::{explore, explore::render, Options, Setup};

fn depth(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(default)
}

fn check(window: bool, status: bool) {
    check_bounded(window, status, None, depth("EXPLORE_DEPTH", 4));
}

/// Every history of `depth` letters in a world, holding at most `max_faults` faults.
fn check_bounded(window: bool, status: bool, max_faults: Option<u8>, depth: usize) {
    let options = Options {
        setup: Setup {
            window,
            status,
            max_runs: 2,
            max_faults,
        },
        depth,
        // Every core: CI runs the worlds one after another (`--test-threads=1`), each on every
        // core, which keeps both cores busy to the end (side by side, one world a core, the
        // last world ran alone for minutes).
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
        audits: 200,
    };
    #[allow(clippy::disallowed_methods)]
    let started = std::time::Instant::now();
    let summary = explore(options);
    let report = render(&summary, started.elapsed());
    println!("{report}");
    assert!(summary.audited > 0, "no merge was audited");
    assert!(
        summary.unsound.is_none(),
        "two histories merged into one state behaved differently (see above)"
    );
    assert_eq!(
        summary.failed(),
        0,
        "histories break a rule: a shortest one of each way is printed above"
    );
}

#[test]
fn every_history_holds_without_a_reorder_window() {
    check(false, true);
}

#[test]
fn every_history_holds_with_a_reorder_window() {
    check(true, true);
}

#[test]
fn every_history_holds_without_a_window_against_a_master_without_status_counters() {
    check(false, false);
}

#[test]
fn every_history_holds_with_a_window_against_a_master_without_status_counters() {
    check(true, false);
}

#[test]
fn every_longer_history_with_one_fault_holds_without_a_reorder_window() {
    check_bounded(false, true, Some(1), depth("EXPLORE_DEEP_DEPTH", 5));
}

#[test]
fn every_longer_history_with_one_fault_holds_against_a_master_without_status_counters() {
    check_bounded(false, false, Some(1), depth("EXPLORE_DEEP_DEPTH", 5));
}

#[test]
fn every_longer_history_with_one_fault_holds_with_a_reorder_window() {
    check_bounded(true, true, Some(1), depth("EXPLORE_DEEP_DEPTH", 5));
}

#[test]
fn every_longer_history_with_one_fault_holds_with_a_window_and_no_status_counters() {
    check_bounded(true, false, Some(1), depth("EXPLORE_DEEP_DEPTH", 5));
}
