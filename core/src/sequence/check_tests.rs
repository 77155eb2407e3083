//! Unit tests of the quiet stream's check against the master's status (rule R11).

use core::time::Duration;

use super::*;
use crate::sequence::mark::Print;
use crate::sequence::{HoldBounds, ReorderConfig};

const EVERY: Duration = Duration::from_secs(1);

fn ms(n: u64) -> Instant {
    Instant::from_millis(n)
}

fn mark(seq: u64, first: u64, last: u64) -> Mark {
    Mark {
        seq: Seq(seq),
        first: Some(first),
        last: Some(last),
        events: (last + 1 - first) as usize,
        print: Print(seq << 24 | first),
        undecodable: false,
    }
}

fn point(seq: u64, last: u64) -> Point {
    Point {
        seq: Seq(seq),
        last: Some(last),
    }
}

/// A resyncing stream placed at the status point (seq 4, events 10) at 0 ms, then batch 5
/// (events 11-12) applied at 10 ms.
fn placed(status_check: Option<Duration>) -> Stream<u64> {
    let mut s = Stream::new(StreamConfig {
        reorder: ReorderConfig::default(),
        resync: Some(HoldBounds {
            batches: 8,
            bytes: 1 << 20,
            point_timeout: Duration::from_millis(200),
            status_check,
        }),
    });
    s.fetch_asked();
    assert_eq!(s.place(ms(0), Some(point(4, 10))), Placed::AtPoint);
    assert_eq!(s.offer(ms(10), mark(5, 11, 12), 1, || 5), Ruling::Apply);
    s
}

/// Asks the check when it is due, and answers it with `status`.
fn check(s: &mut Stream<u64>, request: u64, status: Point) -> (Instant, Option<Ruling>) {
    let due = s.status_due().expect("a check is due");
    s.status_asked(due, request);
    (due, s.status_answered(due, request, Some(status)))
}

fn forgot(why: Why) -> Ruling {
    Ruling::Forget(Forgot {
        why,
        apply: false,
        position: Some(Seq(5)),
    })
}

#[test]
fn r11_a_check_is_due_an_interval_after_the_last_batch() {
    let s = placed(Some(EVERY));
    assert_eq!(s.status_due(), Some(ms(10) + EVERY));
    assert_eq!(placed(None).status_due(), None);
}

#[test]
fn r11_a_status_at_the_position_confirms_it() {
    let mut s = placed(Some(EVERY));
    let (at, ruling) = check(&mut s, 1, point(5, 12));
    assert_eq!(ruling, None);
    assert_eq!(s.last_applied(), Some(Seq(5)));
    assert_eq!(s.status_due(), Some(at + EVERY));
    assert_eq!(s.handle_timeout(at + EVERY), None);
}

#[test]
fn r11_a_status_ahead_not_caught_up_with_is_a_lost_tail() {
    let mut s = placed(Some(EVERY));
    let (at, ruling) = check(&mut s, 1, point(7, 15));
    assert_eq!(ruling, None, "batches 6 and 7 may be on their way");
    assert_eq!(s.status_due(), None, "no second check while waiting");
    assert_eq!(s.poll_timeout(), Some(at + EVERY));
    let lost = Why::TailLost {
        expected: Seq(6),
        status: Seq(7),
    };
    assert_eq!(s.handle_timeout(at + EVERY), Some(forgot(lost)));
    assert!(s.is_unplaced());
    assert_eq!(s.holes(), (1, 2));
}

#[test]
fn r11_a_status_ahead_that_the_stream_catches_up_with_is_no_loss() {
    let mut s = placed(Some(EVERY));
    let (at, _) = check(&mut s, 1, point(6, 14));
    let arrived = at + Duration::from_millis(300);
    assert_eq!(s.offer(arrived, mark(6, 13, 14), 1, || 6), Ruling::Apply);
    assert_eq!(s.handle_timeout(at + EVERY), None);
    assert_eq!(s.status_due(), Some(arrived + EVERY));
}

#[test]
fn r11_a_queue_drop_at_the_tail_is_a_lost_tail() {
    // The master's queue dropped the tail's events: sequences skipped, event ids not.
    let mut s = placed(Some(EVERY));
    let (at, ruling) = check(&mut s, 1, point(9, 12));
    assert_eq!(ruling, None);
    let lost = Why::TailLost {
        expected: Seq(6),
        status: Seq(9),
    };
    assert_eq!(s.handle_timeout(at + EVERY), Some(forgot(lost)));
}

#[test]
fn r11_a_status_behind_the_position_is_another_run() {
    // A restart nobody saw, after which nothing came: the new run's counters are lower.
    let mut s = placed(Some(EVERY));
    let (_, ruling) = check(&mut s, 1, point(0, 0));
    let other = Why::StatusOfOtherRun { status: Seq(0) };
    assert_eq!(ruling, Some(forgot(other)));
    assert!(s.is_unplaced());
}

#[test]
fn r11_the_same_sequence_at_other_event_ids_is_another_run() {
    let mut s = placed(Some(EVERY));
    let (_, ruling) = check(&mut s, 1, point(5, 9));
    let other = Why::StatusOfOtherRun { status: Seq(5) };
    assert_eq!(ruling, Some(forgot(other)));
}

#[test]
fn r11_an_answer_asked_before_the_last_batch_is_ignored() {
    let mut s = placed(Some(EVERY));
    let due = s.status_due().expect("due");
    s.status_asked(due, 1);
    // Batch 6 arrives while the status is read: the status may have been read before it.
    assert_eq!(s.offer(due, mark(6, 13, 13), 1, || 6), Ruling::Apply);
    assert_eq!(s.status_answered(due, 1, Some(point(5, 12))), None);
    assert_eq!(s.last_applied(), Some(Seq(6)));
}

