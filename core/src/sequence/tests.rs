//! Unit tests of the sequence tracker.
use core::time::Duration;

use super::*;

fn fp(n: u64) -> Fingerprint {
    Fingerprint {
        timestamp: n,
        millis: Some(n),
        events: 1,
        first_event_id: Some(n),
        last_event_id: Some(n),
        unreadable: false,
    }
}

fn apply(t: &mut SequenceTracker<()>, seq: u64) -> Verdict {
    let v = t.observe(Instant::ZERO, Seq(seq), fp(seq));
    if matches!(
        v,
        Verdict::Apply | Verdict::Gap { .. } | Verdict::Restart { .. }
    ) {
        t.applied(Seq(seq), fp(seq));
    }
    v
}

#[test]
fn any_first_sequence_is_a_baseline() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    assert_eq!(apply(&mut t, 9_000), Verdict::Apply);
    assert_eq!(apply(&mut t, 9_001), Verdict::Apply);
}

#[test]
fn same_sequence_same_fingerprint_is_a_duplicate() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 1);
    assert_eq!(t.observe(Instant::ZERO, Seq(1), fp(1)), Verdict::Duplicate);
}

#[test]
fn same_sequence_other_fingerprint_is_a_restart() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 1);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(1), fp(77)),
        Verdict::Restart { last: Seq(1) }
    );
}

#[test]
fn jump_forward_is_a_gap_counting_the_missing() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 1);
    assert_eq!(
        apply(&mut t, 5),
        Verdict::Gap {
            expected: Seq(2),
            missing: 3
        }
    );
    assert_eq!(apply(&mut t, 6), Verdict::Apply);
}

#[test]
fn next_sequence_with_event_ids_starting_over_is_a_restart() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 7);
    let restarted = Fingerprint {
        timestamp: 1,
        millis: Some(1),
        events: 1,
        first_event_id: Some(1),
        last_event_id: Some(1),
        unreadable: false,
    };
    assert_eq!(
        t.observe(Instant::ZERO, Seq(8), restarted),
        Verdict::Restart { last: Seq(7) }
    );
    let continued = Fingerprint {
        timestamp: 8,
        millis: Some(8),
        events: 1,
        first_event_id: Some(8),
        last_event_id: Some(8),
        unreadable: false,
    };
    assert_eq!(t.observe(Instant::ZERO, Seq(8), continued), Verdict::Apply);
}

#[test]
fn jump_backward_is_a_restart() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 10);
    assert_eq!(apply(&mut t, 1), Verdict::Restart { last: Seq(10) });
    assert_eq!(apply(&mut t, 2), Verdict::Apply);
}

#[test]
fn reset_makes_the_next_batch_a_silent_baseline() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 1);
    t.reset();
    assert_eq!(apply(&mut t, 50), Verdict::Apply);
}

#[test]
fn sequence_at_u64_max_does_not_wrap_into_a_continuation() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, u64::MAX);
    assert_eq!(
        apply(&mut t, 0),
        Verdict::Restart {
            last: Seq(u64::MAX)
        }
    );
}

#[test]
fn reorder_within_window_applies_in_order() {
    let cfg = ReorderConfig {
        max_held: 4,
        max_delay: None,
    };
    let mut t = SequenceTracker::<u64>::new(cfg);
    apply_u(&mut t, 1);
    assert_eq!(t.observe(Instant::ZERO, Seq(3), fp(3)), Verdict::Hold);
    assert!(t.hold(Instant::ZERO, Seq(3), fp(3), 3).is_none());
    assert_eq!(t.observe(Instant::ZERO, Seq(2), fp(2)), Verdict::Apply);
    t.applied(Seq(2), fp(2));
    assert_eq!(t.pop_ready(), Some((Seq(3), 3, Verdict::Apply)));
    t.applied(Seq(3), fp(3));
    assert_eq!(t.pop_ready(), None);
}

#[test]
fn late_copy_within_window_is_skipped() {
    let cfg = ReorderConfig {
        max_held: 4,
        max_delay: None,
    };
    let mut t = SequenceTracker::<u64>::new(cfg);
    for s in 1..=3 {
        apply_u(&mut t, s);
    }
    assert_eq!(t.observe(Instant::ZERO, Seq(2), fp(2)), Verdict::Late);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(2), fp(99)),
        Verdict::Restart { last: Seq(3) }
    );
}

