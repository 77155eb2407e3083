//! Unit tests of the demo: when a removal is known to the index.

use hicache_index::Seq;
use hicache_index_emulator::Position;

use super::world::Applied;

#[test]
fn a_removal_is_known_from_its_batch_on_within_its_run_or_once_a_later_run_is_followed() {
    let at = |run, seq| Position { run, seq: Seq(seq) };
    let index = |run, seq: Option<u64>| Applied {
        run,
        seq: seq.map(Seq),
    };
    let removal = at(0, 10);
    assert!(
        !index(0, None).covers(removal),
        "nothing applied since a clear"
    );
    assert!(!index(0, Some(9)).covers(removal), "an earlier batch");
    assert!(index(0, Some(10)).covers(removal), "its own batch");
    assert!(index(0, Some(11)).covers(removal), "a later batch");
    assert!(index(1, Some(1)).covers(removal), "a batch of the next run");
    // A removal of a run the index is not known to follow yet: a large sequence of the
    // old run says nothing about it.
    assert!(!index(0, Some(500)).covers(at(1, 3)));
    let pending = at(0, u64::MAX);
    assert!(
        !index(0, Some(u64::MAX - 1)).covers(pending),
        "not yet published"
    );
}
