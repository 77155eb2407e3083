//! The checker catches a deliberately broken session, with a seed that replays the failure.

use hicache_index_sim::{run, run_with, FailureKind, GapBlindSession, Options, Preset};

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
