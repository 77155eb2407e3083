//! Unit tests of the stream machine placing itself: at a status point (R3), after a forget
//! (R6), and through the reorder window (R7).

use super::*;

#[test]
fn r6_an_unplaced_stream_drops_batches_until_a_fetch_is_asked_then_holds_them() {
    let mut s = resync_on(0);
    assert!(s.is_unplaced());
    assert_eq!(
        offer(&mut s, mark(1, 1, 1, 1)),
        Ruling::Skip(Skip::Unplaced)
    );
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 3, 3, 4)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 3, 3, 4)), Ruling::Skip(Skip::Copy));
    assert_eq!(releases(&mut s), []);
    // The status point: sequence 2 at event id 2. Batch 2 is in the key list; 3 continues it.
    assert_eq!(
        s.place(
            T0,
            Some(Point {
                seq: Seq(2),
                last: Some(2)
            })
        ),
        Placed::AtPoint
    );
    assert_eq!(
        releases(&mut s),
        [(2, Ruling::Skip(Skip::BeforePoint)), (3, Ruling::Apply)]
    );
    assert_eq!(s.last_applied(), Some(Seq(3)));
    // A held batch was before the point: the hold's order cannot show a run change among its
    // batches, so queries miss until a batch that arrives now continues the stream (R3).
    assert!(s.is_unproven());
    assert_eq!(offer(&mut s, mark(1, 4, 5, 5)), Ruling::Apply);
    assert!(!s.is_unproven());
}

#[test]
fn r6_a_status_point_below_the_batch_heard_before_the_fetch_places_nothing() {
    for max_held in [0, 8] {
        let mut s = resync_on(max_held);
        s.fetch_asked();
        assert_eq!(offer(&mut s, mark(1, 1, 1, 1)), Ruling::Hold);
        assert_eq!(s.place(T0, point(1, 1)), Placed::AtPoint);
        assert_eq!(releases(&mut s), [(1, Ruling::Skip(Skip::BeforePoint))]);
        // Batch 1 was heard; the index forgets, and the next fetch is asked.
        s.forget();
        s.fetch_asked();
        assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
        assert_eq!(offer(&mut s, mark(1, 3, 3, 3)), Ruling::Hold);
        // Its status, read after batch 1, is numbered below it: another run's. Batches 2 and
        // 3 may be of either run (run 2's first batch would have filled the hole before them),
        // and the key list may need them: the fetch places nothing.
        assert_eq!(
            s.place(T0, point(0, 0)),
            Placed::OtherRun { heard: Seq(1) },
            "window of {max_held}"
        );
        assert!(s.is_unplaced());
        assert_eq!(releases(&mut s), [], "window of {max_held}");
        // The next fetch places the stream at run 2's point. Run 2's first batch has the
        // sequence of run 1's batch heard, and other bytes: a twin, which forgets once more
        // (R5; the batches heard may be of either run). After that forget, run 2 follows.
        s.forget();
        s.fetch_asked();
        assert_eq!(s.place(T0, point(0, 0)), Placed::AtPoint);
        assert_eq!(
            offer(&mut s, mark(2, 1, 1, 1)),
            forgot(Why::OtherRun, false, Some(0))
        );
        s.fetch_asked();
        assert_eq!(s.place(T0, point(1, 1)), Placed::AtPoint);
        assert_eq!(offer(&mut s, mark(2, 2, 2, 2)), Ruling::Apply);
    }
}

#[test]
fn r3_the_batches_before_the_point_are_one_runs_in_order() {
    let mut s = placed_at(50, 300);
    assert_eq!(
        offer(&mut s, mark(1, 40, 250, 252)),
        Ruling::Skip(Skip::BeforePoint)
    );
    // A batch of another run, numbered and stamped below the point too, but its ids go back.
    assert_eq!(
        offer(&mut s, mark(2, 41, 20, 22)),
        forgot(Why::OtherRun, false, Some(50))
    );
}

