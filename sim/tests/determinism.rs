//! The same seed gives the same run: every effect and every answer, in order.

use hicache_index_sim::{run, Options, Preset};

#[test]
fn same_seed_gives_the_same_transcript_in_every_preset() {
    for (i, preset) in Preset::ALL.into_iter().enumerate() {
        let options = Options::for_seed(100 + i as u64, Some(preset), 1_500);
        let (a, b) = (run(&options), run(&options));
        assert!(a.passed(), "{}", a.describe_failure());
        assert_eq!(a.transcript, b.transcript, "{preset}: transcripts differ");
        assert_eq!(a.stats, b.stats, "{preset}: figures differ");
    }
}

#[test]
fn different_seeds_give_different_transcripts() {
    let a = run(&Options::for_seed(1, Some(Preset::Calm), 1_000));
    let b = run(&Options::for_seed(2, Some(Preset::Calm), 1_000));
    assert_ne!(a.transcript, b.transcript);
}
