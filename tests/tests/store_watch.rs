//! The watch of the master's own signals (issue 27): objects the master stops listing without
//! an event (a client's segment leaving) are no longer claimed once a key list asked for after
//! the signal moved is applied, and the pages it still lists stay hits throughout (a reconcile,
//! not a forget). A live batch after the key list's status point wins over the list; a batch at
//! or before it loses, even when it arrives after the list.

use std::time::Duration;

use hicache_index::snapshot::MAX_DOUBTED;
use hicache_index::{
    ClearReason, Command, Config, Effect, Effects, Health, Input, Layout, PageHash, Report,
    ResyncConfig, ResyncFailure, SignalsRequest, StoreSignals,
};
use hicache_index_tests::{
    cleared, config, mha, page_hashes, publisher_clear, question, removed, store_page, tokens,
    Harness,
};

const UNMOUNTS: &str = "master_unmount_segment_requests_total";

/// Eight pages of two objects stored by events after the watch's baseline (resync on, no status
/// checks or verification: only the watch asks the master).
fn setup() -> (Harness, Layout, Vec<PageHash>) {
    let layout = mha(1);
    let cfg = Config {
        resync: Some(ResyncConfig {
            status_check: None,
            store_watch: Some(Duration::from_millis(250)),
            ..ResyncConfig::default()
        }),
        verify: None,
        ..config(layout.clone())
    };
    let mut h = Harness::placed(cfg);
    let fx = read_signals(&mut h, Some(0));
    assert!(
        !asks_fetch(&fx),
        "an empty index needs no reconcile: {fx:?}"
    );
    let pages = page_hashes(&layout, &tokens(8));
    for page in &pages {
        let _ = h.batch(store_page(&layout, page));
    }
    assert_eq!(h.claimed(&pages), [true; 8]);
    assert_eq!(h.health(), Health::Live);
    (h, layout, pages)
}

/// Fires the next timer; returns the read of the master's signals it asks for, if any.
fn fire_for_signals_read(h: &mut Harness) -> Option<SignalsRequest> {
    let fx = h.fire_timeout().expect("the watch is scheduled");
    fx.iter().find_map(|e| match e {
        Effect::Command(Command::ReadSignals { request }) => Some(*request),
        _ => None,
    })
}

/// Fires timers until the session reads the master's signals, and answers with `unmounts` as
/// the unmount counter (`None`: the master lists no signal family).
fn read_signals(h: &mut Harness, unmounts: Option<u64>) -> Effects {
    for _ in 0..20 {
        let Some(request) = fire_for_signals_read(h) else {
            continue;
        };
        let mut signals = StoreSignals::default();
        if let Some(n) = unmounts {
            signals.add(UNMOUNTS, n as f64);
        }
        let fx = h.session.handle(
            h.now,
            Input::Signals {
                request,
                signals: Some(signals),
            },
        );
        return h.record(fx);
    }
    panic!("no signals read within 20 timers");
}

fn asks_fetch(fx: &Effects) -> bool {
    fx.iter()
        .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. })))
}

/// A change of the signals, page 6 stored again by a batch after the status point (one the
/// master's queue held while the list was read), and the list, lacking page 6, handed over
/// whole with `extra`'s line inserted at its place (another application's key, say); returns
/// its effects.
fn page_6_stored_after_the_point(
    h: &mut Harness,
    layout: &Layout,
    pages: &[PageHash],
    extra: Option<(usize, &str)>,
) -> Effects {
    let point = h.next_seq - 1;
    let _ = read_signals(h, Some(1));
    let _ = h.batch(store_page(layout, &pages[6]));
    let mut lines = keys_but(layout, pages, &[6]);
    if let Some((at, line)) = extra {
        lines.insert(at, line.to_owned());
    }
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    h.answer_fetch_at(point, 16, &lines)
}

/// Every object key of the pages whose index is not in `gone`.
fn keys_but(layout: &Layout, pages: &[PageHash], gone: &[usize]) -> Vec<String> {
    let gone: std::collections::HashSet<usize> = gone.iter().copied().collect();
    pages
        .iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .flat_map(|(_, p)| layout.object_keys(p))
        .collect()
}

/// Answers the reconcile's fetch with every object key but those of the pages in `gone`, with
/// the status point where the stream stands.
fn answer_all_but(h: &mut Harness, layout: &Layout, pages: &[PageHash], gone: &[usize]) -> Effects {
    let listed = keys_but(layout, pages, gone);
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    h.answer_fetch(h.next_seq - 1, &listed)
}