#[test]
fn r3_a_batch_before_the_point_makes_queries_miss_until_the_stream_continues_it() {
    let mut s = placed_at(10, 30);
    // A batch of another run numbered below the point (the key list may be that run's).
    assert_eq!(
        offer(&mut s, mark(2, 3, 5, 6)),
        Ruling::Skip(Skip::BeforePoint)
    );
    assert!(s.is_unproven());
    assert_eq!(s.poll_timeout(), Some(T0 + Duration::from_secs(1)));
    // Not continued in time: forget.
    assert_eq!(
        s.handle_timeout(T0 + Duration::from_secs(1)),
        Some(forgot(Why::Unproven, false, Some(10)))
    );
    assert!(s.is_unplaced() && !s.is_unproven());
}

#[test]
fn r3_the_batch_at_the_point_ending_at_its_event_id_continues_it() {
    let mut s = placed_at(10, 30);
    offer(&mut s, mark(1, 9, 25, 27));
    assert!(s.is_unproven());
    offer(&mut s, mark(1, 10, 28, 30));
    assert!(!s.is_unproven());
    assert_eq!(offer(&mut s, mark(1, 11, 31, 31)), Ruling::Apply);
}

#[test]
fn r3_the_batch_at_the_point_arriving_after_placement_asks_the_point_check() {
    // Placed by a status point with no batch heard; the point's own batch then arrives. A
    // restarted run whose batch sizes equal the old run's numbers it the same, so the point is
    // proven by numbers alone and the master is asked (seed 315304 of the simulator).
    let mut s = placed_at(2, 32);
    assert!(!s.take_proved_after_doubt());
    assert_eq!(
        offer(&mut s, mark(2, 2, 17, 32)),
        Ruling::Skip(Skip::BeforePoint)
    );
    assert!(!s.is_unproven());
    assert!(s.take_proved_after_doubt());
    assert_eq!(offer(&mut s, mark(2, 3, 33, 48)), Ruling::Apply);
    assert!(!s.take_proved_after_doubt());
}

#[test]
fn r3_a_batch_before_the_point_past_its_event_ids_is_another_run() {
    let mut s = placed_at(10, 30);
    assert_eq!(
        offer(&mut s, mark(2, 9, 30, 33)),
        forgot(Why::OtherRun, false, Some(10))
    );
    assert!(s.is_unplaced());
}

#[test]
fn r6_without_a_status_the_stream_continues_from_the_last_batch_heard_before_the_fetch() {
    let mut s = resync_on(0);
    // Nothing heard on the connection before the fetch: the snapshot cannot be anchored.
    s.fetch_asked();
    offer(&mut s, mark(1, 5, 9, 9));
    assert_eq!(s.place(T0, None), Placed::Unanchored);
    assert_eq!(releases(&mut s), []);
    // Batch 5 was heard before the next fetch: the stream continues from it, exactly.
    s.fetch_asked();
    offer(&mut s, mark(1, 6, 10, 10));
    offer(&mut s, mark(1, 7, 11, 12));
    assert_eq!(s.place(T0, None), Placed::LastHeard);
    assert_eq!(releases(&mut s), [(6, Ruling::Apply), (7, Ruling::Apply)]);
    // A gap right after the batch heard last is a loss, even with nothing held.
    s.forget();
    s.fetch_asked();
    assert_eq!(s.place(T0, None), Placed::LastHeard);
    assert_eq!(
        offer(&mut s, mark(1, 9, 14, 14)),
        forgot(
            Why::Loss {
                expected: Seq(8),
                received: Seq(9)
            },
            false,
            Some(7)
        )
    );
}

#[test]
fn r6_with_resync_every_forget_unplaces_and_drops_the_batch() {
    let mut s = placed_at(1, 1);
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Apply);
    assert_eq!(
        offer(&mut s, mark(1, 5, 5, 5)),
        forgot(
            Why::Loss {
                expected: Seq(3),
                received: Seq(5)
            },
            false,
            Some(2)
        )
    );
    assert!(s.is_unplaced());
    assert_eq!(
        offer(&mut s, mark(1, 6, 6, 6)),
        Ruling::Skip(Skip::Unplaced)
    );
}

