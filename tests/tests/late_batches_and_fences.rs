//! Late batches, fences and refetches: input histories (found by an adversarial review of the
//! first issue-13 fixes) that still ended in a false hit or a livelock (a fence dropping a new leader's removals, an old run's late
//! batch becoming a baseline, a nil-stamped late batch, an idle master refetching forever,
//! a keyless removal costing two fetches, a fetch per stale batch). Each test asserts what the
//! rule above all demands, and failed on the core as reviewed.

use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, Health, Seq, SnapshotRequest, Timestamp, VerifyConfig, Watermark,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_sim::encode::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};
use hicache_index_tests::{
    config, filler, mha, page_hashes, removed, reorder, resync, store_page, tokens, Harness,
};

fn fetch_request(fx: &[Effect]) -> Option<SnapshotRequest> {
    fx.iter().rev().find_map(|e| match e {
        Effect::Command(Command::FetchSnapshot { request }) => Some(*request),
        _ => None,
    })
}

/// Batch `seq` stamped `ts_ms`, its events numbered from `first_id`.
fn frames_at(seq: u64, ts_ms: u64, first_id: u64, events: Vec<OwnedEvent>) -> [Vec<u8>; 3] {
    frames_stamped(seq, Timestamp::Millis(ts_ms), first_id, events)
}

/// Batch `seq` with any timestamp, its events numbered from `first_id`.
fn frames_stamped(
    seq: u64,
    timestamp: Timestamp,
    first_id: u64,
    mut events: Vec<OwnedEvent>,
) -> [Vec<u8>; 3] {
    for (i, e) in events.iter_mut().enumerate() {
        e.event_id = Some(first_id + i as u64);
    }
    let batch = OwnedBatch {
        seq: Seq(seq),
        timestamp,
        dp_rank: Some(0),
        events,
    };
    encode_message(b"", &batch, MasterFlavor::Release0314)
}

const T: u64 = 1_767_225_600_000;

/// Drives a session through a seen failover: the old leader streamed `old_batches` batches
/// stamped `old_ts`, the link drops and comes back; returns the new fetch's request.
fn failover(h: &mut Harness, old_batches: u64, old_ts: u64) -> SnapshotRequest {
    let boot = fetch_request(&h.log).expect("a bootstrap fetch");
    let _ = h.session.handle_snapshot(
        h.now,
        boot,
        Some(Watermark {
            seq: Seq(0),
            events: Some(0),
        }),
        [""; 0],
    );
    for s in 1..=old_batches {
        let _ = h.feed_frames(&frames_at(s, old_ts + s, s, filler(1)));
    }
    assert_eq!(h.health(), Health::Live);
    h.advance(100);
    let fx = h.session.handle_disconnected(h.now);
    let _ = h.record(fx);
    let _ = h.fire_timeout().expect("a reconnect is scheduled");
    let fx = h.session.handle_connected(h.now);
    let fx = h.record(fx);
    fetch_request(&fx).expect("a resync after the reconnect")
}

/// The fence drops every batch "no newer than" the old run before the new stream's baseline,
/// assuming the index is empty then; but a snapshot applied before the first batch (an idle
/// new leader) is in it, and the anchor is only checked when a batch applies. A new leader
/// whose clock is behind the old one's (another host) has its removals dropped as `Late`, one
/// after the other, while the snapshot's pages are claimed with health live, until its
/// sequence passes the old leader's.
#[test]
fn a_new_leaders_removal_is_not_dropped_by_the_old_leaders_fence_while_its_snapshot_is_claimed() {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    // The old leader's clock is 10 s ahead of the standby's.
    let request = failover(&mut h, 10, T + 10_000);
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let keys: Vec<String> = layout.object_keys(&page).collect();
    // The new leader restored page A (no events); its stream stands at seq 1, event id 2.
    let at = Watermark {
        seq: Seq(1),
        events: Some(2),
    };
    let fx = h
        .session
        .handle_snapshot(h.now, request, Some(at), keys.iter().map(String::as_str));
    let _ = h.record(fx);
    assert_eq!((h.health(), h.prefix(&t)), (Health::Live, 1), "A is there");
    // The new leader removes A: seq 2, event ids 3-4, stamped by its own clock.
    h.advance(100);
    let gone: Vec<OwnedEvent> = keys.iter().map(|k| removed(k.clone())).collect();
    let fx = h.feed_frames(&frames_at(2, T + 1_000, 3, gone));
    assert_eq!(
        h.prefix(&t),
        0,
        "A was removed at the master: {fx:?}, health {:?}",
        h.health()
    );
}

