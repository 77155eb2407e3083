//! Input histories that ended in a false hit before issue 13, each through the real `Session`:
//! every test asserts the miss that the rule above all demands ("never claim a page that is not
//! there"). Each one failed on the core before the fix.

use std::time::Duration;

use hicache_index::sequence::Skip;
use hicache_index::{
    ClearReason, Command, Config, Effect, EventKind, Health, Input, Report, Seq, SnapshotRequest,
    VerifyConfig, Watermark,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_sim::encode::OwnedEvent;
use hicache_index_tests::{
    cleared, config, filler, mha, old_batch_released_after_the_new_run, page_hashes, removed,
    reorder, resync, store_page, tokens, Harness,
};

fn fetch_request(fx: &[Effect]) -> Option<SnapshotRequest> {
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
        _ => None,
    })
}

#[test]
fn restart_whose_next_sequence_runs_on_is_not_a_continuation() {
    let layout = mha(1);
    let mut h = Harness::connected(config(layout.clone()));
    let t = tokens(1);
    // Old master: seq 1, event ids 1-2, stores page A.
    let _ = h.batch_at(1, store_page(&layout, &page_hashes(&layout, &t)[0]));
    assert_eq!(h.prefix(&t), 1);
    // It restarts unseen; the new master's seq 1 (64 events, ids 1-64) is lost; its seq 2
    // starts at event id 65, not 3.
    h.advance(200);
    h.set_next_event_id(65);
    let fx = h.batch_at(2, filler(1));
    assert_eq!(cleared(&fx), vec![ClearReason::Restart], "{fx:?}");
    assert_eq!(h.prefix(&t), 0, "the old master's page is gone");
}

#[test]
fn held_batches_of_two_runs_never_apply_as_one_stream() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(2);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch_at(1, store_page(&layout, &pages[0]));
    // Old master's seq 3 (after a hole at 2) stores page B and is held.
    h.set_next_event_id(5);
    let _ = h.batch_at(3, store_page(&layout, &pages[1]));
    // The master restarts; the new one's seq 1-3 are lost; its seq 4 and 5 are held behind.
    h.advance(100);
    h.set_next_event_id(200);
    let _ = h.batch_at(4, filler(1));
    let _ = h.batch_at(5, filler(1));
    assert_eq!(h.status().counters.held_batches, 3);
    // The window gives up on the hole (R7): what it held is dropped, never applied as one
    // stream; the key list of the fetch it asks holds what the live run did (R6).
    h.advance(100);
    let fx = h.fire_timeout().expect("the deadline fires");
    assert_eq!(cleared(&fx), [ClearReason::Gap], "{fx:?}");
    assert_eq!(h.status().counters.held_batches, 0);
    let b = hicache_index::Lookup::page_hashes(&pages[1..]);
    assert_eq!(h.session.query(&b).unwrap().prefix_pages, 0, "B is gone");
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn a_late_copy_of_an_old_batch_after_a_clear_never_becomes_the_baseline() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let store = h.frames(1, store_page(&layout, &page));
    let _ = h.feed_frames(&store);
    assert_eq!(h.prefix(&t), 1);
    h.next_seq = 2;
    let keys: Vec<String> = layout.object_keys(&page).collect();
    let _ = h.batch_at(2, vec![removed(keys[0].clone())]);
    assert_eq!(h.prefix(&t), 0);
    for reconnect in [false, true] {
        if reconnect {
            let _ = h.session.handle_disconnected(h.now);
            let _ = h.session.handle_connected(h.now);
        } else {
            let _ = h.session.clear(h.now);
        }
        // The network delivers a late copy of batch 1 (R2).
        let fx = h.feed_frames(&store);
        assert!(
            fx.iter().any(|e| matches!(
                e,
                Effect::Report(Report::Skipped {
                    why: Skip::Copy,
                    ..
                })
            )),
            "{fx:?}"
        );
        // The master's status places the stream after batch 2: batch 1 is no part of it.
        let _ = h.answer_fetch(2, &[]);
        assert_eq!(h.prefix(&t), 0, "the removal of batch 2 still holds");
        let fx = h.feed_frames(&store);
        assert!(
            fx.iter()
                .any(|e| matches!(e, Effect::Report(Report::Skipped { .. }))),
            "{fx:?}"
        );
        assert_eq!(h.prefix(&t), 0);
    }
}