#[test]
fn window_overflow_declares_loss() {
    let cfg = ReorderConfig {
        max_held: 2,
        max_delay: None,
    };
    let mut t = SequenceTracker::<u64>::new(cfg);
    apply_u(&mut t, 1);
    for s in [3, 4] {
        assert_eq!(t.observe(Instant::ZERO, Seq(s), fp(s)), Verdict::Hold);
        assert!(t.hold(Instant::ZERO, Seq(s), fp(s), s).is_none());
    }
    assert_eq!(t.observe(Instant::ZERO, Seq(5), fp(5)), Verdict::Hold);
    let loss = t.hold(Instant::ZERO, Seq(5), fp(5), 5);
    assert_eq!(
        loss,
        Some(Loss {
            expected: Seq(2),
            resumed: Seq(3)
        })
    );
    let order: alloc::vec::Vec<u64> = core::iter::from_fn(|| {
        let (seq, item, _) = t.pop_ready()?;
        t.applied(seq, fp(seq.0));
        Some(item)
    })
    .collect();
    assert_eq!(order, [3, 4, 5]);
}

#[test]
fn held_batch_deadline_declares_loss_and_moves_forward() {
    let delay = Duration::from_millis(10);
    let cfg = ReorderConfig {
        max_held: 8,
        max_delay: Some(delay),
    };
    let mut t = SequenceTracker::<u64>::new(cfg);
    apply_u(&mut t, 1);
    let at = Instant::from_millis(100);
    assert_eq!(t.observe(Instant::ZERO, Seq(3), fp(3)), Verdict::Hold);
    assert!(t.hold(at, Seq(3), fp(3), 3).is_none());
    assert_eq!(t.poll_timeout(), Some(at + delay));
    assert_eq!(t.handle_timeout(at), None, "an early timeout is a no-op");
    assert!(t.handle_timeout(at + delay).is_some());
    assert_eq!(t.pop_ready(), Some((Seq(3), 3, Verdict::Apply)));
    t.applied(Seq(3), fp(3));
    assert_eq!(t.poll_timeout(), None);
}

fn apply_u(t: &mut SequenceTracker<u64>, seq: u64) {
    let v = t.observe(Instant::ZERO, Seq(seq), fp(seq));
    assert!(matches!(
        v,
        Verdict::Apply | Verdict::Gap { .. } | Verdict::Restart { .. }
    ));
    t.applied(Seq(seq), fp(seq));
}

fn reordering() -> ReorderConfig {
    ReorderConfig {
        max_held: 8,
        max_delay: Some(Duration::from_millis(10)),
    }
}

#[test]
fn unreadable_batch_ahead_of_a_hole_is_held_and_released_after_the_hole() {
    let mut t = SequenceTracker::<u64>::new(reordering());
    apply_u(&mut t, 4);
    assert_eq!(t.observe_unreadable(Instant::ZERO, Seq(7)), Verdict::Hold);
    assert!(t
        .hold(Instant::ZERO, Seq(7), Fingerprint::unreadable(), 7)
        .is_none());
    assert_eq!(
        t.observe_unreadable(Instant::ZERO, Seq(7)),
        Verdict::Duplicate
    );
    for seq in [5, 6] {
        assert_eq!(t.observe(Instant::ZERO, Seq(seq), fp(seq)), Verdict::Apply);
        t.applied(Seq(seq), fp(seq));
    }
    assert_eq!(t.pop_ready(), Some((Seq(7), 7, Verdict::Unreadable)));
    assert_eq!(t.last_applied(), None, "the stream begins again after it");
    assert_eq!(t.observe(Instant::ZERO, Seq(8), fp(8)), Verdict::Apply);
}

#[test]
fn batches_at_or_before_an_unreadable_one_never_apply_with_reordering() {
    let mut t = SequenceTracker::<u64>::new(reordering());
    apply_u(&mut t, 4);
    assert_eq!(
        t.observe_unreadable(Instant::ZERO, Seq(5)),
        Verdict::Unreadable
    );
    // A late batch of the same run, stamped and numbered after the last one applied.
    assert_eq!(t.observe(Instant::ZERO, Seq(5), fp(5)), Verdict::Stale);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(4), fp(4)),
        Verdict::Late,
        "a copy of one applied"
    );
    // The window declares the hole before 7 lost: the stream still runs past 5.
    assert_eq!(t.observe(Instant::ZERO, Seq(7), fp(7)), Verdict::Hold);
    assert!(t.hold(Instant::ZERO, Seq(7), fp(7), 7).is_none());
    assert!(t.handle_timeout(Instant::from_millis(10)).is_some());
    assert_eq!(t.observe(Instant::ZERO, Seq(5), fp(5)), Verdict::Stale);
    assert_eq!(t.pop_ready(), Some((Seq(7), 7, Verdict::Apply)));
    t.applied(Seq(7), fp(7));
    assert_eq!(t.observe(Instant::ZERO, Seq(8), fp(8)), Verdict::Apply);
}

