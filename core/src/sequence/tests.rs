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
    }
}

fn apply(t: &mut SequenceTracker<()>, seq: u64) -> Verdict {
    let v = t.observe(Seq(seq), fp(seq));
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
    assert_eq!(t.observe(Seq(1), fp(1)), Verdict::Duplicate);
}

#[test]
fn same_sequence_other_fingerprint_is_a_restart() {
    let mut t = SequenceTracker::<()>::new(ReorderConfig::default());
    apply(&mut t, 1);
    assert_eq!(t.observe(Seq(1), fp(77)), Verdict::Restart { last: Seq(1) });
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
    };
    assert_eq!(
        t.observe(Seq(8), restarted),
        Verdict::Restart { last: Seq(7) }
    );
    let continued = Fingerprint {
        timestamp: 8,
        millis: Some(8),
        events: 1,
        first_event_id: Some(8),
        last_event_id: Some(8),
    };
    assert_eq!(t.observe(Seq(8), continued), Verdict::Apply);
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
    assert_eq!(t.observe(Seq(3), fp(3)), Verdict::Hold);
    assert!(t.hold(Instant::ZERO, Seq(3), fp(3), 3).is_none());
    assert_eq!(t.observe(Seq(2), fp(2)), Verdict::Apply);
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
    assert_eq!(t.observe(Seq(2), fp(2)), Verdict::Late);
    assert_eq!(t.observe(Seq(2), fp(99)), Verdict::Restart { last: Seq(3) });
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
        assert_eq!(t.observe(Seq(s), fp(s)), Verdict::Hold);
        assert!(t.hold(Instant::ZERO, Seq(s), fp(s), s).is_none());
    }
    assert_eq!(t.observe(Seq(5), fp(5)), Verdict::Hold);
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
    assert_eq!(t.observe(Seq(3), fp(3)), Verdict::Hold);
    assert!(t.hold(at, Seq(3), fp(3), 3).is_none());
    assert_eq!(t.poll_timeout(), Some(at + delay));
    assert_eq!(t.handle_timeout(at), None, "an early timeout is a no-op");
    assert!(t.handle_timeout(at + delay).is_some());
    assert_eq!(t.pop_ready(), Some((Seq(3), 3, Verdict::Apply)));
    t.applied(Seq(3), fp(3));
    assert_eq!(t.poll_timeout(), None);
}

fn apply_u(t: &mut SequenceTracker<u64>, seq: u64) {
    let v = t.observe(Seq(seq), fp(seq));
    assert!(matches!(
        v,
        Verdict::Apply | Verdict::Gap { .. } | Verdict::Restart { .. }
    ));
    t.applied(Seq(seq), fp(seq));
}
