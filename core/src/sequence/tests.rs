//! Unit tests of the stream machine: each rule of [`crate::sequence`] on its own.

use alloc::vec::Vec;
use core::time::Duration;

use super::*;
use crate::sequence::mark::Print;
use crate::sequence::{HoldBounds, ReorderConfig};

#[path = "placement_tests.rs"]
mod placement;

/// A batch of run `run` numbered `seq`, holding event ids `first..=last`.
fn mark(run: u64, seq: u64, first: u64, last: u64) -> Mark {
    Mark {
        seq: Seq(seq),
        first: Some(first),
        last: Some(last),
        events: (last + 1 - first) as usize,
        print: Print(run << 48 | seq << 24 | first),
        undecodable: false,
    }
}

fn undecodable(seq: u64) -> Mark {
    Mark {
        seq: Seq(seq),
        first: None,
        last: None,
        events: 0,
        print: Print(0xdead_0000 | seq),
        undecodable: true,
    }
}

const T0: Instant = Instant::ZERO;

fn resync_off() -> Stream<u64> {
    Stream::new(StreamConfig::default())
}

fn bounds() -> HoldBounds {
    HoldBounds {
        batches: 8,
        bytes: 1 << 20,
        point_timeout: Duration::from_secs(1),
        status_check: None,
    }
}

fn resync_on(max_held: usize) -> Stream<u64> {
    Stream::new(StreamConfig {
        reorder: ReorderConfig {
            max_held,
            max_delay: Some(Duration::from_millis(50)),
        },
        resync: Some(bounds()),
    })
}

/// A stream without a window placed by a fetch's status point: sequence `seq`, last event id
/// `last`.
fn placed_at(seq: u64, last: u64) -> Stream<u64> {
    let mut s = resync_on(0);
    s.fetch_asked();
    s.place(
        T0,
        Some(Point {
            seq: Seq(seq),
            last: Some(last),
        }),
    );
    s
}

fn offer(s: &mut Stream<u64>, m: Mark) -> Ruling {
    s.offer(T0, m, 10, || m.seq.0)
}

fn forgot(why: Why, apply: bool, position: Option<u64>) -> Ruling {
    Ruling::Forget(Forgot {
        why,
        apply,
        position: position.map(Seq),
    })
}

fn releases(s: &mut Stream<u64>) -> Vec<(u64, Ruling)> {
    core::iter::from_fn(|| s.release(T0).map(|(m, _, r)| (m.seq.0, r))).collect()
}

#[test]
fn r1_the_next_batch_at_the_next_event_id_applies() {
    let mut s = resync_off();
    assert_eq!(offer(&mut s, mark(1, 9, 40, 41)), Ruling::Apply);
    assert_eq!(offer(&mut s, mark(1, 10, 42, 45)), Ruling::Apply);
    assert_eq!(s.last_applied(), Some(Seq(10)));
}

#[test]
fn r2_a_copy_is_skipped_however_late() {
    let mut s = resync_off();
    for seq in 1..=20 {
        assert_eq!(offer(&mut s, mark(1, seq, seq, seq)), Ruling::Apply);
    }
    assert_eq!(offer(&mut s, mark(1, 3, 3, 3)), Ruling::Skip(Skip::Copy));
    assert_eq!(offer(&mut s, mark(1, 20, 20, 20)), Ruling::Skip(Skip::Copy));
    assert_eq!(s.last_applied(), Some(Seq(20)));
}

#[test]
fn r4_a_later_batch_at_later_ids_is_a_loss_and_begins_the_stream_without_resync() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 1, 1, 2));
    let loss = Why::Loss {
        expected: Seq(2),
        received: Seq(5),
    };
    // Sequences 2-4 dropped in the master's queue: no event id skipped.
    assert_eq!(offer(&mut s, mark(1, 5, 3, 3)), forgot(loss, true, Some(1)));
    assert_eq!(offer(&mut s, mark(1, 6, 4, 4)), Ruling::Apply);
}

#[test]
fn r5_a_batch_numbered_at_or_before_the_position_is_another_run() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 7, 20, 21));
    // The new run of the master (ids from 1): without resync, it begins the stream.
    assert_eq!(
        offer(&mut s, mark(2, 3, 1, 4)),
        forgot(Why::OtherRun, true, Some(7))
    );
    assert_eq!(offer(&mut s, mark(2, 4, 5, 5)), Ruling::Apply);
}

#[test]
fn r5_the_next_sequence_at_another_event_id_is_another_run() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 7, 20, 21));
    assert_eq!(
        offer(&mut s, mark(2, 8, 1, 2)),
        forgot(Why::OtherRun, true, Some(7))
    );
    let mut s = resync_off();
    offer(&mut s, mark(1, 7, 20, 21));
    // Later sequence, but event ids went back: ids only grow within a run.
    assert_eq!(
        offer(&mut s, mark(2, 30, 5, 6)),
        forgot(Why::OtherRun, true, Some(7))
    );
}

