//! Histories found by the review of the baseline-after-loss rule (issue 13): each ends in a
//! false hit through the real `Session` and asserts the miss the rule above all demands.
//!
//! Both rest on one fact of the master model: under light load every batch of a run has the
//! same number of events (one object, one medium: one event a batch), so two runs of the master
//! number their batches and events alike, and an old run's batch `n + 1` runs on, event id for
//! event id, from the new run's batch `n`. What tells them apart is the stamp: one run's batches
//! are stamped in order (one publisher thread stamps each batch as it sends it), so a batch
//! stamped before the newest batch applied is not the next batch of the stream.

use hicache_index_tests::{
    config, filler, mha, old_batch_released_after_the_new_run, page_hashes, reorder, store_page,
    tokens, Harness,
};

#[test]
fn an_old_runs_late_batch_whose_event_ids_run_on_is_not_applied_after_a_restart() {
    let layout = mha(1);
    let mut h = Harness::connected(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Old master: seq 1 and 2 (event ids 1-4); its seq 3 stores page A (ids 5-6) and is
    // delayed on its connection.
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    let old_3 = h.frames(3, store_page(&layout, &page));
    // It restarts (the new master lost A); the new run's seq 1 goes back: a restart, seen.
    h.advance(200);
    h.set_next_event_id(1);
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    assert_eq!(h.prefix(&t), 0);
    // The old run's seq 3 arrives now: seq 2 + 1, first id 4 + 1, stamped 200 ms before the
    // stream's newest batch.
    let _ = h.feed_frames(&old_3);
    assert_eq!(
        h.prefix(&t),
        0,
        "page A is not at the master (the new run never stored it): {:?}",
        h.log
    );
}

#[test]
fn an_old_runs_held_batch_whose_event_ids_run_on_is_not_released_after_the_new_run() {
    // No restart is seen. Old run: seq 1 and 2 (ids 1-4); seq 3-8 lost after publishing (ids
    // 5-19); seq 9 stores page A (ids 20-21) and is held behind the hole. The new run's seq 1-3
    // are lost (ids 1-6); its seq 4-8 (ids 7-19) are held too. When the window gives up, the
    // new run's seq 4 is the baseline (its first id 7 runs past the 4 applied), 5-8 run on, and
    // the old seq 9 (first id 20 = 19 + 1, stamped before seq 4-8) must not.
    old_batch_released_after_the_new_run(7, &[3, 3, 3, 2, 2]);
}