#[test]
fn a_batch_whose_place_was_passed_is_never_applied_with_reordering() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let keys: Vec<String> = layout.object_keys(&page).collect();
    // Batch 1 is delayed; batches 2 (stores A) and 3 (removes it) are held behind it.
    let late = h.frames(1, filler(1));
    let _ = h.batch_at(2, store_page(&layout, &page));
    let _ = h.batch_at(3, vec![removed(keys[0].clone())]);
    // The window gives up: 2 and 3 are dropped (the next key list holds them, R6).
    h.advance(100);
    let _ = h.fire_timeout().expect("the window's deadline");
    let _ = h.answer_fetch(3, &[]);
    assert_eq!(h.prefix(&t), 0);
    // Batch 1 arrives after its place was passed (R7): before the status point, in the key
    // list (R3): never applied, and queries miss until the stream continues the point.
    let fx = h.feed_frames(&late);
    assert!(
        fx.contains(&Effect::Report(Report::Skipped {
            seq: Seq(1),
            why: Skip::BeforePoint
        })),
        "{fx:?}"
    );
    assert_eq!(h.health(), Health::Recovering);
    assert_eq!(h.status().last_applied_seq, None);
    let _ = h.batch_at(4, filler(1));
    assert_eq!(h.status().last_applied_seq, Some(Seq(4)));
    assert_eq!(h.health(), Health::Live);
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn snapshot_lines_that_are_not_exactly_keys_never_become_keys() {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    let request = fetch_request(&h.log).expect("a bootstrap fetch");
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let keys: Vec<String> = layout.object_keys(&page).collect();
    // The master holds "<A>_0_k " and "junk\n<A>_0_v": neither real key exists.
    let body = format!("{} \njunk\n{}\n", keys[0], keys[1]);
    let fx = h.session.handle_snapshot(
        h.now,
        request,
        Some(Seq(0).into()),
        hicache_index::snapshot_lines(body.as_bytes()),
    );
    // The lines next to the odd one are asked about: "<A>_0_k " verbatim, and "<A>_0_v".
    let (confirm, asked) = fx
        .iter()
        .find_map(|e| match e {
            Effect::Command(Command::VerifyKeys { request, keys }) => {
                Some((*request, keys.clone()))
            }
            _ => None,
        })
        .expect("the doubted lines are confirmed first");
    assert_eq!(asked, [format!("{} ", keys[0]), keys[1].clone()]);
    assert_eq!(h.prefix(&t), 0);
    // The master holds neither key as such.
    let results: Vec<(&str, bool)> = asked.iter().map(|k| (k.as_str(), false)).collect();
    let fx = h.session.handle(
        h.now,
        Input::VerifyResult {
            request: confirm,
            results: &results,
        },
    );
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Report(Report::Resynced { confirmed: 0, .. }))),
        "{fx:?}"
    );
    assert_eq!(h.prefix(&t), 0);
    let c = h.status().counters;
    assert_eq!((c.snapshot_odd_lines, c.snapshot_doubted_lines), (1, 2));
}

