//! The named worlds of issues 26 and 27 run what they name, and the idle master is checked: whatever
//! the session under test does, each world's faults happen (these tests judge the worlds, not
//! the session).

use hicache_index_sim::options::{TailKind, WorldKind, Worlds};
use hicache_index_sim::{run, Options, Preset, Report};

/// Runs `seeds` of `preset` with `kind` as the only named world.
fn runs(kind: WorldKind, preset: Preset, seeds: std::ops::Range<u64>) -> Vec<Report> {
    let mut worlds = Worlds::NONE;
    worlds.insert(kind);
    seeds
        .map(|seed| {
            run(&Options::for_seed_with(
                seed,
                Some(preset),
                3_000,
                Some(worlds),
            ))
        })
        .collect()
}

#[test]
fn a_stale_key_list_world_reads_key_lists_of_the_run_before_a_restart() {
    let reports = runs(WorldKind::StaleKeyList, Preset::Calm, 0..8);
    let stale: u64 = reports.iter().map(|r| r.stats.stale_key_lists).sum();
    let seen: u64 = reports.iter().map(|r| r.stats.net.seen_restarts).sum();
    assert!(stale > 0, "no key list read behind a restart");
    assert!(seen > 0, "no restart seen by the transport");
}

#[test]
fn an_unseen_restarts_world_restarts_often_between_twin_runs() {
    for r in runs(WorldKind::UnseenRestarts, Preset::Calm, 0..4) {
        assert!(r.options.master.twin_batch > 0);
        assert!(
            r.stats.master_restarts >= 5,
            "{} restarts",
            r.stats.master_restarts
        );
        assert_eq!(r.stats.net.seen_restarts, 0);
    }
}

#[test]
fn a_foreign_flood_world_lists_several_foreign_keys_per_sglang_object() {
    let reports = runs(WorldKind::ForeignFlood, Preset::Calm, 0..4);
    let most = reports.iter().map(|r| r.stats.foreign_per_object).max();
    assert!(most >= Some(3), "at most {most:?} foreign keys per object");
}

#[test]
fn a_tail_loss_world_ends_with_a_burst_whose_tail_nothing_reveals() {
    let mut unrevealed = 0;
    for r in runs(WorldKind::TailLossIdle, Preset::Calm, 0..12) {
        let tail = r.options.tail.as_ref().expect("a tail");
        assert_eq!(r.stats.tail_bursts, 1);
        if tail.kind != TailKind::Overflow {
            unrevealed += r.stats.unrevealed_at_idle;
        }
    }
    assert!(
        unrevealed > 0,
        "no loss left unrevealed for the idle master"
    );
}

#[test]
fn a_clock_jump_world_jumps_forward_and_steps_back() {
    let reports = runs(WorldKind::ClockJump, Preset::Calm, 0..4);
    let jumps: u64 = reports.iter().map(|r| r.stats.clock_jumps).sum();
    let back: u64 = reports.iter().map(|r| r.stats.clock_steps_back).sum();
    assert!(jumps > 0 && back > 0, "{jumps} jumps, {back} steps back");
}

#[test]
fn a_segments_world_closes_crashes_and_stalls_clients_and_holds_the_watch_to_its_bound() {
    // Short runs: a few faults each (the CI sweep and the master's own test see every kind).
    let reports = runs(WorldKind::Segments, Preset::Calm, 0..6);
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    let hidden = sum(|r| r.stats.clients.hidden);
    let restored = sum(|r| r.stats.clients.restored);
    assert!(
        hidden > 0 && restored > 0,
        "{hidden} hidden, {restored} back"
    );
    for r in &reports {
        assert!(r.passed(), "{}", r.describe_failure());
        assert_eq!(r.stats.beyond_bound, 0);
    }
}

#[test]
fn the_idle_master_is_checked_and_its_pages_demanded() {
    // No fault: the session must be live and exact at the idle master's check.
    let options = Options::for_seed_with(5, Some(Preset::Pristine), 3_000, Some(Worlds::NONE));
    let report = run(&options);
    assert!(report.passed(), "{}", report.describe_failure());
    assert!(!report.stalled());
    assert!(report.stats.idle_liveness_pages > 0);
}
