//! Verification escalates (issue 27): a round that removes a key the master dropped without an
//! event asks for a reconcile with the master's key list, since others are gone too (the index
//! keeps answering, `reconciling`, and pages still listed stay hits), at most once per
//! `VerifyConfig::escalate_every`; within it, a round removes only what it sampled and counts
//! the escalation it held back, which the first round due once the limit has passed does.
//! Without resync, a round only removes what it sampled.

use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, Effects, Health, Layout, Lookup, PageHash, Report, ResyncConfig,
    VerifyConfig, VerifyRequest,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{cleared, config, mha, page_hashes, store_page, stored, tokens, Harness};

const ESCALATE_EVERY: Duration = Duration::from_secs(30);

/// Eight pages of two objects (16 keys), rounds every second that check every key, and resync
/// on or off (without status checks, which these tests do not answer).
fn setup(resync: bool) -> (Harness, Layout, Vec<u32>, Vec<PageHash>) {
    let layout = mha(1);
    let cfg = Config {
        resync: resync.then_some(ResyncConfig {
            status_check: None,
            ..ResyncConfig::default()
        }),
        verify: Some(VerifyConfig {
            interval: Duration::from_secs(1),
            sample: 100,
            escalate_every: ESCALATE_EVERY,
            ..VerifyConfig::default()
        }),
        ..config(layout.clone())
    };
    let mut h = Harness::placed(cfg);
    let t = tokens(8);
    let pages = page_hashes(&layout, &t);
    for page in &pages {
        let _ = h.batch(store_page(&layout, page));
    }
    assert_eq!((h.prefix(&t), h.health()), (8, Health::Live));
    (h, layout, t, pages)
}

/// Fires timers until verification asks about keys; returns the round's request and keys.
fn next_round(h: &mut Harness) -> (VerifyRequest, Vec<String>) {
    for _ in 0..10 {
        let fx = h.fire_timeout().expect("verification is scheduled");
        if let Some(round) = fx.iter().find_map(|e| match e {
            Effect::Command(Command::VerifyKeys { request, keys }) => {
                Some((*request, keys.clone()))
            }
            _ => None,
        }) {
            return round;
        }
    }
    panic!("no verification round within 10 timers");
}

/// Runs the next round: the master holds every key asked about but those in `gone`.
fn round_with_gone(h: &mut Harness, gone: &[&str]) -> Effects {
    let (request, keys) = next_round(h);
    let answers: Vec<(&str, bool)> = keys
        .iter()
        .map(|k| (k.as_str(), !gone.contains(&k.as_str())))
        .collect();
    let fx = h.session.handle_verify_result(h.now, request, answers);
    h.record(fx)
}

/// The first object key of `page`.
fn first_key(layout: &Layout, page: &PageHash) -> String {
    layout.object_keys(page).next().expect("a page has objects")
}

/// Pages `i..i + 1` claimed (1) or not (0).
fn claims(h: &Harness, pages: &[PageHash], i: usize) -> usize {
    h.session
        .query(&Lookup::page_hashes(&pages[i..i + 1]))
        .expect("the default layout answers")
        .prefix_pages
}

fn asks_fetch(fx: &Effects) -> bool {
    fx.iter()
        .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. })))
}

/// Answers the reconcile an escalation asked for with every key the master holds: all of `pages`
/// but `gone`.
fn answer_resync(h: &mut Harness, layout: &Layout, pages: &[PageHash], gone: &[&str]) {
    let keys: Vec<String> = pages
        .iter()
        .flat_map(|p| layout.object_keys(p))
        .filter(|k| !gone.contains(&k.as_str()))
        .collect();
    let lines: Vec<&str> = keys.iter().map(String::as_str).collect();
    let seq = h.next_seq - 1;
    let _ = h.answer_fetch(seq, &lines);
    assert_eq!(h.health(), Health::Live);
}