#[test]
fn an_unknown_event_without_a_key_forgets_everything() {
    let layout = mha(1);
    let mut h = Harness::connected(config(layout.clone()));
    let t = tokens(1);
    let _ = h.batch(store_page(&layout, &page_hashes(&layout, &t)[0]));
    assert_eq!(h.prefix(&t), 1);
    // An event type this decoder does not know (a future tenant-wide removal, say), no key.
    let mut e = OwnedEvent::new(EventKind::Unknown, "");
    e.object_key = None;
    let fx = h.batch(vec![e]);
    assert_eq!(cleared(&fx), vec![ClearReason::UnreadableRemoval], "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn restart_between_the_snapshot_and_the_first_batch_is_noticed() {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    let request = fetch_request(&h.log).expect("a bootstrap fetch");
    let t = tokens(1);
    let keys: Vec<String> = layout.object_keys(&page_hashes(&layout, &t)[0]).collect();
    // An idle master: its stream stood at seq 5, event id 10; page A is in its key list.
    let at = Watermark {
        seq: Seq(5),
        events: Some(10),
    };
    let _ = h
        .session
        .handle_snapshot(h.now, request, Some(at), keys.iter().map(String::as_str));
    assert_eq!((h.health(), h.prefix(&t)), (Health::Live, 1));
    // It restarts unseen; the new master's first batch is seq 1, event id 1.
    h.advance(100);
    h.set_next_event_id(1);
    let fx = h.batch_at(1, filler(1));
    assert_eq!(
        h.prefix(&t),
        0,
        "the snapshot may be of the old master: {fx:?}"
    );
    assert_eq!(h.health(), Health::Recovering);
}

#[test]
fn an_idle_restarted_master_does_not_keep_the_session_refetching() {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    let boot = fetch_request(&h.log).expect("a bootstrap fetch");
    let _ = h
        .session
        .handle_snapshot(h.now, boot, Some(Seq(0).into()), [""; 0]);
    // The stream began with the old master at seq 40, past the snapshot's anchor: a fetch.
    let gap = fetch_request(&h.batch_at(40, filler(1))).expect("a resync after the gap");
    for _ in 0..10 {
        let _ = h.batch(filler(1));
    }
    // The master restarts unseen and stays idle; the index forgets (an unreadable removal of
    // the old master's) and fetches again once the fetch under way comes back (one at a
    // time): the new master's counters are back at 0.
    let mut unreadable = removed("x");
    unreadable.object_key = None;
    let fx = h.batch(vec![unreadable]);
    assert_eq!(fetch_request(&fx), None, "one fetch at a time: {fx:?}");
    let fx = h.session.handle_snapshot(
        h.now,
        gap,
        Some(Watermark {
            seq: Seq(0),
            events: Some(0),
        }),
        [""; 0],
    );
    let again = fetch_request(&fx).expect("a resync");
    let fx = h.session.handle_snapshot(
        h.now,
        again,
        Some(Watermark {
            seq: Seq(0),
            events: Some(0),
        }),
        [""; 0],
    );
    let mut fetches = 0;
    let mut fx = fx;
    for _ in 0..5 {
        match fetch_request(&fx) {
            Some(r) => {
                fetches += 1;
                fx = h.session.handle_snapshot(
                    h.now,
                    r,
                    Some(Watermark {
                        seq: Seq(0),
                        events: Some(0),
                    }),
                    [""; 0],
                );
            }
            None => break,
        }
    }
    assert!(fetches <= 1, "fetched {fetches} more times");
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_status_point_below_the_batch_heard_before_the_fetch_is_reported_as_another_runs() {
    // Rule R6: the status was read after batch 2 was heard, yet numbers fewer batches: another
    // run's (a restart nobody saw). With a batch held for it, the fetch places nothing, and the
    // session says why (not only that it cleared).
    let layout = mha(1);
    let mut h = Harness::placed(resync(config(layout.clone())));
    let _ = h.batch_at(1, filler(1));
    let mut unreadable = removed("x");
    unreadable.object_key = None;
    let fx = h.batch_at(2, vec![unreadable]);
    assert_eq!(cleared(&fx), [ClearReason::UnreadableRemoval], "{fx:?}");
    let fetch = fetch_request(&fx).expect("a resync");
    let fx = h.batch_at(3, filler(1));
    assert!(cleared(&fx).is_empty(), "held for the fetch: {fx:?}");
    let fx = h.session.handle_snapshot(
        h.now,
        fetch,
        Some(Watermark {
            seq: Seq(0),
            events: Some(0),
        }),
        [""; 0],
    );
    let fx = h.record(fx);
    assert!(
        fx.contains(&Effect::Report(Report::StatusDisagreed {
            position: Some(Seq(2)),
            status: Seq(0),
            ahead: false,
        })),
        "{fx:?}"
    );
    assert_eq!(cleared(&fx), [ClearReason::Restart], "{fx:?}");
    assert!(
        fetch_request(&fx).is_some(),
        "the fetch is asked again: {fx:?}"
    );
    assert_eq!(h.status().counters.status_disagreed, 1);
}

#[test]
fn a_restart_that_mirrors_the_old_stream_is_bounded_by_verification() {
    // The one class no signal can close: a restart nobody saw whose first delivered batch runs
    // on in both sequence and event id. Verification bounds how long its pages stay claimed.
    let layout = mha(1);
    let cfg = Config {
        verify: Some(VerifyConfig {
            interval: Duration::from_secs(1),
            ..VerifyConfig::default()
        }),
        ..config(layout.clone())
    };
    let mut h = Harness::connected(cfg);
    let t = tokens(1);
    let _ = h.batch_at(1, store_page(&layout, &page_hashes(&layout, &t)[0]));
    // The new master's seq 1 (two events) is lost; its seq 2 starts at id 3: a perfect mirror.
    let _ = h.batch_at(2, filler(1));
    assert_eq!(h.prefix(&t), 1, "indistinguishable from a continuation");
    let fx = h
        .fire_timeout()
        .expect("a verification round within the interval");
    let (request, keys) = fx
        .iter()
        .find_map(|e| match e {
            Effect::Command(Command::VerifyKeys { request, keys }) => {
                Some((*request, keys.clone()))
            }
            _ => None,
        })
        .expect("a verification round");
    let _ =
        h.session
            .handle_verify_result(h.now, request, keys.iter().map(|k| (k.as_str(), false)));
    assert_eq!(h.prefix(&t), 0, "gone within one verification interval");
}

// The history of simulator seed 115267 (restart-heavy, driver stalls): see
// `hicache_index_tests::old_batch_released_after_the_new_run`.

#[test]
fn an_old_batch_released_after_the_new_run_is_late_when_its_event_ids_go_back() {
    // The new run's ids (1-192) pass the old batch's (20-21): its first id goes back.
    old_batch_released_after_the_new_run(1, &[64, 64, 64]);
}

#[test]
fn an_old_batch_released_after_the_new_run_is_late_when_stamped_before_it() {
    // The new run's ids (1-3) stay below the old batch's (20-21): only its stamp tells.
    old_batch_released_after_the_new_run(1, &[1, 1, 1]);
}

#[test]
fn a_jump_forward_whose_event_ids_go_back_is_a_restart() {
    // Over one connection (no reordering): after lost batches the ids of the same run only
    // grow; a first id no greater than the last is another run, which fences its late copies.
    let layout = mha(1);
    let mut h = Harness::connected(config(layout.clone()));
    let t = tokens(1);
    let _ = h.batch_at(1, filler(30));
    let _ = h.batch_at(2, store_page(&layout, &page_hashes(&layout, &t)[0]));
    h.advance(10);
    h.set_next_event_id(5);
    let fx = h.batch_at(9, filler(1));
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Report(Report::OtherRun { .. }))),
        "{fx:?}"
    );
    assert_eq!(cleared(&fx), vec![ClearReason::Restart]);
    assert_eq!(h.prefix(&t), 0);
}
