//! Sweeps: a short one in every test run, and the CI sweep (release mode, ignored by default):
//! `cargo test -p hicache-index-sim --release --test sweep -- --ignored --nocapture`.

use hicache_index_sim::sweep::{run_seeds, Summary};
use hicache_index_sim::{run, Options, Preset};

fn sweep(seeds: std::ops::Range<u64>, preset: Option<Preset>, events: u64) -> Summary {
    let reports = run_seeds(seeds, 2, |seed| Options::for_seed(seed, preset, events));
    let mut summary = Summary::default();
    for r in &reports {
        summary.add(r);
        assert!(r.passed(), "{}", r.describe_failure());
    }
    summary
}

#[test]
fn every_preset_passes_a_short_sweep() {
    for preset in Preset::ALL {
        let summary = sweep(0..2, Some(preset), 1_000);
        assert_eq!(summary.false_hits, 0);
    }
}

/// The CI sweep: every fault kind occurs, no check fails (no false hit, liveness, bounds,
/// staleness), and a sample of seeds replays to the same transcript.
#[test]
#[ignore = "release-mode CI sweep (about 70 s on two idle cores): run with --release -- --ignored"]
fn ci_sweep_covers_every_fault_kind_without_false_hits() {
    let seeds = 0..1500;
    let reports = run_seeds(seeds.clone(), 2, |seed| {
        Options::for_seed(seed, None, 20_000)
    });
    let mut summary = Summary::default();
    let mut failures = Vec::new();
    let (mut held, mut truncated, mut corrupted, mut bad_topic, mut bad_frames) = (0, 0, 0, 0, 0);
    let (mut duplicated, mut disconnects, mut partitions, mut connect_fails) = (0, 0, 0, 0);
    let (mut unreadable, mut cleared, mut requested, mut failed_resyncs) = (0, 0, 0, 0);
    for r in &reports {
        summary.add(r);
        if !r.passed() {
            failures.push(r.describe_failure());
        }
        let s = &r.stats;
        held += s.held;
        truncated += s.net.truncated;
        corrupted += s.net.corrupted;
        bad_topic += s.net.bad_topic;
        bad_frames += s.net.bad_frame_count;
        duplicated += s.net.duplicated;
        disconnects += s.net.disconnects;
        partitions += s.net.partitions;
        connect_fails += s.net.connect_fails + s.net.connect_hangs;
        unreadable += s.unreadable_removal_clears;
        cleared += s.publisher_clears;
        requested += s.requested_clears;
        failed_resyncs += s.resyncs_failed;
    }
    println!("{}", summary.render(None));
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(summary.false_hits, 0);
    let coverage = [
        ("gaps", summary.gaps),
        ("session restarts", summary.session_restarts),
        ("master restarts", summary.master_restarts),
        ("queue drops", summary.queue_drops),
        ("silent removals", summary.silent_removals),
        ("resyncs", summary.resyncs),
        ("failed resyncs", failed_resyncs),
        ("verification rounds", summary.verify_rounds),
        ("stray and junk messages", summary.stray),
        ("held out-of-order batches", held),
        ("duplicates", duplicated),
        ("truncations", truncated),
        ("corruptions", corrupted),
        ("damaged topics", bad_topic),
        ("damaged frame counts", bad_frames),
        ("disconnects", disconnects),
        ("partitions", partitions),
        ("failed or hung connects", connect_fails),
        ("unreadable removals", unreadable),
        ("cleared events", cleared),
        ("requested clears", requested),
        ("liveness pages", summary.liveness_pages),
    ];
    for (what, n) in coverage {
        assert!(n > 0, "the sweep never exercised {what}");
    }
    // Determinism: every 50th seed again.
    for r in reports.iter().step_by(50) {
        let again = run(&r.options);
        assert_eq!(
            again.transcript, r.transcript,
            "seed {} is not deterministic",
            r.options.seed
        );
    }
}