#[test]
fn the_first_stale_key_of_a_round_reconciles_every_page_with_the_key_list() {
    let (mut h, layout, t, pages) = setup(true);
    // A client left: one object of page 3 went without an event (1 key of 16, under the old
    // 10 % threshold). Every other page is as doubtful: read the key list and follow it.
    let gone = first_key(&layout, &pages[3]);
    let fx = round_with_gone(&mut h, &[&gone]);
    assert!(
        fx.contains(&Effect::Report(Report::StaleFound {
            keys: 1,
            checked: 16
        })),
        "{fx:?}"
    );
    assert_eq!(cleared(&fx), [], "a reconcile forgets nothing: {fx:?}");
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. }))),
        "a reconcile: {fx:?}"
    );
    assert_eq!((h.prefix(&t), h.health()), (3, Health::Reconciling));
    let c = h.status().counters;
    assert_eq!((c.stale_escalations, c.stale_escalations_held), (1, 0));
    // The key list brings back what the master holds, and only that.
    answer_resync(&mut h, &layout, &pages, &[&gone]);
    assert_eq!(h.prefix(&t), 3);
    assert_eq!(claims(&h, &pages, 4), 1);
}

#[test]
fn a_stale_round_within_escalate_every_removes_its_sample_only_and_counts_the_held_escalation() {
    let (mut h, layout, t, pages) = setup(true);
    let first = first_key(&layout, &pages[3]);
    let fx = round_with_gone(&mut h, &[&first]);
    assert!(asks_fetch(&fx), "{fx:?}");
    let escalated_at = h.now;
    answer_resync(&mut h, &layout, &pages, &[&first]);
    // A second client left a second later: page 5 lost an object. The last escalation was a
    // second ago: the round removes what it found, nothing else, and says what it held back.
    let second = first_key(&layout, &pages[5]);
    let fx = round_with_gone(&mut h, &[&first, &second]);
    assert!(h.now < escalated_at + ESCALATE_EVERY);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. }))),
        "no resync: {fx:?}"
    );
    assert!(
        fx.contains(&Effect::Report(Report::StaleFound {
            keys: 1,
            checked: 15
        })),
        "{fx:?}"
    );
    assert!(
        fx.contains(&Effect::Report(Report::EscalationHeld {
            until: escalated_at + ESCALATE_EVERY
        })),
        "{fx:?}"
    );
    assert_eq!((claims(&h, &pages, 5), claims(&h, &pages, 4)), (0, 1));
    assert_eq!((h.prefix(&t), h.health()), (3, Health::Live));
    let c = h.status().counters;
    assert_eq!(
        (
            c.stale_escalations,
            c.stale_escalations_held,
            c.stale_keys_found
        ),
        (1, 1, 2)
    );
}

#[test]
fn once_escalate_every_has_passed_a_stale_round_escalates_again() {
    let (mut h, layout, _, pages) = setup(true);
    let k3 = first_key(&layout, &pages[3]);
    let _ = round_with_gone(&mut h, &[&k3]);
    let escalated_at = h.now;
    answer_resync(&mut h, &layout, &pages, &[&k3]);
    // At the limit: the next stale key escalates again.
    h.now = escalated_at + ESCALATE_EVERY;
    let k5 = first_key(&layout, &pages[5]);
    let fx = round_with_gone(&mut h, &[&k3, &k5]);
    assert_eq!(h.now, escalated_at + ESCALATE_EVERY);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert!(asks_fetch(&fx), "a reconcile: {fx:?}");
    assert_eq!(claims(&h, &pages, 4), 1, "still listed pages stay hits");
    let c = h.status().counters;
    assert_eq!((c.stale_escalations, c.stale_escalations_held), (2, 0));
    // The limit runs from this escalation now.
    answer_resync(&mut h, &layout, &pages, &[&k3, &k5]);
    let k6 = first_key(&layout, &pages[6]);
    let fx = round_with_gone(&mut h, &[&k3, &k5, &k6]);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert_eq!(h.status().counters.stale_escalations_held, 1);
}