/// With a reorder window, an old batch that is no copy is `Stale` only when its timestamp can
/// be compared; a publisher that stamps nil (or a negative number) gets the pre-issue rule: the
/// late batch is taken for a restart and applied as the new baseline, and its stores come back
/// after the removal that superseded them was applied.
#[test]
fn a_late_batch_stamped_nil_is_not_applied_as_a_restarts_baseline() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let keys: Vec<String> = layout.object_keys(&page).collect();
    for s in 1..=5 {
        let _ = h.feed_frames(&frames_stamped(s, Timestamp::Nil, s, filler(1)));
    }
    // Batch 6 stores A and is delayed; batch 7 removes one of A's objects and arrives first.
    let late = frames_stamped(6, Timestamp::Nil, 6, store_page(&layout, &page));
    let _ = h.feed_frames(&frames_stamped(
        7,
        Timestamp::Nil,
        8,
        vec![removed(keys[0].clone())],
    ));
    h.advance(100);
    let _ = h.fire_timeout().expect("the window gives up on the hole");
    // What the window held is dropped; the master's status places the stream at batch 7.
    assert_eq!(h.status().last_applied_seq, None);
    let _ = h.answer_fetch_at(7, 8, &[]);
    // Batch 6 arrives late: before the point, in the key list (R3), never applied.
    let fx = h.feed_frames(&late);
    assert_eq!(h.prefix(&t), 0, "batch 7 removed A's object: {fx:?}");
    assert_eq!(h.status().last_applied_seq, None);
}

/// A keyless removal (or unknown keyless event) forgets in the middle of `apply_batch`: the new
/// fetch starts there, and the rest of `apply_batch` buffers the very batch into it. The
/// snapshot's end replays that batch, which forgets everything the snapshot brought and starts a
/// second fetch. (Were the replay fixed, the new fetch's `before` is still the batch ahead of it
/// and its `since` misses it, so an idle master's status point, which that batch reached, looks
/// unreached: misses for a fetch timeout, then a fetch again.)
#[test]
fn a_resync_after_a_keyless_removal_holds_with_one_fetch_from_an_idle_master() {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    let boot = fetch_request(&h.log).expect("a bootstrap fetch");
    let zero = Watermark {
        seq: Seq(0),
        events: Some(0),
    };
    let _ = h.session.handle_snapshot(h.now, boot, Some(zero), [""; 0]);
    for s in 1..=4 {
        let _ = h.feed_frames(&frames_at(s, T + s, s, filler(1)));
    }
    // Batch 5 (event id 5) holds a removal without a key; then the master is idle.
    let mut unreadable = removed("x");
    unreadable.object_key = None;
    let fx = h.feed_frames(&frames_at(5, T + 5, 5, vec![unreadable]));
    let request = fetch_request(&fx).expect("a resync");
    let t = tokens(1);
    let keys: Vec<String> = layout.object_keys(&page_hashes(&layout, &t)[0]).collect();
    let at = Watermark {
        seq: Seq(5),
        events: Some(5),
    };
    let fx = h
        .session
        .handle_snapshot(h.now, request, Some(at), keys.iter().map(String::as_str));
    assert_eq!(fetch_request(&fx), None, "a second fetch: {fx:?}");
    assert_eq!(
        (h.health(), h.prefix(&t)),
        (Health::Live, 1),
        "the stream stands exactly at the status point: {fx:?}"
    );
}

