//! Histories found by the review of the baseline-after-loss rule (issue 13), through the real
//! `Session`.
//!
//! Both rest on one fact of the master model: under light load every batch of a run has the
//! same number of events (one object, one medium: one event a batch), so two runs of the master
//! number their batches and events alike, and an old run's batch `n + 1` runs on, event id for
//! event id, from the new run's batch `n`. The old design told them apart by the publisher's
//! stamp; no safety rule may rest on a publisher's clock (issue 26), so when such a batch
//! continues the position exactly it is rule R10's class (bounded by verification, asserted
//! here), and when it does not, it never applies.

use std::time::Duration;

use hicache_index::{Command, Config, Effect, VerifyConfig};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{
    config, filler, mha, old_batch_released_after_the_new_run, page_hashes, reorder, store_page,
    tokens, Harness,
};

#[test]
fn an_old_runs_late_batch_whose_event_ids_run_on_after_a_restart_is_caught_by_the_point_check() {
    let layout = mha(1);
    let cfg = Config {
        verify: Some(VerifyConfig {
            interval: Duration::from_secs(1),
            ..VerifyConfig::default()
        }),
        ..reorder(config(layout.clone()), 8)
    };
    let mut h = Harness::placed(cfg);
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Old master: seq 1 and 2 (event ids 1-4); its seq 3 stores page A (ids 5-6) and is
    // delayed on its connection.
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    let old_3 = h.frames(3, store_page(&layout, &page));
    // It restarts (the new master lost A); the new run's seq 1 goes back: another run (R5),
    // forget; the master's status places the new run's stream at its seq 2.
    h.advance(200);
    h.set_next_event_id(1);
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    let _ = h.answer_fetch(2, &[]);
    assert_eq!(h.prefix(&t), 0);
    // The old run's seq 3 arrives now: seq 2 + 1, first id 4 + 1. It continues the position
    // exactly (R10): no stream rule can tell it from the new run's seq 3. But the point was
    // proven after a batch before it (the new run's seq 2, held for it): the point check (R3)
    // asks the master for what the index claims before queries trust it.
    let fx = h.feed_frames(&old_3);
    assert_eq!(h.prefix(&t), 0, "queries miss while the master is asked");
    let (request, keys) = fx
        .iter()
        .find_map(|e| match e {
            Effect::Command(Command::VerifyKeys { request, keys }) => {
                Some((*request, keys.clone()))
            }
            _ => None,
        })
        .expect("a point check");
    // The new master never stored A: absent, so the key list and the stream disagree: forget.
    let fx =
        h.session
            .handle_verify_result(h.now, request, keys.iter().map(|k| (k.as_str(), false)));
    assert_eq!(
        hicache_index_tests::cleared(&fx),
        [hicache_index::ClearReason::Restart]
    );
    assert_eq!(h.prefix(&t), 0, "page A is not at the master");
}

#[test]
fn an_old_runs_late_batch_that_does_not_run_on_after_a_restart_never_applies() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let _ = h.batch_at(1, filler(2));
    let _ = h.batch_at(2, filler(2));
    let old_3 = h.frames(3, store_page(&layout, &page));
    // The new run's batches have other sizes: its seq 2 ends at id 3, not 4.
    h.advance(200);
    h.set_next_event_id(1);
    let _ = h.batch_at(1, filler(1));
    let _ = h.batch_at(2, filler(2));
    let _ = h.answer_fetch(2, &[]);
    let fx = h.feed_frames(&old_3);
    assert_eq!(
        hicache_index_tests::cleared(&fx),
        [hicache_index::ClearReason::Restart]
    );
    assert_eq!(h.prefix(&t), 0, "page A is not at the master: {:?}", h.log);
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