#[test]
fn a_held_back_escalation_happens_with_the_first_round_due_once_escalate_every_has_passed() {
    let (mut h, layout, _, pages) = setup(true);
    let k3 = first_key(&layout, &pages[3]);
    let _ = round_with_gone(&mut h, &[&k3]);
    let escalated_at = h.now;
    answer_resync(&mut h, &layout, &pages, &[&k3]);
    let k5 = first_key(&layout, &pages[5]);
    let fx = round_with_gone(&mut h, &[&k3, &k5]);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    // Before the limit, rounds sample (this one finds nothing new).
    h.now = escalated_at + (ESCALATE_EVERY - Duration::from_secs(1));
    let fx = round_with_gone(&mut h, &[&k3, &k5]);
    assert_eq!(
        h.now,
        escalated_at + (ESCALATE_EVERY - Duration::from_secs(1))
    );
    assert_eq!(cleared(&fx), [], "{fx:?}");
    // Then page 4 goes silently too, and no round finds it: it is claimed until the limit.
    let k4 = first_key(&layout, &pages[4]);
    assert_eq!(claims(&h, &pages, 4), 1);
    // The first round due at the limit reconciles instead of sampling.
    let fx = h.fire_timeout().expect("verification is scheduled");
    assert_eq!(h.now, escalated_at + ESCALATE_EVERY);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert!(asks_fetch(&fx), "a reconcile: {fx:?}");
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Command(Command::VerifyKeys { .. }))),
        "{fx:?}"
    );
    // Claimed, and said to be doubtful, until the key list is applied; then gone though no
    // round sampled it.
    assert_eq!(
        (claims(&h, &pages, 4), h.health()),
        (1, Health::Reconciling)
    );
    answer_resync(&mut h, &layout, &pages, &[&k3, &k4, &k5]);
    assert_eq!(claims(&h, &pages, 4), 0);
    let c = h.status().counters;
    assert_eq!((c.stale_escalations, c.stale_escalations_held), (2, 1));
}

#[test]
fn a_clear_meanwhile_does_what_a_held_back_escalation_would() {
    let (mut h, layout, _, pages) = setup(true);
    let k3 = first_key(&layout, &pages[3]);
    let _ = round_with_gone(&mut h, &[&k3]);
    let escalated_at = h.now;
    answer_resync(&mut h, &layout, &pages, &[&k3]);
    let k5 = first_key(&layout, &pages[5]);
    let _ = round_with_gone(&mut h, &[&k3, &k5]);
    assert_eq!(h.status().counters.stale_escalations_held, 1);
    // A clear (here the driver's) read the key list again: nothing is left to escalate for.
    let fx = h.session.clear(h.now);
    let _ = h.record(fx);
    answer_resync(&mut h, &layout, &pages, &[&k3, &k5]);
    h.now = escalated_at + ESCALATE_EVERY;
    let fx = round_with_gone(&mut h, &[&k3, &k5]);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert_eq!(h.status().counters.stale_escalations, 1);
}

#[test]
fn without_resync_a_stale_round_removes_its_sample_and_forgets_nothing() {
    let (mut h, layout, _, pages) = setup(false);
    // Every key of pages 3 and 5 gone (4 of 16): without resync, a forget could only miss
    // until the stream stored everything again, so only what was found leaves.
    let gone: Vec<String> = [3, 5]
        .iter()
        .flat_map(|&i| layout.object_keys(&pages[i]))
        .collect();
    let gone: Vec<&str> = gone.iter().map(String::as_str).collect();
    for _ in 0..2 {
        let fx = round_with_gone(&mut h, &gone);
        assert_eq!(cleared(&fx), [], "{fx:?}");
        assert!(
            !fx.iter()
                .any(|e| matches!(e, Effect::Report(Report::EscalationHeld { .. }))),
            "nothing to hold back: {fx:?}"
        );
    }
    assert_eq!((claims(&h, &pages, 3), claims(&h, &pages, 5)), (0, 0));
    assert_eq!((claims(&h, &pages, 4), claims(&h, &pages, 7)), (1, 1));
    let c = h.status().counters;
    assert_eq!(
        (
            c.stale_escalations,
            c.stale_escalations_held,
            c.stale_keys_found
        ),
        (0, 0, 4)
    );
}

#[test]
fn a_key_absent_at_the_master_but_stored_again_since_the_sample_does_not_escalate() {
    let (mut h, layout, t, pages) = setup(true);
    let (request, keys) = next_round(&mut h);
    // The master's answer says page 3's first object is absent, but a store of it came after
    // the keys were sampled: the event wins, nothing was stale, nothing escalates.
    let key = first_key(&layout, &pages[3]);
    let _ = h.batch(vec![stored(key.clone())]);
    let answers: Vec<(&str, bool)> = keys.iter().map(|k| (k.as_str(), *k != key)).collect();
    let fx = h.session.handle_verify_result(h.now, request, answers);
    assert_eq!(cleared(&fx), [], "{fx:?}");
    assert_eq!(h.prefix(&t), 8);
    let c = h.status().counters;
    assert_eq!(
        (
            c.stale_escalations,
            c.stale_escalations_held,
            c.stale_keys_found
        ),
        (0, 0, 0)
    );
}