#[test]
fn r6_the_hold_for_a_status_point_is_bounded() {
    let mut s = resync_on(0);
    s.fetch_asked();
    for seq in 1..=8 {
        assert_eq!(offer(&mut s, mark(1, seq, seq, seq)), Ruling::Hold);
    }
    assert_eq!(
        offer(&mut s, mark(1, 9, 9, 9)),
        forgot(Why::HoldFull, false, None)
    );
    assert_eq!(s.held(), 0);
}

#[test]
fn r7_the_window_holds_and_releases_in_order() {
    let mut s = resync_on(4);
    s.fetch_asked();
    s.place(
        T0,
        Some(Point {
            seq: Seq(1),
            last: Some(1),
        }),
    );
    assert_eq!(offer(&mut s, mark(1, 4, 4, 4)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 3, 3, 3)), Ruling::Hold);
    assert_eq!(releases(&mut s), []);
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Apply);
    assert_eq!(releases(&mut s), [(3, Ruling::Apply), (4, Ruling::Apply)]);
}

/// Which batches each release brings, and whether each arrived before a batch the stream moved
/// to earlier.
fn releases_reordered(s: &mut Stream<u64>) -> Vec<(u64, bool)> {
    core::iter::from_fn(|| {
        let (m, _, _) = s.release(T0)?;
        Some((m.seq.0, s.take_reordered()))
    })
    .collect()
}

#[test]
fn r7_a_batch_released_after_one_that_arrived_after_it_is_reordered() {
    let mut s = resync_on(4);
    s.fetch_asked();
    // Held for the fetch in this order: 2, then 4.
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 4, 4, 4)), Ruling::Hold);
    assert_eq!(s.place(T0, point(1, 1)), Placed::AtPoint);
    // Batch 2 continues the point: nothing arrived after it was moved to before.
    assert_eq!(releases_reordered(&mut s), [(2, false)]);
    // Batch 3 arrives last and fills the hole: batch 4, released after it, arrived before it
    // (it may be a late batch of a run the stream left: R7).
    assert_eq!(offer(&mut s, mark(1, 3, 3, 3)), Ruling::Apply);
    assert!(!s.take_reordered());
    assert_eq!(releases_reordered(&mut s), [(4, true)]);
    // Batches 6 then 7 arrive before 5: both arrived before it (not only the first).
    assert_eq!(offer(&mut s, mark(1, 6, 6, 6)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 7, 7, 7)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 5, 5, 5)), Ruling::Apply);
    assert_eq!(releases_reordered(&mut s), [(6, true), (7, true)]);
    // In order again: nothing is reordered.
    assert_eq!(offer(&mut s, mark(1, 8, 8, 8)), Ruling::Apply);
    assert!(!s.take_reordered());
}

#[test]
fn r6_a_copy_of_a_held_batch_is_not_the_last_batch_heard() {
    let mut s = resync_on(8);
    s.fetch_asked();
    assert_eq!(s.place(T0, point(0, 0)), Placed::AtPoint);
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 4, 4, 4)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Skip(Skip::Copy));
    // Batch 4 is the last heard: a status read after it numbered 3 is another run's (R6).
    s.forget();
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(2, 5, 5, 5)), Ruling::Hold);
    assert_eq!(s.place(T0, point(3, 3)), Placed::OtherRun { heard: Seq(4) });
}