/// Answers the fetch under way with every page listed and another application's key among
/// them (the lines next to it are doubted), at the status point `seq`.
fn answer_with_a_foreign_line(
    h: &mut Harness,
    layout: &Layout,
    pages: &[PageHash],
    seq: u64,
) -> Effects {
    let mut lines = keys_but(layout, pages, &[]);
    lines.insert(4, "a key of another application".to_owned());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    h.answer_fetch(seq, &lines)
}

fn reconciled(fx: &Effects) -> Option<(usize, usize)> {
    fx.iter().find_map(|e| match e {
        Effect::Report(Report::Reconciled { removed, restored }) => Some((*removed, *restored)),
        _ => None,
    })
}

#[test]
fn a_segment_leaving_unclaims_its_pages_and_the_others_stay_hits_throughout() {
    let (mut h, layout, pages) = setup();
    // A client closed: pages 2 and 5 vanished from the master's listing, no event.
    let fx = read_signals(&mut h, Some(1));
    assert!(asks_fetch(&fx), "a change asks for a key list: {fx:?}");
    assert_eq!(h.health(), Health::Reconciling);
    assert_eq!(h.claimed(&pages), [true; 8], "no forget, no miss window");
    let fx = answer_all_but(&mut h, &layout, &pages, &[2, 5]);
    assert_eq!(reconciled(&fx), Some((4, 0)), "{fx:?}");
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(
        h.claimed(&pages),
        [true, true, false, true, true, false, true, true]
    );
    assert_eq!(h.health(), Health::Live);
    let c = h.status().counters;
    assert_eq!((c.store_changes, c.reconciles_completed), (1, 1));
    assert_eq!((c.reconciled_removed, c.reconciled_restored), (4, 0));
}

#[test]
fn objects_listed_again_after_a_stall_are_restored() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    let _ = answer_all_but(&mut h, &layout, &pages, &[3]);
    assert!(!h.claimed(&pages)[3]);
    // The stalled client resumed: its objects are listed again, no event says so.
    let _ = read_signals(&mut h, Some(2));
    let fx = answer_all_but(&mut h, &layout, &pages, &[]);
    assert_eq!(reconciled(&fx), Some((0, 2)), "{fx:?}");
    assert_eq!(h.claimed(&pages), [true; 8]);
}

#[test]
fn a_live_batch_after_the_status_point_wins_over_the_key_list() {
    let (mut h, layout, pages) = setup();
    let point = h.next_seq - 1;
    let _ = read_signals(&mut h, Some(1));
    // After the status point: page 1 is removed and page 6 stored again (it vanished, then
    // the router's worker put it back).
    let events: Vec<_> = layout
        .object_keys(&pages[1])
        .map(removed)
        .chain(store_page(&layout, &pages[6]))
        .collect();
    let _ = h.batch(events);
    // The list was read before that batch: it holds page 1 and lacks page 6.
    let listed = keys_but(&layout, &pages, &[6]);
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let fx = h.answer_fetch_at(point, 16, &listed);
    // The store may be older than the list (queued at the master when the list was read): it
    // is asked about first, and the master still holds it.
    let (request, mut asked) = question(&fx).expect("the store the list lacks is asked about");
    let mut stored: Vec<String> = layout.object_keys(&pages[6]).collect();
    asked.sort();
    stored.sort();
    assert_eq!(asked, stored);
    let fx = h.answer(request, &asked, true);
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    let c = h.claimed(&pages);
    assert!(
        !c[1],
        "the live removal after the point is newer than the list"
    );
    assert!(
        c[6],
        "the live store after the point is newer than the list"
    );
}

#[test]
fn a_store_after_the_status_point_that_the_list_lacks_is_not_claimed_once_the_master_says_it_is_gone(
) {
    let (mut h, layout, pages) = setup();
    // Page 6 was stored again, then lost with a segment, no event; the store sat in the
    // master's queue while the list was read, so its batch is numbered after the status point.
    let fx = page_6_stored_after_the_point(&mut h, &layout, &pages, None);
    assert_eq!(
        reconciled(&fx),
        None,
        "the store is asked about first: {fx:?}"
    );
    let fx = h.answer_question(false);
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    assert_eq!(
        h.claimed(&pages),
        [true, true, true, true, true, true, false, true],
        "a page whose objects the master no longer holds is not claimed"
    );
    assert_eq!(h.health(), Health::Live);
    let c = h.status().counters;
    assert_eq!((c.unlisted_stores, c.unlisted_removed), (2, 2));
}

