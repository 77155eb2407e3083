//! Unit tests of the oracle: which claims it allows, and which misses it excuses.
use super::*;
use crate::model::Key;

const A: usize = 0;
const B: usize = 1;

fn at(ms: u64) -> Instant {
    Instant::from_millis(ms)
}

/// A one-event message of run `run` carrying the change at `pos`.
fn message(run: u8, seq: u64, id: u64, pos: u64) -> Message {
    Message {
        run,
        seq,
        first_id: id,
        events: vec![(true, Key::Page(0))],
        stamp_ms: 0,
        readable: true,
        pos,
    }
}

#[test]
fn a_claim_after_the_removal_was_handed_is_a_false_hit() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    assert_eq!(o.judge(at(0), A, at(0)), Judgement::Fine);
    // Removed, its batch not handed yet (held by the network): the session cannot know.
    let removed = o.page(A, false, 1, 2, false);
    assert_eq!(o.judge(at(0), A, at(0)), Judgement::Fine);
    o.handed(at(1), &message(1, 2, 2, removed));
    assert_eq!(o.judge(at(1), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_dropped_removal_excuses_the_claim_until_a_later_message_reveals_it() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    let _ = o.page(A, false, 1, 2, true);
    assert_eq!(o.judge(at(0), A, at(0)), Judgement::Fine);
    let other = o.page(B, true, 1, 3, false);
    o.handed(at(1), &message(1, 3, 2, other));
    assert_eq!(o.judge(at(1), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_status_covering_a_dropped_batch_reveals_it() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    let _ = o.page(A, false, 1, 2, true);
    o.status_handed(at(1), 1, 1, 1);
    assert_eq!(
        o.judge(at(1), A, at(0)),
        Judgement::Fine,
        "seq 2 not covered"
    );
    o.status_handed(at(2), 1, 2, 1);
    assert_eq!(o.judge(at(2), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_reorder_window_excuses_a_handed_removal_for_its_delay_only() {
    let mut o = Oracle::new(Duration::from_millis(50));
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    let removed = o.page(A, false, 1, 2, false);
    o.handed(at(10), &message(1, 2, 2, removed));
    assert_eq!(o.judge(at(59), A, at(0)), Judgement::Fine);
    assert_eq!(o.judge(at(60), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_restart_whose_first_message_continues_the_old_run_exactly_is_excused_for_a_bound() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    o.restart(2);
    // The new run's seq 1 was lost after publishing: its seq 2 starts at id 2.
    let other = o.page(B, true, 2, 2, false);
    o.handed(at(100), &message(2, 2, 2, other));
    assert_eq!(
        o.judge(at(100) + STALE_BOUND, A, at(0)),
        Judgement::Stale { age: STALE_BOUND }
    );
    // A later message of the old run shows the session it was fooled.
    o.handed(at(200), &message(1, 3, 3, stored));
    assert_eq!(o.judge(at(200), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_restart_whose_first_message_does_not_continue_the_old_run_is_no_excuse() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    o.restart(2);
    let other = o.page(B, true, 2, 1, false);
    o.handed(at(100), &message(2, 1, 1, other));
    assert_eq!(o.judge(at(100), A, at(0)), Judgement::FalseHit);
}

#[test]
fn a_restart_continuing_the_old_runs_status_is_excused_from_when_both_were_handed() {
    let mut o = Oracle::new(Duration::ZERO);
    // A was stored, its batch dropped (seq 1, no id); the key list read after shows it.
    let _ = o.page(A, true, 1, 1, true);
    o.restart(2);
    let other = o.page(B, true, 2, 2, false);
    o.handed(at(100), &message(2, 2, 1, other));
    assert_eq!(o.judge(at(100), A, at(0)), Judgement::FalseHit);
    // The status read before the restart, (1, 0), is handed with the key list.
    o.status_handed(at(300), 1, 1, 0);
    assert_eq!(
        o.judge(at(400), A, at(0)),
        Judgement::Stale {
            age: Duration::from_millis(100)
        }
    );
}

#[test]
fn the_old_runs_loss_after_the_known_position_is_hidden_by_an_invisible_restart() {
    let mut o = Oracle::new(Duration::ZERO);
    // Status (0, 0) handed; A stored after it (seq 1, dropped), listed by the key list.
    o.status_handed(at(0), 1, 0, 0);
    let _ = o.page(A, true, 1, 1, true);
    // The master restarts; the new run's seq 1 (id 1) continues (0, 0) exactly.
    o.restart(2);
    let other = o.page(B, true, 2, 1, false);
    o.handed(at(100), &message(2, 1, 1, other));
    assert_eq!(
        o.judge(at(100), A, at(0)),
        Judgement::Stale {
            age: Duration::ZERO
        }
    );
    assert_eq!(o.judge(at(100), B, at(0)), Judgement::Fine);
}

#[test]
fn the_excuse_covers_no_claim_made_after_the_restart_became_invisible() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    o.restart(2);
    let other = o.page(B, true, 2, 2, false);
    o.handed(at(100), &message(2, 2, 2, other));
    assert_eq!(
        o.judge(at(100), A, at(100)),
        Judgement::Stale {
            age: Duration::ZERO
        }
    );
    assert_eq!(o.judge(at(200), A, at(150)), Judgement::FalseHit);
}

#[test]
fn the_excuse_covers_a_claim_that_began_as_the_old_runs_key_list_naming_the_page_was_handed() {
    let mut o = Oracle::new(Duration::ZERO);
    // Status (0, 0) read of run 1; A stored (seq 1, dropped); the key list read shows A.
    let _ = o.page(A, true, 1, 1, true);
    o.restart(2);
    let other = o.page(B, true, 2, 1, false);
    o.handed(at(0), &message(2, 1, 1, other));
    // The status is handed with the list's first half: run 2's seq 1 continues it exactly.
    o.status_handed(at(10), 1, 0, 0);
    // A claim made later on nothing the old run answered rests on something else.
    assert_eq!(o.judge(at(60), A, at(60)), Judgement::FalseHit);
    let before = o.clone();
    // The list run 1 answered, naming A, handed whole at 60 ms: A claimed from then on.
    o.list_handed(at(60), 1, [true, false, false]);
    let stale = Judgement::Stale {
        age: Duration::from_millis(50),
    };
    assert_eq!(o.judge(at(60), A, at(60)), stale);
    // Claimed again after a break (the master said no in between): no excuse.
    assert_eq!(o.judge(at(70), A, at(70)), Judgement::FalseHit);
    // A list that does not name the page, or the new run's own list: no excuse.
    for (run, named) in [(1, [false, true, false]), (2, [true, false, false])] {
        let mut o = before.clone();
        o.list_handed(at(60), run, named);
        assert_eq!(o.judge(at(60), A, at(60)), Judgement::FalseHit);
    }
}

#[test]
fn the_excuse_covers_nothing_the_new_run_stored_and_lost_itself() {
    let mut o = Oracle::new(Duration::ZERO);
    // Run 1 published nothing: status (0, 0). The new run's seq 1 continues it exactly.
    o.status_handed(at(0), 1, 0, 0);
    o.restart(2);
    let stored = o.page(A, true, 2, 1, false);
    o.handed(at(10), &message(2, 1, 1, stored));
    // The new run removes A; its batch is dropped; its status (2, 1) covers the loss.
    let _ = o.page(A, false, 2, 2, true);
    o.status_handed(at(20), 2, 2, 1);
    assert_eq!(o.judge(at(20), A, at(10)), Judgement::FalseHit);
}

#[test]
fn the_excuse_ends_when_a_change_of_the_page_since_the_restart_reaches_the_session() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    o.restart(2);
    let again = o.page(A, true, 2, 2, false);
    o.handed(at(100), &message(2, 2, 2, again));
    assert_eq!(o.judge(at(100), A, at(0)), Judgement::Fine);
    let removed = o.page(A, false, 2, 3, false);
    o.handed(at(200), &message(2, 3, 3, removed));
    assert_eq!(o.judge(at(200), A, at(0)), Judgement::FalseHit);
}

#[test]
fn an_older_runs_late_message_continuing_the_newer_runs_status_is_a_masquerade() {
    let mut o = Oracle::new(Duration::ZERO);
    // Run 1 stores A in its seq 1 (id 1), delayed by the network, and removes it in its
    // seq 2 (id 2), handed; the master restarts.
    let stored = o.page(A, true, 1, 1, false);
    let removed = o.page(A, false, 1, 2, false);
    o.handed(at(50), &message(1, 2, 2, removed));
    o.restart(2);
    // Run 2's status (0, 0) is handed, then run 1's late seq 1: it continues (0, 0).
    o.status_handed(at(100), 2, 0, 0);
    o.handed(at(200), &message(1, 1, 1, stored));
    assert_eq!(
        o.judge(at(300), A, at(200)),
        Judgement::Stale {
            age: Duration::from_millis(100)
        }
    );
    // A claim older than the masquerade rests on something else.
    assert_eq!(o.judge(at(300), A, at(150)), Judgement::FalseHit);
}

#[test]
fn a_message_held_for_a_newer_runs_status_it_continues_is_a_masquerade() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    let removed = o.page(A, false, 1, 2, false);
    o.handed(at(50), &message(1, 2, 2, removed));
    o.restart(2);
    // Run 1's late seq 1 is handed first (held for a fetch), then run 2's status (0, 0).
    o.handed(at(100), &message(1, 1, 1, stored));
    assert_eq!(o.judge(at(150), A, at(150)), Judgement::FalseHit);
    o.status_handed(at(200), 2, 0, 0);
    assert_eq!(
        o.judge(at(200), A, at(200)),
        Judgement::Stale {
            age: Duration::ZERO
        }
    );
}

#[test]
fn a_dropped_tail_nothing_revealed_is_unknowable_and_a_later_message_reveals_it() {
    let mut o = Oracle::new(Duration::ZERO);
    let stored = o.page(A, true, 1, 1, false);
    o.handed(at(0), &message(1, 1, 1, stored));
    let _ = o.page(A, false, 1, 2, true);
    assert!(o.unknowable(A));
    assert!(!o.unknowable(B));
    let other = o.page(B, true, 1, 3, false);
    o.handed(at(1), &message(1, 3, 2, other));
    assert!(!o.unknowable(A));
}

#[test]
fn a_miss_hidden_by_an_invisible_restart_is_unknowable_a_plain_dropped_tail_is_not() {
    // Run 1: page A stored by a dropped batch (seq 1); the session learns status (1, 0).
    let mut o = Oracle::new(Duration::ZERO);
    let _ = o.page(A, true, 1, 1, true);
    o.status_handed(at(0), 1, 1, 0);
    // With counters, a dropped tail of the run followed is known (the status check tells).
    assert!(!o.missing_unknowable(A, Some((1, 1, 0))));
    // Run 2 restarts unseen: B stored by a dropped batch (seq 1), then A by seq 2 (id 1),
    // which continues run 1's status point exactly: B's batch reads as run 1's.
    let _ = o.restart(2);
    let _ = o.page(B, true, 2, 1, true);
    let a = o.page(A, true, 2, 2, false);
    o.handed(at(1), &message(2, 2, 1, a));
    assert!(o.missing_unknowable(B, Some((2, 2, 1))));
    assert!(
        !o.missing_unknowable(A, Some((2, 2, 1))),
        "A's batch was handed"
    );
}

#[test]
fn a_restart_whose_status_equals_the_known_point_hides_its_dropped_batches() {
    let mut o = Oracle::new(Duration::ZERO);
    let _ = o.page(A, true, 1, 1, true);
    let _ = o.page(A, false, 1, 2, true);
    o.status_handed(at(0), 1, 2, 0);
    let _ = o.restart(2);
    let _ = o.page(A, true, 2, 1, true);
    // Run 2's status (2, 0) is run 1's point: no status check can tell.
    assert!(o.missing_unknowable(A, Some((2, 2, 0))));
    // Had run 2's status differed, the check tells another run: A must be found.
    assert!(!o.missing_unknowable(A, Some((2, 3, 0))));
}
