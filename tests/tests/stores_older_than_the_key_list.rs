//! A live batch that arrives after a resync's key list may be older than the list: the master's
//! queue and the network delay what it published before the list was read. When its object went
//! without an event in between, the list lacks the key and the batch stores it again. So a key a
//! live batch stores that the list lacks is asked of the master before the resync completes,
//! question after question while such stores keep coming (three at most), and a resync placed at
//! a status point during whose last question more came does not answer a change of the master's
//! signals (found by the simulator, seed 7546970 of the lossy preset: 18 pages claimed for good
//! after their objects were gone).

use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, Effects, Health, Input, Layout, PageHash, Report, ResyncConfig,
    SnapshotRequest, StoreSignals, Watermark,
};
use hicache_index_tests::{
    config, filler, mha, page_hashes, publisher_clear, question, resync, store_page, tokens,
    Harness,
};

/// A connected session (resync on: `cfg`'s, or the default) whose bootstrap key list began with
/// the status point "nothing published yet"; returns the fetch being handed over.
fn list_begun(cfg: Config) -> (Harness, SnapshotRequest) {
    let cfg = if cfg.resync.is_some() {
        cfg
    } else {
        resync(cfg)
    };
    let mut h = Harness::connected(cfg);
    let request = h.fetch_request().expect("a bootstrap fetch");
    let fx = h.session.handle(
        h.now,
        Input::SnapshotBegin {
            request,
            watermark: Some(Watermark {
                seq: hicache_index::Seq(0),
                events: Some(0),
            }),
        },
    );
    let _ = h.record(fx);
    (h, request)
}

/// Ends the key list of `request` with `keys`.
fn list_ends(h: &mut Harness, request: SnapshotRequest, keys: &[String]) -> Effects {
    let lines: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let fx = h.session.handle(
        h.now,
        Input::SnapshotLines {
            request,
            lines: &lines,
        },
    );
    let _ = h.record(fx);
    let fx = h.session.handle(h.now, Input::SnapshotEnd { request });
    h.record(fx)
}

/// A session whose bootstrap key list, empty, ended after a live batch stored the one page of
/// `t`: returns it, the layout, `t`, the page and the effects of the list's end.
fn one_page_stored_over_an_empty_list() -> (Harness, Layout, Vec<u32>, PageHash, Effects) {
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Published before the list was read, delivered after it.
    let _ = h.batch(store_page(&layout, &page));
    let fx = list_ends(&mut h, request, &[]);
    (h, layout, t, page, fx)
}

fn resynced(fx: &[Effect]) -> bool {
    fx.iter()
        .any(|e| matches!(e, Effect::Report(Report::Resynced { .. })))
}