#[test]
fn r11_an_answer_to_another_request_or_without_counters_is_no_verdict() {
    let mut s = placed(Some(EVERY));
    let due = s.status_due().expect("due");
    s.status_asked(due, 2);
    assert_eq!(s.status_answered(due, 1, Some(point(0, 0))), None);
    assert_eq!(s.status_answered(due, 2, None), None);
    assert_eq!(s.last_applied(), Some(Seq(5)));
    assert_eq!(s.status_due(), Some(due + EVERY));
}

#[test]
fn r11_an_unanswered_check_is_given_up_and_asked_again() {
    let mut s = placed(Some(EVERY));
    let due = s.status_due().expect("due");
    s.status_asked(due, 1);
    let deadline = due + Duration::from_millis(200);
    assert_eq!(s.poll_timeout(), Some(deadline));
    assert_eq!(s.handle_timeout(deadline), None);
    assert_eq!(s.status_due(), Some(deadline + EVERY));
}

#[test]
fn r11_a_stream_placed_without_a_status_is_never_checked() {
    let mut s: Stream<u64> = Stream::new(StreamConfig {
        reorder: ReorderConfig::default(),
        resync: Some(HoldBounds {
            batches: 8,
            bytes: 1 << 20,
            point_timeout: Duration::from_millis(200),
            status_check: Some(EVERY),
        }),
    });
    s.offer(ms(0), mark(3, 5, 6), 1, || 3);
    s.fetch_asked();
    assert_eq!(s.place(ms(1), None), Placed::LastHeard);
    assert_eq!(s.status_due(), None);
}

/// A resyncing stream placed at the status point (seq 4, events 10) at 0 ms, where batch 3
/// (events 9) arrives at 10 ms: queries miss until the stream continues the point (R3), for
/// up to a point timeout of 10 s.
fn unproven() -> Stream<u64> {
    let mut s = Stream::new(StreamConfig {
        reorder: ReorderConfig::default(),
        resync: Some(HoldBounds {
            batches: 8,
            bytes: 1 << 20,
            point_timeout: Duration::from_secs(10),
            status_check: Some(EVERY),
        }),
    });
    s.fetch_asked();
    assert_eq!(s.place(ms(0), Some(point(4, 10))), Placed::AtPoint);
    assert_eq!(
        s.offer(ms(10), mark(3, 9, 9), 1, || 3),
        Ruling::Skip(Skip::BeforePoint)
    );
    assert!(s.is_unproven());
    s
}

#[test]
fn r11_a_quiet_stream_waiting_for_its_point_forgets_when_the_status_is_at_the_point() {
    // The master's queue dropped batch 4 and nothing came after it (the real master at the end
    // of a burst): waiting out the point timeout would leave the index missing for 10 s.
    let mut s = unproven();
    let (at, ruling) = check(&mut s, 1, point(4, 10));
    assert_eq!(at, ms(10) + EVERY);
    assert_eq!(
        ruling,
        Some(Ruling::Forget(Forgot {
            why: Why::Unproven,
            apply: false,
            position: Some(Seq(4)),
        }))
    );
    assert!(s.is_unplaced() && !s.is_unproven());
}

#[test]
fn r11_a_quiet_stream_waiting_for_its_point_waits_an_interval_for_a_status_ahead() {
    let mut s = unproven();
    let (at, ruling) = check(&mut s, 1, point(6, 13));
    assert_eq!(ruling, None, "batches 4 to 6 may be on their way");
    let lost = Why::TailLost {
        expected: Seq(5),
        status: Seq(6),
    };
    assert_eq!(
        s.handle_timeout(at + EVERY),
        Some(Ruling::Forget(Forgot {
            why: lost,
            apply: false,
            position: Some(Seq(4)),
        }))
    );
}

#[test]
fn r11_a_stream_waiting_for_its_point_that_continues_it_is_proven_after_a_status_ahead() {
    let mut s = unproven();
    let (at, _) = check(&mut s, 1, point(5, 11));
    let arrived = at + Duration::from_millis(300);
    assert_eq!(
        s.offer(arrived, mark(4, 10, 10), 1, || 4),
        Ruling::Skip(Skip::BeforePoint)
    );
    assert!(!s.is_unproven());
    assert_eq!(s.offer(arrived, mark(5, 11, 11), 1, || 5), Ruling::Apply);
    assert_eq!(s.handle_timeout(at + EVERY), None);
}

#[test]
fn r5_a_forget_for_a_lost_batch_of_the_same_run_keeps_telling_twins() {
    // The status at the point shows the batch that would continue it lost: the same run, so
    // the batches heard still tell twins (R5). After the next placement, a batch numbered like
    // the heard batch 3 with other bytes is another run's.
    let mut s = unproven();
    let (_, ruling) = check(&mut s, 1, point(4, 10));
    assert!(matches!(
        ruling,
        Some(Ruling::Forget(Forgot {
            why: Why::Unproven,
            ..
        }))
    ));
    s.fetch_asked();
    assert_eq!(s.place(ms(20), Some(point(4, 10))), Placed::AtPoint);
    let twin = Mark {
        print: Print(0xbeef),
        ..mark(3, 9, 9)
    };
    assert_eq!(
        s.offer(ms(30), twin, 1, || 3),
        Ruling::Forget(Forgot {
            why: Why::OtherRun,
            apply: false,
            position: Some(Seq(4)),
        })
    );
}
