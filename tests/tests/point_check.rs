//! Rule R3's point check: a status point the stream proved only after batches before it came is
//! checked with the master (`/batch_query_keys` of a sample of what the index claims) before
//! queries trust it, because another run of the same batch sizes proves it just as well. Rule
//! R7 asks so too about what a batch applied out of its order of arrival stored.

use hicache_index::{ClearReason, Command, Effect, Health, Input, VerifyRequest};
use hicache_index_tests::{
    cleared, config, filler, mha, page_hashes, reorder, resync, store_page, tokens, Harness,
};

/// A point check asked: its request and the keys it asks about.
type Check = (VerifyRequest, Vec<String>);

/// What [`proved_after_doubt`] returns.
type Doubted = (Harness, Vec<u32>, Vec<String>, Option<Check>);

/// The index holds page A from a key list whose status point is (3, 3); batches 2 and 3 of
/// event ids 2 and 3 come after it was placed (the numbers of the run the key list is of, and
/// of a new run of the same sizes, alike). Returns the harness, the tokens of A, its keys, and
/// the point check asked, if one was.
fn proved_after_doubt() -> Doubted {
    let layout = mha(1);
    let mut h = Harness::connected(resync(config(layout.clone())));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let keys: Vec<String> = layout.object_keys(&page).collect();
    let lines: Vec<&str> = keys.iter().map(String::as_str).collect();
    let _ = h.answer_fetch_at(3, 3, &lines);
    assert_eq!(h.health(), Health::Live, "{:?}", h.log);
    assert_eq!(h.prefix(&t), 1);
    h.set_next_event_id(2);
    let _ = h.batch_at(2, filler(1));
    assert_eq!(h.prefix(&t), 0, "unproven: queries miss");
    let fx = h.batch_at(3, filler(1));
    let check = fx.iter().find_map(|e| match e {
        Effect::Command(Command::VerifyKeys { request, keys }) => Some((*request, keys.clone())),
        _ => None,
    });
    (h, t, keys, check)
}

fn answer(h: &mut Harness, request: VerifyRequest, keys: &[String], present: bool) -> Vec<Effect> {
    let results: Vec<(&str, bool)> = keys.iter().map(|k| (k.as_str(), present)).collect();
    let fx = h.session.handle(
        h.now,
        Input::VerifyResult {
            request,
            results: &results,
        },
    );
    h.record(fx).to_vec()
}

#[test]
fn a_point_proven_after_batches_before_it_misses_until_the_master_holds_a_sample() {
    let (mut h, t, keys, check) = proved_after_doubt();
    let (request, sampled) = check.expect("the point is checked with the master");
    assert_eq!(
        {
            let mut s = sampled.clone();
            s.sort();
            s
        },
        {
            let mut k = keys.clone();
            k.sort();
            k
        }
    );
    assert_ne!(h.health(), Health::Live);
    assert_eq!(h.prefix(&t), 0, "queries miss until the master answers");
    let fx = answer(&mut h, request, &sampled, true);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(h.health(), Health::Live, "{:?}", h.log);
    assert_eq!(h.prefix(&t), 1);
    assert_eq!(
        (
            h.status().counters.point_checks,
            h.status().counters.point_checks_failed
        ),
        (1, 0)
    );
}