#[test]
fn a_store_after_the_status_point_stored_again_while_it_is_asked_about_stays_claimed() {
    let (mut h, layout, pages) = setup();
    let fx = page_6_stored_after_the_point(&mut h, &layout, &pages, None);
    let (request, asked) = question(&fx).expect("the store the list lacks is asked about");
    // Stored again after the question was sent: the answer, read before, no longer decides it.
    let _ = h.batch(store_page(&layout, &pages[6]));
    let fx = h.answer(request, &asked, false);
    assert_eq!(h.claimed(&pages), [true; 8]);
    // That store may be older than the list too: it is asked about next.
    let (_, again) = question(&fx).expect("the store that came meanwhile is asked about");
    assert_eq!(again, asked);
    let fx = h.answer_question(true);
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    assert_eq!(h.claimed(&pages), [true; 8]);
}

#[test]
fn a_batch_before_the_status_point_that_arrives_after_the_list_does_not_bring_back_a_page() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    // The master stored page 7's objects again in batch `point` and then lost them with the
    // segment; the list, read after `point`, lacks page 7. The batch arrives after the list.
    let point = h.next_seq;
    let listed = keys_but(&layout, &pages, &[7]);
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let fx = h.answer_fetch_at(point, 17, &listed);
    assert_eq!(
        reconciled(&fx),
        None,
        "the stream has not reached the point: {fx:?}"
    );
    assert_eq!(h.health(), Health::Reconciling);
    let fx = h.batch(store_page(&layout, &pages[7]));
    assert_eq!(reconciled(&fx), Some((2, 0)), "{fx:?}");
    assert!(!h.claimed(&pages)[7], "the list is newer than the batch");
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_reconcile_without_a_status_point_forgets_and_resyncs() {
    let (mut h, _layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    let request = h.fetch_request().expect("a reconcile fetch");
    let lines: [&[u8]; 0] = [];
    let fx = h.session.handle(
        h.now,
        Input::Snapshot {
            request,
            watermark: None,
            lines: &lines,
        },
    );
    let fx = h.record(fx);
    assert_eq!(cleared(&fx), [ClearReason::StoreChanged], "{fx:?}");
    assert!(asks_fetch(&fx), "a resync follows: {fx:?}");
    assert_eq!(h.claimed(&pages), [false; 8]);
    assert_eq!(h.health(), Health::Recovering);
}

#[test]
fn a_status_point_behind_the_stream_is_another_runs_and_forgets() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    let listed = keys_but(&layout, &pages, &[]);
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    // The stream stood at batch 8 when the fetch was asked; a point at 3 is another run's.
    let fx = h.answer_fetch_at(3, 6, &listed);
    assert_eq!(cleared(&fx), [ClearReason::StoreChanged], "{fx:?}");
    assert_eq!(h.claimed(&pages), [false; 8]);
}

#[test]
fn a_master_without_the_signal_families_is_said_once_and_asked_rarely() {
    let (mut h, _layout, _pages) = setup();
    let fx = read_signals(&mut h, None);
    assert!(fx
        .iter()
        .any(|e| matches!(e, Effect::Report(Report::SignalsAbsent))));
    let asked_at = h.now;
    let fx = read_signals(&mut h, None);
    assert!(h.now.saturating_duration_since(asked_at) >= Duration::from_millis(250 * 64));
    assert!(!fx
        .iter()
        .any(|e| matches!(e, Effect::Report(Report::SignalsAbsent))));
    assert_eq!(h.health(), Health::Live);
}

/// 40,000 pages of two objects (more than one slice of a reconcile applies) stored by events
/// after the watch's baseline, as in [`setup`].
fn setup_large() -> (Harness, Layout, Vec<PageHash>) {
    let layout = mha(1);
    let cfg = Config {
        resync: Some(ResyncConfig {
            status_check: None,
            store_watch: Some(Duration::from_millis(250)),
            ..ResyncConfig::default()
        }),
        verify: None,
        index: hicache_index::IndexConfig {
            max_pages: 1 << 16,
            ..hicache_index::IndexConfig::default()
        },
        ..config(layout.clone())
    };
    let mut h = Harness::placed(cfg);
    let _ = read_signals(&mut h, Some(0));
    let pages = page_hashes(&layout, &tokens(40_000));
    for chunk in pages.chunks(1_000) {
        let _ = h.batch(chunk.iter().flat_map(|p| store_page(&layout, p)).collect());
    }
    (h, layout, pages)
}

/// Fires the reconcile's slices until it reports, answering that the master holds the stores
/// it asks about once they are applied; returns (removed, restored) and how many slices came
/// after the first.
fn finish_reconcile(h: &mut Harness) -> ((usize, usize), usize) {
    let mut slices = 0;
    loop {
        let mut fx = h.fire_timeout().expect("the next slice is due");
        slices += 1;
        if let Some((request, keys)) = question(&fx) {
            fx = h.answer(request, &keys, true);
        }
        if let Some(done) = reconciled(&fx) {
            return (done, slices);
        }
        assert!(slices < 1_000, "the reconcile never ends");
    }
}