#[test]
fn a_store_the_key_list_lacks_is_not_claimed_once_the_master_says_it_is_gone() {
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    // Published before the list was read, delivered after it; the object went meanwhile.
    let _ = h.batch(store_page(&layout, &page));
    let fx = list_ends(&mut h, request, &[]);
    assert!(!resynced(&fx), "the stores are asked about first: {fx:?}");
    let (confirm, mut asked) = question(&fx).expect("the stores the list lacks are asked about");
    let mut keys: Vec<String> = layout.object_keys(&page).collect();
    asked.sort();
    keys.sort();
    assert_eq!(asked, keys);
    let fx = h.answer(confirm, &asked, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(
        h.prefix(&t),
        0,
        "a page whose objects are gone is not claimed"
    );
    let c = h.status().counters;
    assert_eq!((c.unlisted_stores, c.unlisted_removed), (2, 2));
}

#[test]
fn a_store_the_master_still_holds_is_claimed_once_it_said_so() {
    let (mut h, _, t, _, fx) = one_page_stored_over_an_empty_list();
    let (confirm, asked) = question(&fx).expect("the stores the list lacks are asked about");
    let fx = h.answer(confirm, &asked, true);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
    assert_eq!(h.status().counters.unlisted_removed, 0);
}

#[test]
fn a_store_the_key_list_holds_is_not_asked_about() {
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let _ = h.batch(store_page(&layout, &page));
    let keys: Vec<String> = layout.object_keys(&page).collect();
    let fx = list_ends(&mut h, request, &keys);
    assert!(question(&fx).is_none(), "{fx:?}");
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
}

#[test]
fn stores_that_come_while_the_master_is_asked_are_asked_about_next() {
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(2);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch(store_page(&layout, &pages[0]));
    let fx = list_ends(&mut h, request, &[]);
    let (first, asked) = question(&fx).expect("the first question");
    // More of what the master's queue held before the list was read.
    let _ = h.batch(store_page(&layout, &pages[1]));
    let fx = h.answer(first, &asked, true);
    assert!(!resynced(&fx), "a second question first: {fx:?}");
    let (second, mut asked) = question(&fx).expect("the stores that came meanwhile");
    let mut keys: Vec<String> = layout.object_keys(&pages[1]).collect();
    asked.sort();
    keys.sort();
    assert_eq!(asked, keys);
    let fx = h.answer(second, &asked, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(
        h.prefix(&t),
        1,
        "the first page is held, the second is gone"
    );
    let c = h.status().counters;
    assert_eq!((c.unlisted_stores, c.unlisted_removed), (4, 2));
}

#[test]
fn a_key_stored_again_while_it_is_asked_about_is_asked_again() {
    let (mut h, layout, t, page, fx) = one_page_stored_over_an_empty_list();
    let (first, asked) = question(&fx).expect("the first question");
    // The same stores again: the answer cannot tell which came first, so it does not remove
    // them, and the next question asks again.
    let _ = h.batch(store_page(&layout, &page));
    let fx = h.answer(first, &asked, false);
    assert_eq!(h.status().counters.unlisted_removed, 0);
    let (second, again) = question(&fx).expect("the keys stored again are asked again");
    assert_eq!(again.len(), 2);
    let fx = h.answer(second, &again, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn a_key_the_answer_leaves_out_is_asked_again_not_claimed() {
    let (mut h, _, t, _, fx) = one_page_stored_over_an_empty_list();
    let (first, asked) = question(&fx).expect("the first question");
    // One request of the question failed: its key is neither held nor gone.
    let fx = h.answer(first, &asked[..1], false);
    assert!(!resynced(&fx), "{fx:?}");
    let (second, again) = question(&fx).expect("the key left out is asked again");
    assert_eq!(again, asked[1..]);
    let fx = h.answer(second, &again, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
    assert_eq!(h.status().counters.unlisted_removed, 2);
}

#[test]
fn a_clear_while_the_master_is_asked_leaves_nothing_to_remove_or_ask() {
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(2);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch(store_page(&layout, &pages[0]));
    let fx = list_ends(&mut h, request, &[]);
    let (first, asked) = question(&fx).expect("the first question");
    // A store and then the publisher's clear while the question is out: nothing it named is
    // held any longer, and nothing is left to ask.
    let _ = h.batch(store_page(&layout, &pages[1]));
    let _ = h.batch(vec![publisher_clear(None)]);
    let fx = h.answer(first, &asked, false);
    assert!(question(&fx).is_none(), "{fx:?}");
    assert!(resynced(&fx), "{fx:?}");
    let c = h.status().counters;
    assert_eq!((c.unlisted_removed, c.unlisted_unasked), (0, 0));
    assert_eq!(h.prefix(&t), 0);
}

#[test]
fn a_failed_question_about_stores_only_asks_again_rather_than_failing_the_fetch() {
    let (mut h, _, t, _, fx) = one_page_stored_over_an_empty_list();
    let (first, asked) = question(&fx).expect("the first question");
    let fx = h
        .session
        .handle(h.now, Input::VerifyFailed { request: first });
    let fx = h.record(fx);
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Report(Report::ResyncFailed { .. }))),
        "{fx:?}"
    );
    let (second, again) = question(&fx).expect("the stores are asked again");
    assert_eq!(again, asked);
    let fx = h.answer(second, &again, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 0);
}

/// With the watch of the master's signals on: the watch's first read (its baseline, taken while
/// the bootstrap key list is fetched) wants a key list asked for at or after it, which the
/// bootstrap list is (both at time 0).
fn watched(h: &mut Harness) {
    let mut read = None;
    for _ in 0..4 {
        read = h.log.iter().find_map(|e| match e {
            Effect::Command(Command::ReadSignals { request }) => Some(*request),
            _ => None,
        });
        if read.is_some() {
            break;
        }
        let _ = h.fire_timeout();
    }
    let read = read.expect("the watch's first read");
    assert_eq!(h.now, hicache_index::Instant::ZERO);
    let mut signals = StoreSignals::default();
    signals.add("master_unmount_segment_requests_total", 0.0);
    let fx = h.session.handle(
        h.now,
        Input::Signals {
            request: read,
            signals: Some(signals),
        },
    );
    let _ = h.record(fx);
}

fn watch_config(layout: &hicache_index::Layout) -> Config {
    Config {
        resync: Some(ResyncConfig {
            status_check: None,
            store_watch: Some(Duration::from_millis(250)),
            ..ResyncConfig::default()
        }),
        verify: None,
        ..config(layout.clone())
    }
}

/// Lets stores of a new page come during each of the three questions, the master holding
/// everything asked; returns the effects of the last answer.
fn stores_during_every_question(
    h: &mut Harness,
    layout: &hicache_index::Layout,
    list: SnapshotRequest,
) -> Effects {
    let pages = page_hashes(layout, &tokens(4));
    let _ = h.batch(store_page(layout, &pages[0]));
    let mut fx = list_ends(h, list, &[]);
    for page in &pages[1..] {
        let (request, asked) = question(&fx).expect("a question");
        let _ = h.batch(store_page(layout, page));
        fx = h.answer(request, &asked, true);
    }
    assert!(question(&fx).is_none(), "three questions at most: {fx:?}");
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.status().counters.unlisted_unasked, 2);
    fx
}

#[test]
fn a_resync_that_asked_every_store_the_list_lacks_answers_the_watch() {
    let layout = mha(1);
    let (mut h, request) = list_begun(watch_config(&layout));
    watched(&mut h);
    let page = page_hashes(&layout, &tokens(1))[0];
    let _ = h.batch(store_page(&layout, &page));
    let fx = list_ends(&mut h, request, &[]);
    let (first, asked) = question(&fx).expect("the first question");
    let fx = h.answer(first, &asked, true);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn stores_left_unasked_at_a_status_point_leave_the_watch_wanting_a_key_list() {
    let layout = mha(1);
    let (mut h, request) = list_begun(watch_config(&layout));
    watched(&mut h);
    // The fourth page is claimed unasked: this key list does not answer the watch, which
    // reconciles with another (placed at its own status point, the index answering meanwhile).
    let fx = stores_during_every_question(&mut h, &layout, request);
    assert_eq!(h.health(), Health::Reconciling);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. }))),
        "the watch asks for a key list again: {fx:?}"
    );
}