#[test]
fn r8_an_undecodable_batch_forgets_and_the_next_must_run_past_it() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 4, 10, 12));
    assert_eq!(
        offer(&mut s, undecodable(5)),
        forgot(Why::Undecodable, false, Some(4))
    );
    // Numbered below it over the same connection: another run's (false hit 1 of issue 26).
    assert_eq!(
        offer(&mut s, mark(2, 3, 1, 3)),
        forgot(Why::OtherRun, true, Some(4))
    );

    let mut s = resync_off();
    offer(&mut s, mark(1, 4, 10, 12));
    offer(&mut s, undecodable(5));
    // After it, any later sequence at a later event id (its own ids are unknown).
    assert_eq!(offer(&mut s, mark(1, 6, 17, 18)), Ruling::Apply);

    // A garbled sequence far ahead does not fence the stream: the next batch runs past the
    // point the stream stood at.
    let mut s = resync_off();
    offer(&mut s, mark(1, 4, 10, 12));
    assert_eq!(
        offer(&mut s, undecodable(u64::MAX)),
        forgot(Why::Undecodable, false, Some(4))
    );
    assert_eq!(offer(&mut s, mark(1, 5, 13, 13)), Ruling::Apply);
}

#[test]
fn r9_a_reconnect_keeps_the_position_so_another_runs_first_batch_is_told() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 10, 30, 31));
    s.connected();
    s.forget();
    // Not a copy, numbered at or below the last batch seen: another run (false hit 2).
    assert_eq!(
        offer(&mut s, mark(2, 10, 28, 31)),
        forgot(Why::OtherRun, true, Some(10))
    );
    let mut s = resync_off();
    offer(&mut s, mark(1, 10, 30, 31));
    s.forget();
    // Batches lost across the reconnect: the stream begins again silently.
    assert_eq!(offer(&mut s, mark(1, 14, 40, 41)), Ruling::Apply);
}

#[test]
fn a_new_endpoint_forgets_the_batches_passed() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 1, 1, 1));
    s.begin_anew();
    assert_eq!(s.position(), Position::Fresh);
    assert_eq!(offer(&mut s, mark(1, 1, 1, 1)), Ruling::Apply);
}

#[test]
fn prints_tell_payloads_apart() {
    assert_eq!(Print::of(b"abc"), Print::of(b"abc"));
    assert_ne!(Print::of(b"abc"), Print::of(b"abd"));
    assert_ne!(Print::of(b""), Print::of(b"\0"));
    assert_ne!(Print::of(b"12345678"), Print::of(b"12345678\0"));
}

#[test]
fn prints_tell_apart_every_bit_flip_word_swap_and_zero_extension_of_a_payload() {
    // 211 bytes: six four-lane blocks (192 bytes), two more words and a tail of three bytes.
    let payload: Vec<u8> = (0..211u32).map(|i| (i * 37 + 11) as u8).collect();
    let mut seen = alloc::collections::BTreeSet::new();
    assert!(seen.insert(Print::of(&payload)));
    for bit in 0..payload.len() * 8 {
        let mut flipped = payload.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(seen.insert(Print::of(&flipped)), "bit {bit}");
    }
    // Words swapped between two lanes of one block, one lane of two blocks, a block and the
    // words after the blocks, and those two words.
    for (a, b) in [(0, 8), (0, 32), (8, 192), (40, 200), (192, 200)] {
        let mut swapped = payload.clone();
        for i in 0..8 {
            swapped.swap(a + i, b + i);
        }
        assert!(seen.insert(Print::of(&swapped)), "words at {a} and {b}");
    }
    for zeros in 1..=40 {
        let mut longer = payload.clone();
        longer.resize(payload.len() + zeros, 0);
        assert!(seen.insert(Print::of(&longer)), "{zeros} zeros more");
    }
}

#[test]
fn r5_a_batch_numbered_like_one_passed_with_other_bytes_is_another_run() {
    let mut s = placed_at(2, 2);
    assert_eq!(offer(&mut s, mark(1, 3, 3, 3)), Ruling::Apply);
    // A forget for another reason (a verification, say), and a fetch under way: the batches
    // that arrive are held for its status point, except the twin of batch 3 (same sequence and
    // ids, other bytes), which can only be another run's: the fetch may read either run.
    s.forget();
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(1, 4, 4, 4)), Ruling::Hold);
    assert_eq!(
        offer(&mut s, mark(2, 3, 3, 3)),
        forgot(Why::OtherRun, false, None)
    );
    // Once forgotten for another run, the batches passed before tell no twins.
    s.fetch_asked();
    assert_eq!(offer(&mut s, mark(3, 4, 4, 4)), Ruling::Hold);
}