/// The stream's last batch before an idle spell was lost after publishing (libzmq's high-water
/// mark): the status point is one the stream will not pass until the master publishes again.
/// A resync then (here after a verification round finds the index stale) proves nothing,
/// forgets at the fetch timeout and fetches again, for as long as the master stays idle.
#[test]
fn an_idle_master_whose_last_batch_was_lost_does_not_keep_the_session_refetching() {
    let layout = mha(1);
    let cfg = Config {
        verify: Some(VerifyConfig {
            interval: Duration::from_secs(1),
            ..VerifyConfig::default()
        }),
        ..resync(config(layout.clone()))
    };
    let mut h = Harness::connected(cfg);
    let boot = fetch_request(&h.log).expect("a bootstrap fetch");
    let zero = Watermark {
        seq: Seq(0),
        events: Some(0),
    };
    let fx = h.session.handle_snapshot(h.now, boot, Some(zero), [""; 0]);
    let _ = h.record(fx);
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Batch 1 stores A (ids 1-2), batches 2-4 ids 3-5; batch 5 (id 6) is lost; then idle.
    let _ = h.feed_frames(&frames_at(1, T + 1, 1, store_page(&layout, &page)));
    for s in 2..=4 {
        let _ = h.feed_frames(&frames_at(s, T + s, s + 1, filler(1)));
    }
    let at = Watermark {
        seq: Seq(5),
        events: Some(6),
    };
    // A client's close() removed A without an event: verification finds it gone.
    let mut fetches = 0;
    for _ in 0..200 {
        let Some(fx) = h.fire_timeout() else { break };
        for e in fx.iter() {
            match e {
                Effect::Command(Command::VerifyKeys { request, keys }) => {
                    let fx = h.session.handle_verify_result(
                        h.now,
                        *request,
                        keys.iter().map(|k| (k.as_str(), false)),
                    );
                    if let Some(r) = fetch_request(&fx) {
                        fetches += 1;
                        let fx = h.session.handle_snapshot(h.now, r, Some(at), [""; 0]);
                        let _ = h.record(fx);
                    }
                }
                Effect::Command(Command::FetchSnapshot { request }) => {
                    fetches += 1;
                    let fx = h
                        .session
                        .handle_snapshot(h.now, *request, Some(at), [""; 0]);
                    let _ = h.record(fx);
                }
                _ => {}
            }
        }
        if h.now.as_nanos() > 120_000_000_000 {
            break;
        }
    }
    assert!(
        fetches <= 2,
        "fetched {fetches} times in 2 minutes from an idle master; health {:?}",
        h.health()
    );
}

/// With a reorder window, every batch of a restarted master whose clock is behind the old
/// run's is `Stale`: each one forgets and starts a new fetch of the whole key list (replacing
/// the one under way, so none completes). The session stays recovering while the master is
/// active, and asks the master for its key list once per batch, until the new run's sequence
/// passes the old run's.
#[test]
fn a_restarted_master_whose_clock_is_behind_does_not_cost_a_key_list_fetch_per_batch() {
    let layout = mha(1);
    let mut h = Harness::connected(reorder(resync(config(layout.clone())), 8));
    let boot = fetch_request(&h.log).expect("a bootstrap fetch");
    let zero = Watermark {
        seq: Seq(0),
        events: Some(0),
    };
    let _ = h.session.handle_snapshot(h.now, boot, Some(zero), [""; 0]);
    // The old run: 100 batches, its clock 10 s ahead of the host the master restarts on.
    for s in 1..=100 {
        let _ = h.feed_frames(&frames_at(s, T + 10_000 + s, s, filler(1)));
    }
    // The master restarts, unseen; its batches 1-20 arrive in order.
    let mut fetches = 0;
    for s in 1..=20 {
        h.advance(10);
        let fx = h.feed_frames(&frames_at(s, T + 1_000 + s, s, filler(1)));
        fetches += fx
            .iter()
            .filter(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. })))
            .count();
    }
    assert!(
        fetches <= 2,
        "{fetches} key-list fetches for 20 batches; health {:?}",
        h.health()
    );
}