#[test]
fn stores_left_unasked_without_a_status_point_still_answer_the_watch() {
    // A master without status counters: the stream is placed at the last batch heard (R6). A
    // reconcile could not be placed either: it would forget and resync into the same, for as
    // long as the master is busy.
    let layout = mha(1);
    let mut h = Harness::connected(watch_config(&layout));
    watched(&mut h);
    let first = h.fetch_request().expect("the bootstrap fetch");
    let _ = h.batch(filler(1));
    let fx = h.session.handle(
        h.now,
        Input::SnapshotBegin {
            request: first,
            watermark: None,
        },
    );
    let _ = h.record(fx);
    let request = h
        .fetch_request()
        .expect("fetched again, anchored by the batch heard");
    assert_ne!(request, first);
    let fx = h.session.handle(
        h.now,
        Input::SnapshotBegin {
            request,
            watermark: None,
        },
    );
    let _ = h.record(fx);
    assert!(
        h.log
            .iter()
            .any(|e| matches!(e, Effect::Report(Report::Placed { at: None }))),
        "placed at the last batch heard"
    );
    let _ = stores_during_every_question(&mut h, &layout, request);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_doubted_line_also_stored_live_is_asked_once_and_its_answer_counts_for_both() {
    // A store shared with other applications: most HiCache lines of the key list sit next to
    // another application's key, and are doubted; the live batches stored some of them too.
    let layout = mha(1);
    let (mut h, request) = list_begun(config(layout.clone()));
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let _ = h.batch(store_page(&layout, &page));
    let keys: Vec<String> = layout.object_keys(&page).collect();
    let lines = [
        keys[0].clone(),
        "another application's key".to_owned(),
        keys[1].clone(),
    ];
    let fx = list_ends(&mut h, request, &lines);
    let (confirm, mut asked) = question(&fx).expect("the question");
    // The master answers with a map: a key asked twice would be answered once.
    asked.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(asked, expected, "each key asked once");
    let fx = h.answer(confirm, &asked, true);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
}

#[test]
fn a_buffer_that_fills_while_stores_are_asked_about_ends_the_questions_not_the_fetch() {
    // A small buffer under steady load: failing the fetch would clear the index and fetch again
    // into the same, for as long as the master is busy.
    let layout = mha(1);
    let (mut h, request) = list_begun(small_buffer(&layout));
    let t = tokens(3);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch(store_page(&layout, &pages[0]));
    let fx = list_ends(&mut h, request, &[]);
    let (first, asked) = question(&fx).expect("the store is asked about");
    let _ = h.batch(store_page(&layout, &pages[1]));
    let fx = h.batch(store_page(&layout, &pages[2]));
    assert!(
        !fx.iter().any(|e| matches!(
            e,
            Effect::Report(Report::ResyncFailed { .. } | Report::Cleared { .. })
        )),
        "{fx:?}"
    );
    // The question out is still awaited: the master no longer holds page 0's objects.
    let fx = h.answer(first, &asked, false);
    assert!(question(&fx).is_none(), "nothing more is asked: {fx:?}");
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(
        h.prefix(&t),
        0,
        "page 0 is gone; pages 1 and 2 are claimed unasked"
    );
    assert_eq!(h.claimed(&pages[1..]), [true, true]);
    let c = h.status().counters;
    assert_eq!((c.unlisted_removed, c.unlisted_unasked), (2, 4));
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn stores_after_the_buffer_filled_are_claimed_unasked_and_decide_what_was_asked() {
    let layout = mha(1);
    let (mut h, request) = list_begun(small_buffer(&layout));
    let t = tokens(4);
    let pages = page_hashes(&layout, &t);
    let _ = h.batch(store_page(&layout, &pages[0]));
    let fx = list_ends(&mut h, request, &[]);
    let (first, asked) = question(&fx).expect("the store is asked about");
    let _ = h.batch(store_page(&layout, &pages[1]));
    let _ = h.batch(store_page(&layout, &pages[2]));
    // Full now: page 3 is not recorded, and page 0 stored again decides it over the answer.
    let _ = h.batch(store_page(&layout, &pages[3]));
    let _ = h.batch(store_page(&layout, &pages[0]));
    let fx = h.answer(first, &asked, false);
    assert!(resynced(&fx), "{fx:?}");
    assert_eq!(h.prefix(&t), 4, "page 0 was stored after the question");
    let c = h.status().counters;
    assert_eq!(
        (c.unlisted_removed, c.unlisted_unasked),
        (0, 8),
        "pages 1 and 2 recorded, 3 and 0 again counted once full"
    );
}

#[test]
fn a_buffer_that_fills_while_doubted_lines_are_asked_about_fails_the_fetch() {
    let layout = mha(1);
    let (mut h, request) = list_begun(small_buffer(&layout));
    let t = tokens(3);
    let pages = page_hashes(&layout, &t);
    let keys: Vec<String> = layout.object_keys(&pages[0]).collect();
    let lines = [
        "another application's key".to_owned(),
        keys[0].clone(),
        keys[1].clone(),
    ];
    let fx = list_ends(&mut h, request, &lines);
    assert!(question(&fx).is_some(), "the doubted line is asked about");
    let _ = h.batch(store_page(&layout, &pages[1]));
    let _ = h.batch(store_page(&layout, &pages[2]));
    let fx = h.batch(filler(1));
    assert!(
        fx.iter().any(|e| matches!(
            e,
            Effect::Report(Report::ResyncFailed {
                reason: hicache_index::ResyncFailure::BufferFull
            })
        )),
        "the doubted lines cannot wait: {fx:?}"
    );
}

/// Resync on with a buffer of two batches (a small one, under steady load).
fn small_buffer(layout: &hicache_index::Layout) -> Config {
    Config {
        resync: Some(ResyncConfig {
            max_buffered_batches: 2,
            ..ResyncConfig::default()
        }),
        ..config(layout.clone())
    }
}