#[test]
fn an_unreadable_first_batch_fences_the_sequences_before_it() {
    let mut t = SequenceTracker::<u64>::new(reordering());
    assert_eq!(
        t.observe_unreadable(Instant::ZERO, Seq(7)),
        Verdict::Unreadable
    );
    assert_eq!(t.observe(Instant::ZERO, Seq(6), fp(6)), Verdict::Stale);
    assert_eq!(t.observe(Instant::ZERO, Seq(8), fp(8)), Verdict::Apply);
}

#[test]
fn without_reordering_an_unreadable_batch_begins_the_stream_again() {
    let mut t = SequenceTracker::<u64>::new(ReorderConfig::default());
    apply_u(&mut t, 4);
    assert_eq!(
        t.observe_unreadable(Instant::ZERO, Seq(7)),
        Verdict::Unreadable
    );
    assert_eq!(t.last_applied(), None);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(9), fp(9)),
        Verdict::Apply,
        "a baseline"
    );
    t.applied(Seq(9), fp(9));
    assert_eq!(
        t.observe_unreadable(Instant::ZERO, Seq(2)),
        Verdict::Unreadable
    );
    assert_eq!(
        t.observe(Instant::ZERO, Seq(1), fp(1)),
        Verdict::Apply,
        "a baseline"
    );
}

/// A reordering tracker that applied batches 1..=4 (ids and stamps 1..=4).
fn four_applied() -> SequenceTracker<u64> {
    let mut t = SequenceTracker::<u64>::new(reordering());
    for seq in 1..=4 {
        apply_u(&mut t, seq);
    }
    t
}

/// A fingerprint with its own first event id and stamp.
fn stamped(first_id: u64, millis: u64) -> Fingerprint {
    Fingerprint {
        timestamp: millis,
        millis: Some(millis),
        events: 1,
        first_event_id: Some(first_id),
        last_event_id: Some(first_id),
        unreadable: false,
    }
}

#[test]
fn a_batch_before_an_unreadable_one_is_another_runs_only_with_ids_back_and_a_later_stamp() {
    // Batches 1..=4 (ids and stamps 1..=4) apply; 5 cannot be read.
    let mut t = four_applied();
    let at = Instant::from_millis(1_010);
    assert_eq!(t.observe_unreadable(at, Seq(5)), Verdict::Unreadable);
    assert_eq!(
        t.observe(at, Seq(5), stamped(5, 20)),
        Verdict::Stale,
        "its ids run on from batch 4: it may be the run's batch 5"
    );
    assert_eq!(
        t.observe(at, Seq(3), stamped(2, 4)),
        Verdict::Stale,
        "stamped no later than batch 4: it may be a batch of the run before it"
    );
    assert_eq!(
        t.observe(at, Seq(5), stamped(4, 21)),
        Verdict::Restart { last: Seq(5) },
        "its first id no greater than batch 4's last, stamped after every batch applied"
    );
}

#[test]
fn a_batch_numbered_before_the_last_applied_and_stamped_after_it_is_a_later_runs() {
    let mut t = four_applied();
    let at = Instant::from_millis(1_010);
    assert_eq!(t.observe_unreadable(at, Seq(6)), Verdict::Hold);
    assert!(t.hold(at, Seq(6), Fingerprint::unreadable(), 6).is_none());
    assert!(t.handle_timeout(at + Duration::from_millis(10)).is_some());
    assert_eq!(t.pop_ready(), Some((Seq(6), 6, Verdict::Unreadable)));
    assert_eq!(
        t.observe(at, Seq(5), stamped(900, 30)),
        Verdict::Stale,
        "numbered after batch 4 with ids past it: it may be the run's batch 5"
    );
    assert_eq!(
        t.observe(at, Seq(3), stamped(900, 30)),
        Verdict::Restart { last: Seq(6) },
        "numbered before batch 4 and stamped after it: not of its run, nor an older one"
    );
}

