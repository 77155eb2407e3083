//! The master model's removals per medium, in both publisher generations (issue 14): what the
//! real 0.3.14 master sent in `core/tests/fixtures/mooncake_0_3_14_disk_replica.jsonl`.

use hicache_index::Instant;
use hicache_index_sim::master::{Action, Change, Master, MasterOutput};
use hicache_index_sim::rng::Rng;
use hicache_index_sim::{Options, Preset};

/// The changes of a master that puts, adds disk replicas, then evicts whole pages.
fn evictions(per_medium: bool) -> Vec<Change> {
    let o = Options::for_seed(7, Some(Preset::Calm), 1000);
    let mut mo = o.master.clone();
    mo.per_medium_removals = per_medium;
    mo.queue_capacity = 1 << 16;
    let mut m = Master::new(mo, o.model_specs(), Rng::new(7));
    let mut out = MasterOutput::default();
    for _ in 0..20 {
        m.act(Instant::ZERO, Action::Put, &mut out);
    }
    for _ in 0..20 {
        m.act(Instant::ZERO, Action::DiskReplica, &mut out);
    }
    let from = out.records.len();
    for _ in 0..40 {
        m.act(Instant::ZERO, Action::EvictPage, &mut out);
    }
    out.records[from..].iter().map(|r| r.change).collect()
}

#[test]
fn a_current_master_removes_an_object_on_both_media_one_medium_at_a_time() {
    let changes = evictions(true);
    let pairs = changes
        .windows(2)
        .filter(|w| {
            matches!(w, [Change::MediumRemoved { obj: a }, Change::Removed { obj: b }] if a == b)
        })
        .count();
    assert!(
        pairs > 0,
        "no object on both media was evicted: {changes:?}"
    );
    // A medium removal is always followed by the removal of the object's last medium.
    for (i, c) in changes.iter().enumerate() {
        if let Change::MediumRemoved { obj } = c {
            assert_eq!(changes.get(i + 1), Some(&Change::Removed { obj: *obj }));
        }
    }
}

#[test]
fn an_older_master_sends_one_removal_when_no_replica_is_left() {
    let changes = evictions(false);
    assert!(changes.iter().any(|c| matches!(c, Change::Removed { .. })));
    assert!(
        !changes
            .iter()
            .any(|c| matches!(c, Change::MediumRemoved { .. })),
        "{changes:?}"
    );
}