#[test]
fn a_point_check_that_finds_a_claimed_key_absent_forgets_the_key_list_of_another_run() {
    let (mut h, t, _, check) = proved_after_doubt();
    let (request, sampled) = check.expect("the point is checked with the master");
    let fx = answer(&mut h, request, &sampled, false);
    assert_eq!(cleared(&fx), [ClearReason::Restart], "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
    assert!(h.fetch_request().is_some(), "the key list is read again");
    assert_eq!(h.status().counters.point_checks_failed, 1);
}

#[test]
fn a_point_check_never_answered_is_given_up_and_forgets() {
    // A `/batch_query_keys` that hangs (a driver without a deadline of its own, a lost
    // answer) must not keep queries missing for good: at the round timeout the master could
    // not tell, and neither can the stream (R3).
    let (mut h, t, _, check) = proved_after_doubt();
    check.expect("the point is checked with the master");
    let mut seen = Vec::new();
    for _ in 0..8 {
        let Some(fx) = h.fire_timeout() else { break };
        seen.extend(fx.iter().cloned());
        if !cleared(&seen).is_empty() {
            break;
        }
    }
    assert_eq!(cleared(&seen), [ClearReason::Unproven], "{:?}", h.log);
    assert_eq!(h.prefix(&t), 0);
    assert!(h.fetch_request().is_some(), "the key list is read again");
    assert_eq!(h.status().counters.point_checks_failed, 1);
}

/// Rule R7: batch 2, which stores page A, arrives before batch 1 (a late batch of a run the
/// stream left looks so: the next run's batch 1 fills the hole before it, with event ids that
/// run on). Returns the harness, the tokens of A, and the point check asked once batch 1
/// released batch 2, if one was.
fn applied_out_of_arrival_order() -> (Harness, Vec<u32>, Option<Check>) {
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 4));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let first = h.frames(1, filler(1));
    let second = h.frames(2, store_page(&layout, &page));
    let fx = h.feed_frames(&second);
    assert!(commands(&fx).is_empty(), "held for its hole: {fx:?}");
    let fx = h.feed_frames(&first);
    assert_eq!(h.status().counters.reordered_batches, 1);
    let check = commands(&fx).into_iter().find_map(|c| match c {
        Command::VerifyKeys { request, keys } => Some((request, keys)),
        _ => None,
    });
    (h, t, check)
}

fn commands(fx: &[Effect]) -> Vec<Command> {
    fx.iter()
        .filter_map(|e| match e {
            Effect::Command(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn a_batch_applied_after_one_that_arrived_after_it_misses_until_the_master_holds_its_stores() {
    let (mut h, t, check) = applied_out_of_arrival_order();
    let (request, asked) = check.expect("what batch 2 stored is asked of the master");
    let layout = mha(1);
    let page = page_hashes(&layout, &t)[0];
    for key in layout.object_keys(&page) {
        assert!(asked.contains(&key), "{key} asked: {asked:?}");
    }
    assert_ne!(h.health(), Health::Live);
    assert_eq!(h.prefix(&t), 0, "queries miss until the master answers");
    let fx = answer(&mut h, request, &asked, true);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(h.health(), Health::Live, "{:?}", h.log);
    assert_eq!(h.prefix(&t), 1);
}

#[test]
fn a_batch_applied_after_one_that_arrived_after_it_forgets_when_the_master_lacks_its_stores() {
    let (mut h, t, check) = applied_out_of_arrival_order();
    let (request, asked) = check.expect("what batch 2 stored is asked of the master");
    let fx = answer(&mut h, request, &asked, false);
    assert_eq!(cleared(&fx), [ClearReason::Restart], "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
    assert!(h.fetch_request().is_some(), "the key list is read again");
    assert_eq!(h.status().counters.point_checks_failed, 1);
}

#[test]
fn a_check_of_a_batch_applied_out_of_order_answered_in_part_forgets() {
    // A `/batch_query_keys` answer can leave keys out (a chunk that failed, an entry without
    // `ok`): the keys it leaves out are not known present, so it cannot tell.
    let (mut h, t, check) = applied_out_of_arrival_order();
    let (request, asked) = check.expect("what batch 2 stored is asked of the master");
    assert!(asked.len() > 1, "{asked:?}");
    let fx = answer(&mut h, request, &asked[1..], true);
    assert_eq!(cleared(&fx), [ClearReason::Unproven], "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
    assert_eq!(h.status().counters.point_checks_failed, 1);
}

#[test]
fn a_check_of_a_batch_applied_out_of_order_asks_only_what_it_stored() {
    // Not a sample of the index: a claimed key the master dropped silently is verification's
    // to find (it reconciles), not a reason to forget the whole index.
    let layout = mha(1);
    let mut h = Harness::placed(reorder(config(layout.clone()), 4));
    let t = tokens(2);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch_at(1, store_page(&layout, &pages[0]));
    assert_eq!(h.prefix(&t), 1);
    let second = h.frames(2, filler(1));
    let third = h.frames(3, store_page(&layout, &pages[1]));
    let _ = h.feed_frames(&third);
    let fx = h.feed_frames(&second);
    let asked = commands(&fx)
        .into_iter()
        .find_map(|c| match c {
            Command::VerifyKeys { keys, .. } => Some(keys),
            _ => None,
        })
        .expect("what batch 3 stored is asked of the master");
    let mut stored: Vec<String> = layout.object_keys(&pages[1]).collect();
    stored.sort();
    assert_eq!(asked, stored);
}