/// Found by the simulator (reorder-heavy seed 7400825): a batch of run 1 heard before the
/// stream forgot for run 2, delivered again late after a key list of run 2 placed the stream
/// exactly before it (twin runs number alike), was applied: what it stored was gone.
#[test]
fn r5_a_late_copy_of_a_batch_of_a_run_left_is_another_runs_even_where_it_continues() {
    let old = mark(1, 4, 49, 64);
    // Run 1's batch 4 applied, then run 2's batch 3 (numbered below it): forget, and a key
    // list of run 2 places the stream at `at`.
    let left = |at| {
        let mut s = resync_on(4);
        s.fetch_asked();
        s.place(T0, point(3, 48));
        assert_eq!(offer(&mut s, old), Ruling::Apply);
        assert_eq!(
            offer(&mut s, mark(2, 3, 33, 48)),
            forgot(Why::OtherRun, false, Some(4))
        );
        s.fetch_asked();
        s.place(T0, at);
        s
    };
    // The late copy of run 1's batch 4 continues run 2's point exactly, and is not run 2's.
    let mut s = left(point(3, 48));
    assert_eq!(offer(&mut s, old), forgot(Why::OtherRun, false, Some(3)));
    // Nor when it would pass the position (held, then applied once its hole filled).
    let mut s = left(point(2, 32));
    assert_eq!(offer(&mut s, old), forgot(Why::OtherRun, false, Some(2)));
    // A batch of the followed run with the same numbers and other bytes applies.
    let mut s = left(point(3, 48));
    assert_eq!(offer(&mut s, mark(3, 4, 49, 64)), Ruling::Apply);
    // And after the late copy forgot once, run 2's own batch 4 is no twin of it.
    let mut s = left(point(3, 48));
    assert_eq!(offer(&mut s, old), forgot(Why::OtherRun, false, Some(3)));
    s.fetch_asked();
    s.place(T0, point(3, 48));
    assert_eq!(offer(&mut s, mark(2, 4, 49, 64)), Ruling::Apply);
}

#[test]
fn r8_an_undecodable_batch_is_never_taken_for_a_copy() {
    let mut s = resync_off();
    offer(&mut s, mark(1, 4, 4, 4));
    let first = offer(&mut s, undecodable(5));
    assert!(matches!(first, Ruling::Forget(f) if f.why == Why::Undecodable));
    // The same unreadable bytes again, under the same sequence: another run's, perhaps.
    let again = offer(&mut s, undecodable(5));
    assert!(matches!(again, Ruling::Forget(f) if f.why == Why::Undecodable));
}

fn point(seq: u64, last: u64) -> Option<Point> {
    Some(Point {
        seq: Seq(seq),
        last: Some(last),
    })
}

#[test]
fn r5_a_twin_of_a_batch_held_then_dropped_is_another_runs_even_at_the_point() {
    for max_held in [0, 4] {
        let mut s = resync_on(max_held);
        s.fetch_asked();
        // Run 1's batch 1 is held for the fetch, then the connection is lost: it is dropped
        // with what was held, but it was heard.
        assert_eq!(offer(&mut s, mark(1, 1, 1, 1)), Ruling::Hold);
        s.forget();
        s.connected();
        s.fetch_asked();
        // The key list is run 1's (at batch 1); run 2 restarts unseen and numbers its first
        // batch like run 1's: at the point, ending at its event id, yet a twin.
        assert_eq!(s.place(T0, point(1, 1)), Placed::AtPoint);
        assert_eq!(
            offer(&mut s, mark(2, 1, 1, 1)),
            forgot(Why::OtherRun, false, Some(1)),
            "max_held {max_held}"
        );
    }
}

#[test]
fn r5_a_twin_of_an_undecodable_batch_heard_is_another_runs() {
    let mut s = resync_on(0);
    s.fetch_asked();
    s.place(T0, point(0, 0));
    assert_eq!(
        offer(&mut s, undecodable(1)),
        forgot(Why::Undecodable, false, Some(0))
    );
    s.fetch_asked();
    assert_eq!(s.place(T0, point(1, 1)), Placed::AtPoint);
    // Run 1's batch 1 again would be undecodable again: a decodable batch 1 is another run's.
    assert_eq!(
        offer(&mut s, mark(2, 1, 1, 1)),
        forgot(Why::OtherRun, false, Some(1))
    );
}

#[test]
fn r8_an_undecodable_batch_before_the_point_forgets() {
    let mut s = resync_on(0);
    s.fetch_asked();
    s.place(T0, point(2, 2));
    // At or before the point, but it may be another run's, and its events are unknown.
    assert_eq!(
        offer(&mut s, undecodable(1)),
        forgot(Why::Undecodable, false, Some(2))
    );
    assert!(s.is_unplaced());
}