/// Held batches are released by sequence, and one whose event ids break continuity is taken
/// for a restart and applied as the new baseline, whatever its timestamp. Observed directly,
/// the same old batch (older sequence, older stamp) would be `Stale`; released from the window
/// behind a restarted master's batch, the old run's batch becomes the baseline and its stores
/// are claimed, though the restarted master lost them.
#[test]
fn an_old_runs_batch_released_after_a_restarted_masters_batch_is_not_its_baseline() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Old run: seq 1 (ids 1-2) applied; its seq 2 (id 3) and seq 4 (ids 5-6, stores B) are
    // delayed in the network.
    let _ = h.feed_frames(&frames_at(1, T + 1, 1, filler(2)));
    let old_2 = frames_at(2, T + 2, 3, filler(1));
    let old_4 = frames_at(4, T + 4, 5, store_page(&layout, &page));
    // The master restarts, unseen; the new run's seq 3 arrives (held behind the hole at 2).
    h.advance(5);
    let _ = h.feed_frames(&frames_at(3, T + 5_000, 40, filler(1)));
    // The delayed old batches arrive: 4 is held, 2 fills the hole and releases 3 and 4.
    let _ = h.feed_frames(&old_4);
    let fx = h.feed_frames(&old_2);
    assert_eq!(
        h.prefix(&t),
        0,
        "B is the old run's; the restarted master lost it: {fx:?}"
    );
}

/// With a reorder window, the `Stale` rule is only applied to a jump backward; an old run's
/// late batch (never delivered before, so no copy the fence knows) whose sequence happens to be
/// the next one is ruled by the event ids alone, taken for a restart, and applied as the new
/// baseline: its stores come back although the restarted master lost them, and its stamp is
/// older than everything the new run sent.
#[test]
fn an_old_runs_late_batch_at_the_next_sequence_is_not_a_baseline() {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Old run: seq 1 (ids 1-3), seq 2 (id 4); its last batch, seq 3 (ids 5-6, stores B), is
    // delayed in the network.
    let _ = h.feed_frames(&frames_at(1, T + 1, 1, filler(3)));
    let _ = h.feed_frames(&frames_at(2, T + 2, 4, filler(1)));
    let old_3 = frames_at(3, T + 3, 5, store_page(&layout, &page));
    // The master restarts, unseen; the new run's seq 1 and 2 arrive (seen as a restart).
    h.advance(5_000);
    let _ = h.feed_frames(&frames_at(1, T + 5_001, 1, filler(1)));
    let _ = h.feed_frames(&frames_at(2, T + 5_002, 2, filler(1)));
    assert_eq!(h.prefix(&t), 0);
    // The master's status places the new run's stream at its seq 2 (event id 2).
    let _ = h.answer_fetch_at(2, 2, &[]);
    assert_eq!(h.status().last_applied_seq, Some(Seq(2)));
    // The old run's seq 3 arrives at last.
    let fx = h.feed_frames(&old_3);
    assert_eq!(
        h.prefix(&t),
        0,
        "B is the old run's; the restarted master lost it: {fx:?}"
    );
}

#[test]
fn a_forget_during_a_fetch_fetches_again_so_that_live_stores_come_back() {
    // Liveness: a forget supersedes the fetch under way (its key list may be older than what
    // was forgotten); a store that arrives while no fetch is under way reaches the index only
    // through the next key list, so the session fetches again when the superseded one answers.
    let layout = mha(1);
    let mut h = Harness::placed(reorder(resync(config(layout.clone())), 8));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // An operator's clear: the session fetches.
    let fx = h.session.clear(h.now);
    let first = fetch_request(&fx).expect("a clear fetches");
    // A loss while that fetch is under way: it is superseded (one fetch at a time).
    h.advance(10);
    let fx = h.session.clear(h.now);
    assert_eq!(fetch_request(&fx), None, "one fetch at a time: {fx:?}");
    // Page A is stored meanwhile: no fetch is under way to place it, so it waits for the
    // next key list.
    let _ = h.batch_at(1, store_page(&layout, &page));
    assert_eq!(h.prefix(&t), 0);
    // The superseded key list is an answer no longer awaited; the session fetches again.
    let fx = h
        .session
        .handle_snapshot(h.now, first, Some(Seq(0).into()), [""; 0]);
    assert_eq!(h.status().counters.unawaited_answers, 1);
    let again = fetch_request(&fx).expect("a superseded fetch is asked again");
    assert_ne!(again, first);
    let keys: Vec<String> = layout.object_keys(&page).collect();
    let _ = h.session.handle_snapshot(
        h.now,
        again,
        Some(Watermark {
            seq: Seq(1),
            events: Some(2),
        }),
        keys.iter().map(String::as_str),
    );
    assert_eq!(h.health(), Health::Live);
    assert_eq!(
        h.prefix(&t),
        1,
        "the second key list has page A: a hit again"
    );
}
