//! Transcript goldens: small scenarios record every effect step by step and compare with the
//! checked-in transcript under `tests/transcripts/`. The same recorder shows determinism.

use hicache_index::{Command, Config, Effect, Lookup, ResyncConfig};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_tests::{
    assert_transcript, config, mha, page_hashes, removed, store_page, stored, transcript_lines,
    Harness,
};

/// Runs the loss scenario and returns its transcript.
fn loss_scenario(cfg: Config) -> String {
    let layout = cfg.layouts[0].layout.clone();
    let mut out = String::new();
    let mut h = Harness::new(cfg);
    let fx = h.fire_timeout().expect("a configured endpoint connects");
    transcript_lines(&mut out, "timeout at start", &fx);
    let fx = h.session.handle_connected(h.now);
    transcript_lines(&mut out, "connected", &fx);
    if let Some(Effect::Command(Command::FetchSnapshot { request })) = fx.first().cloned() {
        let fx = h.session.handle_snapshot(
            h.now,
            request,
            Some(hicache_index::Seq(0).into()),
            std::iter::empty::<&str>(),
        );
        transcript_lines(&mut out, "empty snapshot", &fx);
    }
    let tokens: Vec<u32> = (1..=12).collect();
    let pages = page_hashes(&layout, &tokens);
    let mut sent = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        h.advance(1);
        let frames = h.frames(i as u64 + 1, store_page(&layout, page));
        let fx = h.feed_frames(&frames);
        transcript_lines(&mut out, &format!("batch {} stores page {i}", i + 1), &fx);
        sent.push(frames);
    }
    let fx = h.feed_frames(&sent[2]);
    transcript_lines(&mut out, "batch 3 again", &fx);
    let mut stray = h.frames(4, vec![stored("x_key")]);
    stray[0] = b"kv@other".to_vec();
    let fx = h.feed_frames(&stray);
    transcript_lines(&mut out, "stray topic", &fx);
    h.advance(1);
    let fx = h.batch_at(
        7,
        vec![removed(layout.object_keys(&pages[0]).next().unwrap())],
    );
    transcript_lines(&mut out, "batch 7 after a gap", &fx);
    let q = h.session.query(&Lookup::tokens(&tokens)).unwrap();
    out.push_str(&format!("= query {q:?}\n"));
    h.advance(1);
    let fx = h.batch_at(1, store_page(&layout, &pages[0]));
    transcript_lines(&mut out, "batch 1: the publisher restarted", &fx);
    let fx = h.session.handle_disconnected(h.now);
    transcript_lines(&mut out, "disconnected", &fx);
    let fx = h.fire_timeout().expect("a reconnect is scheduled");
    transcript_lines(&mut out, &format!("timeout at {:?}", h.now), &fx);
    out
}

#[test]
fn gap_duplicate_stray_restart_and_disconnect_transcript() {
    assert_transcript("loss_without_resync.txt", &loss_scenario(config(mha(2))));
}

#[test]
fn the_same_scenario_with_resync_transcript() {
    let cfg = Config {
        resync: Some(ResyncConfig::default()),
        ..config(mha(2))
    };
    assert_transcript("loss_with_resync.txt", &loss_scenario(cfg));
}

#[test]
fn the_same_seed_gives_the_same_transcript() {
    let mut a = config(mha(2));
    a.seed = 42;
    let b = a.clone();
    assert_eq!(loss_scenario(a), loss_scenario(b));
    let mut c = config(mha(2));
    c.seed = 43;
    assert_ne!(
        loss_scenario(c),
        loss_scenario({
            let mut d = config(mha(2));
            d.seed = 42;
            d
        }),
        "the seed reaches the backoff jitter"
    );
}