#[test]
fn a_large_reconcile_is_applied_in_slices_and_a_live_batch_between_them_decides_its_objects() {
    let (mut h, layout, pages) = setup_large();
    let last = pages.len() - 1;
    let _ = read_signals(&mut h, Some(1));
    // The master lost pages 0, 30,000 and `last`; the list says so.
    let fx = answer_all_but(&mut h, &layout, &pages, &[0, 30_000, last]);
    assert_eq!(reconciled(&fx), None, "one slice at a time: {fx:?}");
    assert_eq!(h.health(), Health::Reconciling);
    // Between two slices (the first took the first 4,096 page slots) a worker stores page
    // 30,000 again: the event is newer than the list.
    let _ = h.batch(store_page(&layout, &pages[30_000]));
    let (done, slices) = finish_reconcile(&mut h);
    assert!(slices > 1, "{slices} slices after the first");
    assert_eq!(done, (4, 0), "pages 0 and {last} removed, page 30,000 kept");
    let c = h.claimed(&[pages[0], pages[1], pages[30_000], pages[last]]);
    assert_eq!(c, [false, true, true, false]);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_store_between_two_slices_is_asked_about_once_the_list_is_applied() {
    let (mut h, layout, pages) = setup_large();
    let _ = read_signals(&mut h, Some(1));
    let fx = answer_all_but(&mut h, &layout, &pages, &[30_000]);
    assert_eq!(reconciled(&fx), None, "one slice at a time: {fx:?}");
    // Between two slices: the store of page 30,000 that the master's queue held when the list
    // was read; its objects went without an event since.
    let _ = h.batch(store_page(&layout, &pages[30_000]));
    let asked = loop {
        let fx = h.fire_timeout().expect("the next slice is due");
        assert_eq!(
            reconciled(&fx),
            None,
            "the store is asked about first: {fx:?}"
        );
        if let Some((_, asked)) = question(&fx) {
            break asked;
        }
    };
    let mut stored: Vec<String> = layout.object_keys(&pages[30_000]).collect();
    let mut asked = asked;
    asked.sort();
    stored.sort();
    assert_eq!(asked, stored);
    let fx = h.answer_question(false);
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    assert_eq!(h.claimed(&[pages[29_999], pages[30_000]]), [true, false]);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_reconcile_asks_about_its_stores_with_questions_of_their_own() {
    let (mut h, layout, pages) = setup();
    // The list lacks page 6 and holds a foreign line next to page 4's first key.
    let mut fx = page_6_stored_after_the_point(
        &mut h,
        &layout,
        &pages,
        Some((8, "a key of another application")),
    );
    // The doubted lines take all three questions: two fail, the third is answered.
    for _ in 0..2 {
        let (request, _) = question(&fx).expect("the doubted lines");
        let failed = h.session.handle(h.now, Input::VerifyFailed { request });
        fx = h.record(failed);
    }
    let (request, doubted) = question(&fx).expect("the doubted lines, a third time");
    let fx = h.answer(request, &doubted, true);
    // The stores still get their questions.
    let (_, mut stores) = question(&fx).expect("then the stores");
    stores.sort();
    let mut expected: Vec<String> = layout.object_keys(&pages[6]).collect();
    expected.sort();
    assert_eq!(stores, expected);
    let (fx, failed) = fail_every_question(&mut h, fx);
    assert_eq!(failed, 3, "three questions of their own");
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    assert_eq!(h.claimed(&pages), [true; 8], "claimed unasked");
    let c = h.status().counters;
    assert_eq!((c.confirm_failures, c.unlisted_unasked), (5, 2));
}

#[test]
fn an_answer_to_a_reconcile_cut_short_by_a_disconnect_is_not_taken() {
    let (mut h, layout, pages) = setup();
    let fx = page_6_stored_after_the_point(&mut h, &layout, &pages, None);
    let (request, asked) = question(&fx).expect("the store is asked about");
    let fx = h.session.handle(h.now, Input::Disconnected);
    let _ = h.record(fx);
    let unawaited = h.status().counters.unawaited_answers;
    let fx = h.answer(request, &asked, false);
    assert_eq!(reconciled(&fx), None, "{fx:?}");
    assert_eq!(h.status().counters.unawaited_answers, unawaited + 1);
}

#[test]
fn stores_no_answer_covered_leave_the_change_waiting_and_another_list_is_asked_for() {
    let (mut h, layout, pages) = setup();
    let mut fx = page_6_stored_after_the_point(&mut h, &layout, &pages, None);
    // The master's `/batch_query_keys` keeps failing: the store is asked three times, then
    // claimed unasked.
    for _ in 0..3 {
        let (request, _) = question(&fx).expect("the store is asked about");
        let failed = h.session.handle(h.now, Input::VerifyFailed { request });
        fx = h.record(failed);
    }
    assert_eq!(reconciled(&fx), Some((0, 0)), "{fx:?}");
    assert!(h.claimed(&pages)[6], "claimed unasked");
    assert_eq!(h.status().counters.unlisted_unasked, 2);
    // So this key list does not answer the change: the watch reconciles with another.
    assert_eq!(h.health(), Health::Reconciling);
    assert!(asks_fetch(&fx), "another key list is asked for: {fx:?}");
    // That one is placed and applied like the first; it answers the change.
    let fx = answer_all_but(&mut h, &layout, &pages, &[6]);
    assert_eq!(reconciled(&fx), Some((2, 0)), "{fx:?}");
    assert!(!h.claimed(&pages)[6]);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_key_list_end_handed_again_while_the_list_is_applied_is_not_taken() {
    let (mut h, layout, pages) = setup_large();
    let _ = read_signals(&mut h, Some(1));
    let request = h.fetch_request().expect("the reconcile's fetch");
    let fx = answer_all_but(&mut h, &layout, &pages, &[0, 30_000]);
    assert_eq!(reconciled(&fx), None, "one slice at a time: {fx:?}");
    // A driver that hands the end over twice: the list is being applied, the second end
    // neither ends the reconcile early nor asks anything.
    let fx = h.session.handle(h.now, Input::SnapshotEnd { request });
    let fx = h.record(fx);
    assert_eq!(reconciled(&fx), None, "{fx:?}");
    assert!(question(&fx).is_none(), "{fx:?}");
    let (done, _) = finish_reconcile(&mut h);
    assert_eq!(done, (4, 0));
    assert_eq!(
        h.claimed(&[pages[0], pages[1], pages[30_000]]),
        [false, true, false]
    );
}

#[test]
fn a_large_list_is_restored_in_slices_and_a_removal_between_them_wins() {
    let (mut h, layout, pages) = setup_large();
    // The master stopped listing the first 10,000 pages: more than two slices' worth of
    // restores when they come back.
    let _ = read_signals(&mut h, Some(1));
    let gone: Vec<usize> = (0..10_000).collect();
    let _ = answer_all_but(&mut h, &layout, &pages, &gone);
    let (done, _) = finish_reconcile(&mut h);
    assert_eq!(done, (20_000, 0));
    // They are listed again (a stalled client resumed), without an event.
    let _ = read_signals(&mut h, Some(2));
    let fx = answer_all_but(&mut h, &layout, &pages, &[]);
    assert_eq!(reconciled(&fx), None, "one slice at a time: {fx:?}");
    // The page slots take the first 10 slices (40,000 slots); the restores follow. Once some
    // pages are back, a worker removes one that is not yet: the event is newer than the list.
    for _ in 0..11 {
        let fx = h.fire_timeout().expect("the next slice is due");
        assert_eq!(reconciled(&fx), None, "{fx:?}");
    }
    let c = h.claimed(&pages[..10_000]);
    let back = c.iter().filter(|&&c| c).count();
    assert!(
        back > 0 && back < 10_000,
        "{back} pages back before the removal"
    );
    let gone = c.iter().position(|&c| !c).expect("a page not restored yet");
    let _ = h.batch(layout.object_keys(&pages[gone]).map(removed).collect());
    let (done, slices) = finish_reconcile(&mut h);
    assert!(
        slices > 1,
        "the restores took {slices} slices after the removal"
    );
    assert_eq!(done, (0, 19_998), "every object back but page {gone}'s two");
    let c = h.claimed(&pages[..10_000]);
    let expected: Vec<bool> = (0..10_000).map(|i| i != gone).collect();
    assert_eq!(c, expected);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_publisher_clear_between_two_slices_makes_the_reconcile_fall_back_and_restores_nothing() {
    // Of every tenant (which numbers the namespaces anew) and of the default tenant.
    for tenant in [None, Some("default")] {
        let (mut h, layout, pages) = setup_large();
        let _ = read_signals(&mut h, Some(1));
        let fx = answer_all_but(&mut h, &layout, &pages, &[0]);
        assert_eq!(reconciled(&fx), None, "one slice at a time: {fx:?}");
        // Between two slices the store is cleared, then page 5 is stored again: the list is
        // older than the clear, and every page it lists but page 5 is gone.
        let mut events = vec![publisher_clear(tenant)];
        events.extend(store_page(&layout, &pages[5]));
        let _ = h.batch(events);
        let c = h.claimed(&pages);
        assert!(
            (0..pages.len()).all(|i| c[i] == (i == 5)),
            "{tenant:?}: right after the clear"
        );
        let mut forgot = Vec::new();
        for _ in 0..100 {
            let Some(fx) = h.fire_timeout() else { break };
            forgot.extend(cleared(&fx));
            assert_eq!(reconciled(&fx), None, "{tenant:?}: {fx:?}");
            let c = h.claimed(&pages);
            let claimed: Vec<usize> = (0..pages.len()).filter(|&i| c[i] && i != 5).collect();
            assert!(
                claimed.is_empty(),
                "{tenant:?}: {} pages claimed after the clear, the first {:?}",
                claimed.len(),
                &claimed[..claimed.len().min(5)]
            );
            if !forgot.is_empty() {
                break;
            }
        }
        assert_eq!(forgot, [ClearReason::StoreChanged], "{tenant:?}");
    }
}

#[test]
fn a_publisher_clear_of_another_tenant_leaves_the_reconcile_to_finish() {
    let (mut h, layout, pages) = setup_large();
    let _ = read_signals(&mut h, Some(1));
    let _ = answer_all_but(&mut h, &layout, &pages, &[0]);
    // The key list covers the default tenant only: another tenant's clear changes none of it.
    let _ = h.batch(vec![publisher_clear(Some("another"))]);
    let (done, _) = finish_reconcile(&mut h);
    assert_eq!(done, (2, 0), "page 0's two objects removed");
    let c = h.claimed(&pages);
    assert!((0..pages.len()).all(|i| c[i] == (i != 0)));
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn lines_handed_after_a_reconciles_list_ended_are_not_taken() {
    let (mut h, layout, pages) = setup_large();
    let _ = read_signals(&mut h, Some(1));
    let request = h.fetch_request().expect("a reconcile's fetch");
    let _ = answer_all_but(&mut h, &layout, &pages, &[0]);
    // A driver that breaks the input contract hands page 0's keys after the list's end, while
    // the list is applied: they are not part of it.
    let late: Vec<String> = layout.object_keys(&pages[0]).collect();
    let late: Vec<&[u8]> = late.iter().map(|k| k.as_bytes()).collect();
    let fx = h.session.handle(
        h.now,
        Input::SnapshotLines {
            request,
            lines: &late,
        },
    );
    let _ = h.record(fx);
    let (done, _) = finish_reconcile(&mut h);
    assert_eq!(done, (2, 0), "page 0's two objects removed, none restored");
    assert!(!h.claimed(&pages[..1])[0]);
}

#[test]
fn a_change_seen_while_a_key_list_is_read_asks_for_another_list() {
    let (mut h, layout, pages) = setup();
    let fx = read_signals(&mut h, Some(1));
    assert!(asks_fetch(&fx));
    let first = h.fetch_request();
    // While that list is read, a second client leaves: page 5 vanishes. The list being read
    // may be older than that.
    let fx = read_signals(&mut h, Some(2));
    assert!(!asks_fetch(&fx), "one fetch at a time: {fx:?}");
    let fx = answer_all_but(&mut h, &layout, &pages, &[2]);
    assert_eq!(reconciled(&fx), Some((2, 0)), "{fx:?}");
    assert!(
        asks_fetch(&fx),
        "a list asked after the second change: {fx:?}"
    );
    assert_ne!(h.fetch_request(), first);
    assert_eq!(
        h.health(),
        Health::Reconciling,
        "page 5 may still be claimed"
    );
    let fx = answer_all_but(&mut h, &layout, &pages, &[2, 5]);
    assert_eq!(reconciled(&fx), Some((2, 0)), "{fx:?}");
    assert_eq!(
        h.claimed(&pages),
        [true, true, false, true, true, false, true, true]
    );
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn a_reconcile_whose_point_is_never_reached_falls_back_after_its_doubted_lines_are_confirmed() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    // The list's lines next to a line that is no object key are doubted, and confirmed with
    // the master; the status point is past anything the stream will ever see (a lost tail).
    let seq = h.next_seq + 5;
    let fx = answer_with_a_foreign_line(&mut h, &layout, &pages, seq);
    let (request, keys) = question(&fx).expect("the doubted lines are confirmed");
    let answers: Vec<(&str, bool)> = keys.iter().map(|k| (k.as_str(), true)).collect();
    let fx = h.session.handle(
        h.now,
        Input::VerifyResult {
            request,
            results: &answers,
        },
    );
    let _ = h.record(fx);
    assert_eq!(h.health(), Health::Reconciling);
    let mut forgot = Vec::new();
    for _ in 0..50 {
        let Some(fx) = h.fire_timeout() else { break };
        forgot.extend(cleared(&fx));
        if !forgot.is_empty() {
            break;
        }
    }
    assert_eq!(forgot, [ClearReason::StoreChanged], "it falls back");
    assert_eq!(h.status().counters.confirm_failures, 0);
}

/// Fails every question the session asks, starting with the one in `fx`, until it asks no
/// more; returns the effects of the last failure and how many failed.
fn fail_every_question(h: &mut Harness, fx: Effects) -> (Effects, usize) {
    let (mut fx, mut failed) = (fx, 0);
    while let Some((request, _)) = question(&fx) {
        let next = h.session.handle(h.now, Input::VerifyFailed { request });
        fx = h.record(next);
        failed += 1;
        assert!(failed <= 3, "three questions at most");
    }
    (fx, failed)
}

/// Found by the simulator (seed 7304478 of the hostile preset): a reconcile whose doubted
/// lines could not be confirmed completed without them, so it removed from the index the
/// objects those lines name while the master held them, and nothing ever brought them back
/// (the index said `live` with pages missing for good). They are asked again, and when no
/// question is answered the fetch fails instead, as any fetch that fails: the reconcile falls
/// back to a resync.
#[test]
fn a_reconcile_whose_doubted_lines_are_not_confirmed_removes_nothing_the_master_lists() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    // Every page is listed; the lines next to another application's key are doubted.
    let seq = h.next_seq - 1;
    let fx = answer_with_a_foreign_line(&mut h, &layout, &pages, seq);
    let (request, doubted) = question(&fx).expect("the doubted lines are confirmed");
    assert_eq!(h.claimed(&pages), [true; 8], "hits while it confirms");
    let fx = h.session.handle(h.now, Input::VerifyFailed { request });
    let fx = h.record(fx);
    let (_, again) = question(&fx).expect("they are asked again");
    assert_eq!(again, doubted);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(h.claimed(&pages), [true; 8], "hits while it asks again");
    let (fx, failed) = fail_every_question(&mut h, fx);
    assert_eq!(failed, 2);
    assert_eq!(
        reconciled(&fx),
        None,
        "no reconcile without its lines: {fx:?}"
    );
    assert_eq!(
        cleared(&fx),
        [ClearReason::StoreChanged],
        "it falls back: {fx:?}"
    );
    assert!(asks_fetch(&fx), "and resyncs: {fx:?}");
    assert_eq!(h.health(), Health::Recovering, "said at once");
    assert_eq!(h.status().counters.confirm_failures, 3);
    // The resync restores every page the master lists.
    let listed = keys_but(&layout, &pages, &[]);
    let listed: Vec<&str> = listed.iter().map(String::as_str).collect();
    let _ = h.answer_fetch(h.next_seq - 1, &listed);
    for _ in 0..20 {
        if h.health() == Health::Live {
            break;
        }
        let _ = h.fire_timeout();
    }
    assert_eq!(h.health(), Health::Live);
    assert_eq!(h.claimed(&pages), [true; 8]);
}

/// The same when the confirmation is never answered: the timeout of its last question fails
/// the fetch.
#[test]
fn a_reconcile_whose_confirmation_times_out_removes_nothing_the_master_lists() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    let seq = h.next_seq - 1;
    let fx = answer_with_a_foreign_line(&mut h, &layout, &pages, seq);
    assert!(
        question(&fx).is_some(),
        "the doubted lines are confirmed: {fx:?}"
    );
    let mut forgot = Vec::new();
    for _ in 0..50 {
        let Some(fx) = h.fire_timeout() else { break };
        assert_eq!(
            reconciled(&fx),
            None,
            "no reconcile without its lines: {fx:?}"
        );
        forgot.extend(cleared(&fx));
        if !forgot.is_empty() {
            break;
        }
    }
    assert_eq!(forgot, [ClearReason::StoreChanged], "it falls back");
    assert_eq!(h.health(), Health::Recovering);
    assert_eq!(
        h.status().counters.confirm_failures,
        3,
        "each of the three questions timed out"
    );
}

/// A doubted line an answer left out (a request of `/batch_query_keys` that failed, an entry
/// without `ok`) is asked again, and applied once the master says it holds it: before, it was
/// not applied, and its object was missed until the next key list.
#[test]
fn a_doubted_line_an_answer_left_out_is_asked_again_and_applied() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    let seq = h.next_seq - 1;
    // Pages 0 to 3 lost their objects without an event; the list holds pages 4 to 7, and page
    // 4's first line sits next to another application's key.
    let mut lines = keys_but(&layout, &pages, &[0, 1, 2, 3]);
    lines.insert(0, "a key of another application".to_owned());
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let fx = h.answer_fetch(seq, &lines);
    let (request, doubted) = question(&fx).expect("the doubted line is confirmed");
    assert_eq!(doubted.len(), 1, "{doubted:?}");
    // The answer leaves it out.
    let fx = h.answer(request, &[], true);
    let (request, again) = question(&fx).expect("it is asked again");
    assert_eq!(again, doubted);
    let fx = h.answer(request, &again, true);
    assert_eq!(reconciled(&fx), Some((8, 0)), "{fx:?}");
    assert_eq!(
        h.claimed(&pages),
        [false, false, false, false, true, true, true, true]
    );
    assert_eq!(h.status().counters.snapshot_confirmed_lines, 1);
}

/// A key list with more doubted lines than are kept for confirmation
/// ([`hicache_index::snapshot::MAX_DOUBTED`]) cannot be confirmed whole: its fetch fails and
/// nothing is asked of `/batch_query_keys`.
#[test]
fn a_key_list_with_more_doubted_lines_than_are_kept_fails_its_fetch() {
    let (mut h, layout, pages) = setup();
    let _ = read_signals(&mut h, Some(1));
    // Each listed key between two foreign lines is doubted.
    let key = layout.object_keys(&pages[0]).next().expect("an object key");
    let mut lines = Vec::with_capacity(2 * MAX_DOUBTED + 4);
    for _ in 0..=MAX_DOUBTED {
        lines.push("a key of another application");
        lines.push(key.as_str());
    }
    lines.push("a key of another application");
    let fx = h.answer_fetch(h.next_seq - 1, &lines);
    assert_eq!(question(&fx), None, "nothing to confirm with");
    assert_eq!(reconciled(&fx), None);
    assert_eq!(cleared(&fx), [ClearReason::StoreChanged], "it falls back");
    assert_eq!(h.health(), Health::Recovering);
}

/// The same for a resync: one whose doubted lines could not be confirmed went live without
/// them, and the pages they name stayed misses while the master held them. It fails instead,
/// and fetches again after its backoff.
#[test]
fn a_resync_whose_doubted_lines_are_not_confirmed_fails_and_fetches_again() {
    let (mut h, layout, pages) = setup();
    let fx = h.session.handle(h.now, Input::Clear);
    let mut asked = asks_fetch(&h.record(fx));
    for _ in 0..20 {
        if asked {
            break;
        }
        let fx = h.fire_timeout().expect("the resync is scheduled");
        asked = asks_fetch(&fx);
    }
    assert!(asked, "a clear resyncs");
    let seq = h.next_seq - 1;
    let fx = answer_with_a_foreign_line(&mut h, &layout, &pages, seq);
    assert!(question(&fx).is_some(), "the doubted lines are confirmed");
    let (fx, questions) = fail_every_question(&mut h, fx);
    assert_eq!(questions, 3, "asked three times");
    let failed = fx.iter().any(|e| {
        matches!(
            e,
            Effect::Report(Report::ResyncFailed {
                reason: ResyncFailure::Confirm
            })
        )
    });
    assert!(failed, "the fetch fails: {fx:?}");
    assert_eq!(h.health(), Health::Recovering);
    let mut asked = false;
    for _ in 0..20 {
        let Some(fx) = h.fire_timeout() else { break };
        if asks_fetch(&fx) {
            asked = true;
            break;
        }
    }
    assert!(asked, "it fetches again");
}

/// Found by a 20,000-seed sweep (seeds 812119 and 805937): reads that failed in a row backed
/// off to eight intervals, so after the master's HTTP side recovered a change it already showed
/// went unseen for seconds (the index still `Reconciling` 5 s after the master went idle).
#[test]
fn failed_signal_reads_are_tried_again_within_two_intervals() {
    let (mut h, _, _) = setup();
    let interval = Duration::from_millis(250);
    let mut failed_at = None;
    let mut failures = 0;
    for _ in 0..200 {
        let Some(request) = fire_for_signals_read(&mut h) else {
            continue;
        };
        if let Some(at) = failed_at {
            let waited = h.now.saturating_duration_since(at);
            assert!(
                waited <= 2 * interval,
                "after {failures} failed reads the next came {waited:?} later"
            );
        }
        if failures == 8 {
            return;
        }
        let fx = h.session.handle(
            h.now,
            Input::Signals {
                request,
                signals: None,
            },
        );
        let _ = h.record(fx);
        failures += 1;
        failed_at = Some(h.now);
    }
    panic!("only {failures} reads within 200 timers");
}
