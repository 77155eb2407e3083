//! The checker catches a deliberately broken session, with a seed that replays the failure.

use hicache_index_sim::{run, run_with, Bug, FailureKind, GapBlindSession, Options, Preset};

fn gap_blind(options: &Options) -> hicache_index_sim::Report {
    let session = GapBlindSession::new(options.session_config()).expect("a valid config");
    run_with(options, session)
}

#[test]
fn planted_gap_blindness_is_caught_with_a_replayable_seed() {
    let found = (0..40u64).find_map(|seed| {
        let options = Options::for_seed(seed, Some(Preset::Lossy), 3_000);
        let report = gap_blind(&options);
        report
            .failures
            .iter()
            .any(|f| f.kind == FailureKind::FalseHit)
            .then_some((options, report))
    });
    let (options, report) = found.expect("a session blind to gaps is caught within 40 lossy seeds");
    println!("{}", report.describe_failure());
    // The seed replays: the same options fail the same way at the same moment.
    let again = gap_blind(&options);
    assert_eq!(again.failures, report.failures);
    assert_eq!(again.transcript, report.transcript);
    // And the real session passes that very seed.
    let real = run(&options);
    assert!(real.passed(), "{}", real.describe_failure());
}

/// Finds, among `seeds` of `preset`, a seed where the session with `bug` makes a false hit and
/// the real session does not; checks that it replays.
fn caught(bug: Bug, preset: Option<Preset>, seeds: std::ops::Range<u64>, events: u64) {
    caught_in(bug, preset, seeds, events, |options| options);
}

/// As [`caught`], over the worlds `shape` makes of each seed's options.
fn caught_in(
    bug: Bug,
    preset: Option<Preset>,
    seeds: std::ops::Range<u64>,
    events: u64,
    shape: fn(Options) -> Options,
) {
    let found = seeds.clone().find_map(|seed| {
        let options = shape(Options::for_seed(seed, preset, events));
        let report = bug.run(&options);
        let false_hit = |r: &hicache_index_sim::Report| {
            r.failures.iter().any(|f| f.kind == FailureKind::FalseHit)
        };
        (false_hit(&report) && !false_hit(&run(&options))).then_some((options, report))
    });
    let (options, report) =
        found.unwrap_or_else(|| panic!("{bug:?} is not caught within {preset:?} seeds {seeds:?}"));
    println!("{}", report.describe_failure());
    let again = bug.run(&options);
    assert_eq!(again.failures, report.failures);
    assert_eq!(again.transcript, report.transcript);
}

#[test]
fn planted_restart_blindness_is_caught() {
    caught(Bug::RestartBlind, Some(Preset::RestartHeavy), 0..40, 4_000);
}

#[test]
fn planted_trimmed_snapshot_lines_are_caught() {
    caught(
        Bug::TrimmedSnapshotLines,
        Some(Preset::Hostile),
        0..60,
        6_000,
    );
}

#[test]
fn planted_dropping_of_undecodable_payloads_is_caught() {
    caught(Bug::UndecodableDropped, Some(Preset::Hostile), 0..40, 5_000);
}

#[test]
fn planted_dropping_of_unknown_keyless_events_is_caught() {
    caught(
        Bug::UnknownKeylessDropped,
        Some(Preset::Hostile),
        0..40,
        6_000,
    );
}

#[test]
fn planted_late_copy_taken_as_next_is_caught() {
    caught(
        Bug::LateCopyAsNext,
        Some(Preset::ReorderHeavy),
        0..40,
        4_000,
    );
}

#[test]
fn planted_blindness_to_the_watermark_event_count_is_caught() {
    caught_in(
        Bug::WatermarkEventsIgnored,
        Some(Preset::RestartHeavy),
        // Rarer since the session checks the status point in more ways (a restart resets the
        // stream, an idle stream defers the check to the next batch, and R3's point check asks
        // the master before a point proven after doubt is trusted): seed 347 is the first.
        0..600,
        8_000,
        // The worlds it was found in, before issue 17's hybrid models joined some of them
        // (their models are drawn apart, so the rest of each seed's options is unchanged), and
        // before the watch of the master's signals reconciled after every silent removal (which
        // changes every later history); the CI sweep searches the full worlds, watch on.
        |o| o.without_hybrid_models().without_store_watch(),
    );
}

#[test]
fn planted_reading_of_removed_as_keeping_the_other_medium_is_caught() {
    // Calm seeds evict objects on both media with an older master's single `removed` half the
    // time: a session that keeps the disk copy without proof claims what is gone.
    caught(
        Bug::MediumKeptWithoutProof,
        Some(Preset::Calm),
        0..40,
        4_000,
    );
}

#[test]
fn planted_blindness_to_side_pools_is_caught() {
    caught(Bug::SidePoolsIgnored, Some(Preset::Calm), 0..40, 3_000);
}
