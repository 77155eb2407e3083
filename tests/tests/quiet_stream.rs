//! The check of a quiet stream against the master's status (rule R11 of the core's sequence
//! module): what no batch can reveal, because no batch comes, the master's counters do.

use std::time::Duration;

use hicache_index::{ClearReason, Command, Effect, Effects, Health, ResyncConfig};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::*;

const CHECK: Duration = Duration::from_secs(1);

/// A resyncing session, placed, that applied one batch storing a page of `tokens(1)`.
fn live_with_a_page() -> (Harness, Vec<u32>) {
    let layout = mha(1);
    let mut cfg = config(layout.clone());
    cfg.resync = Some(ResyncConfig {
        status_check: Some(CHECK),
        ..ResyncConfig::default()
    });
    let mut h = Harness::placed(cfg);
    let t = tokens(1);
    let page = page_hashes(&layout, &t)[0];
    let _ = h.batch(store_page(&layout, &page));
    assert_eq!(h.prefix(&t), 1);
    assert_eq!(h.health(), Health::Live);
    (h, t)
}

fn asks_status(fx: &Effects) -> bool {
    fx.iter()
        .any(|e| matches!(e, Effect::Command(Command::ReadStatus { .. })))
}

fn fetches(fx: &Effects) -> bool {
    fx.iter()
        .any(|e| matches!(e, Effect::Command(Command::FetchSnapshot { .. })))
}

/// Moves time to the next check and asks it.
fn quiet_until_the_check(h: &mut Harness) {
    let fx = h.fire_timeout().expect("a check is due");
    assert!(
        asks_status(&fx),
        "the quiet stream's status is read: {fx:?}"
    );
}

#[test]
fn an_idle_master_restarted_unseen_is_forgotten_at_its_status_check() {
    let (mut h, t) = live_with_a_page();
    // The master restarts; no transport saw it, and the new run publishes nothing: its
    // counters start again from zero.
    quiet_until_the_check(&mut h);
    let fx = h.answer_status(0, 0);
    assert_eq!(cleared(&fx), vec![ClearReason::Restart]);
    assert!(fetches(&fx), "the key list is read again: {fx:?}");
    assert_eq!(h.prefix(&t), 0, "the old run's page is no longer claimed");
    assert_eq!(h.status().counters.status_disagreed, 1);
}

#[test]
fn a_tail_lost_before_an_idle_master_is_found_at_its_status_check() {
    let (mut h, _) = live_with_a_page();
    // Batch 2 (one event) was published and lost; then the master went idle.
    quiet_until_the_check(&mut h);
    let fx = h.answer_status(2, 3);
    assert!(cleared(&fx).is_empty(), "batch 2 may be on its way: {fx:?}");
    let fx = h.fire_timeout().expect("the wait for batch 2 ends");
    assert_eq!(cleared(&fx), vec![ClearReason::Gap]);
    assert!(fetches(&fx), "the key list is read again: {fx:?}");
    assert_eq!(h.status().counters.gaps, 1);
}

#[test]
fn a_status_at_the_last_batch_keeps_the_index_live() {
    let (mut h, t) = live_with_a_page();
    quiet_until_the_check(&mut h);
    let fx = h.answer_status(1, 2);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
    // And the next check comes one interval later.
    let before = h.now;
    quiet_until_the_check(&mut h);
    assert_eq!(h.now, before + CHECK);
}

#[test]
fn a_status_ahead_that_the_stream_catches_up_with_keeps_the_index() {
    let (mut h, t) = live_with_a_page();
    quiet_until_the_check(&mut h);
    let _ = h.answer_status(2, 3);
    h.advance(100);
    let fx = h.batch(vec![stored("other_key")]);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    h.advance(1_000);
    let fx = h.session.handle_timeout(h.now);
    assert!(cleared(&fx).is_empty(), "{fx:?}");
    assert_eq!(h.prefix(&t), 1);
}