#[test]
fn a_batch_before_an_unreadable_one_long_after_it_begins_the_stream_again() {
    let mut t = four_applied();
    let at = Instant::from_millis(1_010);
    assert_eq!(t.observe_unreadable(at, Seq(5)), Verdict::Unreadable);
    let almost = at + (BLIND_AT_LEAST - Duration::from_millis(1));
    assert_eq!(t.observe(almost, Seq(5), stamped(5, 20)), Verdict::Stale);
    assert_eq!(
        t.observe(at + BLIND_AT_LEAST, Seq(5), stamped(5, 20)),
        Verdict::Restart { last: Seq(5) },
        "no batch of its run comes that late"
    );
}

#[test]
fn a_reset_keeps_the_fence_of_an_unreadable_batch_held() {
    let mut t = four_applied();
    let at = Instant::from_millis(10);
    assert_eq!(t.observe_unreadable(at, Seq(6)), Verdict::Hold);
    assert!(t.hold(at, Seq(6), Fingerprint::unreadable(), 6).is_none());
    assert_eq!(t.reset(), 1);
    assert_eq!(
        t.observe(at, Seq(5), stamped(5, 5)),
        Verdict::Stale,
        "it may store what 6 removed, and remove what a snapshot since holds"
    );
    assert_eq!(
        t.observe(at, Seq(1), stamped(1, 30)),
        Verdict::Apply,
        "another run's first batch"
    );
    t.applied(Seq(1), stamped(1, 30));
    assert_eq!(
        t.observe(at, Seq(2), stamped(2, 31)),
        Verdict::Apply,
        "the fence has done its work once another run is shown"
    );
}

#[test]
fn a_restart_keeps_the_batches_held_after_it_that_may_be_the_new_runs() {
    let mut t = four_applied();
    // Held: 6 and 7 of the new run (stamped 2_006, 2_007), 8 of the old one (stamped 8).
    for (seq, fp) in [
        (6, stamped(11, 2_006)),
        (7, stamped(12, 2_007)),
        (8, stamped(8, 8)),
    ] {
        assert_eq!(t.observe(Instant::ZERO, Seq(seq), fp), Verdict::Hold);
        assert!(t.hold(Instant::ZERO, Seq(seq), fp, seq).is_none());
    }
    let new_run = stamped(9, 2_005);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(5), new_run),
        Verdict::Restart { last: Seq(4) }
    );
    assert_eq!(t.held_count(), 2, "the old run's 8 is dropped");
    t.applied(
        Seq(5),
        Fingerprint {
            last_event_id: Some(10),
            ..new_run
        },
    );
    assert_eq!(t.pop_ready(), Some((Seq(6), 6, Verdict::Apply)));
}

#[test]
fn after_a_declared_loss_a_copy_of_a_batch_applied_is_late_and_an_older_sequence_no_baseline() {
    // Fingerprints without event ids (a publisher that sends none): only stamps tell runs apart.
    let bare = |stamp: u64| Fingerprint {
        timestamp: stamp,
        millis: Some(stamp),
        events: 0,
        first_event_id: None,
        last_event_id: None,
        unreadable: false,
    };
    let cfg = ReorderConfig {
        max_held: 1,
        max_delay: None,
    };
    let mut t = SequenceTracker::<()>::new(cfg);
    assert_eq!(t.observe(Instant::ZERO, Seq(4), bare(2)), Verdict::Apply);
    t.applied(Seq(4), bare(2));
    assert_eq!(t.observe(Instant::ZERO, Seq(6), bare(3)), Verdict::Hold);
    assert!(t.hold(Instant::ZERO, Seq(6), bare(3), ()).is_none());
    assert_eq!(t.observe(Instant::ZERO, Seq(7), bare(3)), Verdict::Hold);
    assert!(t.hold(Instant::ZERO, Seq(7), bare(3), ()).is_some(), "loss");
    // Before the held batches are released: a copy of 4, then another run's 4.
    assert_eq!(t.observe(Instant::ZERO, Seq(4), bare(2)), Verdict::Late);
    assert_eq!(
        t.observe(Instant::ZERO, Seq(3), bare(5)),
        Verdict::Restart { last: Seq(4) }
    );
}