#[test]
fn r8_an_undecodable_batch_like_a_held_one_is_heard_and_anchors_nothing() {
    // Run 1's undecodable batch 1 and its batch 2 are held for a fetch; run 2's undecodable
    // batch 1 has the same bytes. It is never taken for a copy that leaves the last batch
    // heard at 2 (R8): a fetch without a status anchored there would continue run 1 (found by
    // the exhaustive checker, depth 6, no window, no status counters).
    let mut s = resync_on(0);
    s.fetch_asked();
    assert_eq!(offer(&mut s, undecodable(1)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    assert!(s.can_anchor());
    let _ = offer(&mut s, undecodable(1));
    assert!(!s.can_anchor());
}

#[test]
fn r7_the_window_declares_a_loss_on_overflow_or_deadline_and_unplaces() {
    let mut s = resync_on(2);
    s.fetch_asked();
    s.place(
        T0,
        Some(Point {
            seq: Seq(1),
            last: Some(1),
        }),
    );
    offer(&mut s, mark(1, 3, 3, 3));
    assert_eq!(s.poll_timeout(), Some(T0 + Duration::from_millis(50)));
    assert_eq!(s.handle_timeout(T0 + Duration::from_millis(49)), None);
    assert_eq!(
        s.handle_timeout(T0 + Duration::from_millis(50)),
        Some(forgot(
            Why::Loss {
                expected: Seq(2),
                received: Seq(3)
            },
            false,
            Some(1)
        ))
    );
    assert!(s.is_unplaced() && s.held() == 0);
}

#[test]
fn r7_a_late_batch_whose_place_was_passed_is_never_applied() {
    let mut s = resync_on(4);
    s.fetch_asked();
    s.place(
        T0,
        Some(Point {
            seq: Seq(1),
            last: Some(1),
        }),
    );
    for seq in 2..=5 {
        offer(&mut s, mark(1, seq, seq, seq));
    }
    // Batch 3 again, but not a copy (its run restarted?), or a late batch: cannot tell.
    assert_eq!(
        offer(&mut s, mark(9, 3, 3, 3)),
        forgot(Why::OtherRun, false, Some(5))
    );
}

#[test]
fn r7_a_held_batch_waits_for_its_hole_from_its_arrival_not_its_placement() {
    let mut s = resync_on(4);
    s.fetch_asked();
    assert_eq!(s.offer(T0, mark(1, 5, 5, 5), 10, || 5), Ruling::Hold);
    // The status point places the stream 100 ms later, before the hole (batch 4): the window
    // (50 ms) ran out while the stream was unplaced.
    let placed_at = T0 + Duration::from_millis(100);
    s.place(
        placed_at,
        Some(Point {
            seq: Seq(3),
            last: Some(3),
        }),
    );
    assert_eq!(releases(&mut s), []);
    assert_eq!(s.poll_timeout(), Some(T0 + Duration::from_millis(50)));
    let loss = Why::Loss {
        expected: Seq(4),
        received: Seq(5),
    };
    assert_eq!(
        s.handle_timeout(placed_at),
        Some(forgot(loss, false, Some(3)))
    );
}

#[test]
fn r6_without_a_window_a_held_batch_at_or_below_the_one_heard_is_another_runs() {
    let mut s = resync_on(0);
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    // Over one connection a run's batches come in order: seq 1 after seq 2 is another run's
    // than seq 2, and the status point cannot tell which one it continues.
    assert_eq!(
        offer(&mut s, mark(2, 1, 1, 1)),
        forgot(Why::OtherRun, false, None)
    );
    // A copy of a held batch is still a copy.
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(2, 2, 2, 2)), Ruling::Hold);
    assert_eq!(offer(&mut s, mark(2, 2, 2, 2)), Ruling::Skip(Skip::Copy));
}

#[test]
fn r6_without_a_status_an_undecodable_last_batch_heard_anchors_nothing() {
    let mut s = resync_on(0);
    s.fetch_asked();
    s.place(T0, point(0, 0));
    offer(&mut s, undecodable(1));
    // Nothing continues an undecodable batch exactly: a fetch now could not be placed by it.
    assert!(!s.can_anchor());
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(1, 2, 2, 2)), Ruling::Hold);
    assert_eq!(s.place(T0, None), Placed::Unanchored);
    assert_eq!(releases(&mut s), []);
    assert!(s.can_anchor());
}
