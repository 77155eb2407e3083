//! Per-medium residency through the real `Session` (issue 14): a `removed` takes one medium away,
//! a page that the stream cannot prove is still on its other medium misses until verification
//! confirms it, and `cleared` clears a tenant on every medium. Each test was checked to fail
//! with the rule it names taken out of the core.

use std::time::Duration;

use hicache_index::{
    Command, Config, Effect, EventKind, Lookup, Medium, Report, VerifyConfig, VerifyRequest,
};
use hicache_index_shortcuts::Shortcuts;
use hicache_index_sim::encode::OwnedEvent;
use hicache_index_tests::{config, mha, on_disk, page_hashes, stored, tokens, Harness};

/// A TP 2 session that verifies every second, 64 keys a round.
fn verifying() -> Harness {
    let mut cfg: Config = config(mha(2));
    cfg.verify = Some(VerifyConfig {
        interval: Duration::from_secs(1),
        sample: 64,
        ..VerifyConfig::default()
    });
    Harness::connected(cfg)
}

/// The object keys of the first page of `tokens(1)` under TP 2.
fn page_keys() -> Vec<String> {
    let layout = mha(2);
    let page = page_hashes(&layout, &tokens(1))[0];
    layout.object_keys(&page).collect()
}

fn removed_from(key: &str, medium: Medium) -> OwnedEvent {
    let mut e = OwnedEvent::new(EventKind::Removed, key);
    e.medium = Some(medium);
    e
}

/// Stores every object of the page on memory and on disk, as a Put commit of a current master
/// announces each medium.
fn store_on_both(h: &mut Harness, keys: &[String]) {
    let mut events: Vec<OwnedEvent> = keys.iter().map(|k| stored(k.clone())).collect();
    events.extend(keys.iter().map(|k| on_disk(stored(k.clone()))));
    let _ = h.batch(events);
}

/// Fires timeouts until a verification round is asked for; returns its request and keys.
fn next_round(h: &mut Harness) -> (VerifyRequest, Vec<String>) {
    loop {
        let fx = h.fire_timeout().expect("a round is scheduled");
        if let Some(round) = fx.iter().find_map(|e| match e {
            Effect::Command(Command::VerifyKeys { request, keys }) => {
                Some((*request, keys.clone()))
            }
            _ => None,
        }) {
            return round;
        }
    }
}

fn answer(
    h: &mut Harness,
    (request, keys): &(VerifyRequest, Vec<String>),
    exists: bool,
) -> Vec<Effect> {
    h.advance(50);
    h.session
        .handle_verify_result(h.now, *request, keys.iter().map(|k| (k.as_str(), exists)))
        .into_iter()
        .collect()
}

fn disk_only_pages(h: &Harness) -> usize {
    let layout = mha(2);
    let pages = page_hashes(&layout, &tokens(1));
    h.session
        .query(&Lookup::page_hashes(&pages))
        .unwrap()
        .disk_only_pages
}

#[test]
fn a_page_evicted_from_memory_but_on_disk_misses_until_verification_confirms_it() {
    let mut h = verifying();
    let keys = page_keys();
    store_on_both(&mut h, &keys);
    assert_eq!(h.prefix(&tokens(1)), 1);
    // The memory copies go; the stream does not say whether this publisher removes per medium.
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Cpu)).collect());
    assert_eq!(h.prefix(&tokens(1)), 0, "unproven on disk: a miss");
    let round = next_round(&mut h);
    for key in &keys {
        assert!(round.1.contains(key), "the suspect {key} is verified");
    }
    let fx = answer(&mut h, &round, true);
    assert!(
        !fx.iter()
            .any(|e| matches!(e, Effect::Report(Report::StaleFound { .. }))),
        "{fx:?}"
    );
    assert_eq!(h.prefix(&tokens(1)), 1, "confirmed: a hit again");
    assert_eq!(disk_only_pages(&h), 1, "and it is on disk only");
    assert_eq!(h.status().counters.suspects_confirmed, keys.len() as u64);
    // The session's counters (and so `/metrics`) carry them too.
    let c = h.status().counters;
    assert_eq!(
        (
            c.suspended_objects,
            c.suspects_confirmed,
            c.suspects_dropped
        ),
        (keys.len() as u64, keys.len() as u64, 0)
    );
}

#[test]
fn a_suspect_that_an_older_publisher_removed_everywhere_stays_a_miss_and_is_not_stale() {
    let mut h = verifying();
    let keys = page_keys();
    store_on_both(&mut h, &keys);
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Cpu)).collect());
    let round = next_round(&mut h);
    let fx = answer(&mut h, &round, false);
    assert!(
        !fx.iter().any(|e| matches!(
            e,
            Effect::Report(Report::StaleFound { .. }) | Effect::Report(Report::Cleared { .. })
        )),
        "an absent suspect is no stale key: {fx:?}"
    );
    assert_eq!(h.prefix(&tokens(1)), 0);
    assert_eq!(h.status().suspects, 0, "it is decided");
}

#[test]
fn a_removal_of_the_other_medium_before_the_answer_wins_over_it() {
    let mut h = verifying();
    let keys = page_keys();
    store_on_both(&mut h, &keys);
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Cpu)).collect());
    let round = next_round(&mut h);
    // The disk copies go after the master answered (its answer still says present).
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Disk)).collect());
    let _ = answer(&mut h, &round, true);
    assert_eq!(h.prefix(&tokens(1)), 0, "nothing is left on any medium");
}

#[test]
fn an_answer_sampled_before_the_removal_does_not_confirm_it() {
    let mut h = verifying();
    let keys = page_keys();
    store_on_both(&mut h, &keys);
    // The round samples the objects while they are on both media...
    let round = next_round(&mut h);
    assert!(round.1.contains(&keys[0]));
    // ...then the memory copies go: the answer may have been read before that.
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Cpu)).collect());
    let _ = answer(&mut h, &round, true);
    assert_eq!(h.prefix(&tokens(1)), 0, "not proven after the removal");
    // The next round asks again and confirms.
    let round = next_round(&mut h);
    let _ = answer(&mut h, &round, true);
    assert_eq!(h.prefix(&tokens(1)), 1);
}

#[test]
fn a_store_on_the_remaining_medium_proves_the_object_at_once() {
    let mut h = verifying();
    let keys = page_keys();
    store_on_both(&mut h, &keys);
    let _ = h.batch(keys.iter().map(|k| removed_from(k, Medium::Cpu)).collect());
    assert_eq!(h.prefix(&tokens(1)), 0);
    let _ = h.batch(keys.iter().map(|k| on_disk(stored(k.clone()))).collect());
    assert_eq!(h.prefix(&tokens(1)), 1);
    assert_eq!(disk_only_pages(&h), 1);
    assert_eq!(h.status().suspects, 0);
}

#[test]
fn a_removal_of_an_object_seen_on_one_medium_leaves_nothing_to_verify() {
    let mut h = verifying();
    let keys = page_keys();
    let _ = h.batch(keys.iter().map(|k| stored(k.clone())).collect());
    let _ = h.batch(vec![removed_from(&keys[0], Medium::Cpu)]);
    assert_eq!(h.status().suspects, 0);
    assert_eq!(h.prefix(&tokens(1)), 0);
}

#[test]
fn cleared_clears_the_tenant_on_every_medium() {
    let mut h = verifying();
    let keys = page_keys();
    // One page on disk only, and a suspect of another medium.
    let _ = h.batch(keys.iter().map(|k| on_disk(stored(k.clone()))).collect());
    assert_eq!(h.prefix(&tokens(1)), 1);
    let layout = mha(2);
    let second = page_hashes(&layout, &tokens(2))[1];
    let other: Vec<String> = layout.object_keys(&second).collect();
    store_on_both(&mut h, &other);
    let _ = h.batch(vec![removed_from(&other[0], Medium::Cpu)]);
    let round = next_round(&mut h);
    assert!(round.1.contains(&other[0]));
    let mut clear = OwnedEvent::new(EventKind::Cleared, "");
    clear.object_key = None;
    clear.medium = None;
    let _ = h.batch(vec![clear]);
    assert_eq!(h.prefix(&tokens(1)), 0, "the disk-only page is gone");
    let _ = answer(&mut h, &round, true);
    assert_eq!(
        h.status().counters.objects,
        0,
        "a suspect of the cleared tenant does not come back"
    );
}

/// The real 0.3.14 master with a disk tier (see the note in the file): what it sent for one
/// TP 2 page put with disk replicas, one object force-removed, the others evicted from memory.
const DISK_CAPTURE: &str =
    include_str!("../../core/tests/fixtures/mooncake_0_3_14_disk_replica.jsonl");

fn unhex(hex: &str) -> Vec<u8> {
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex digit"))
        .collect()
}

#[test]
fn the_real_masters_memory_evictions_leave_disk_suspects_and_its_removal_leaves_none() {
    let mut h = verifying();
    let keys = page_keys();
    assert!(
        DISK_CAPTURE.contains(&keys[0]),
        "the capture is of this page"
    );
    for line in DISK_CAPTURE.lines() {
        let rec: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        if rec["step"] == "force-remove the first key" {
            assert_eq!(h.prefix(&tokens(1)), 1, "put on both media: a hit");
            assert_eq!(disk_only_pages(&h), 0, "with memory copies");
        }
        let Some(frames) = rec["frames_hex"].as_array() else {
            continue;
        };
        let frames: Vec<Vec<u8>> = frames.iter().map(|f| unhex(f.as_str().unwrap())).collect();
        let fx = h.feed_frames(&frames);
        assert!(
            !fx.iter()
                .any(|e| matches!(e, Effect::Report(Report::Cleared { .. }))),
            "{fx:?}"
        );
    }
    // `_0_k` left both media; the other three objects left memory only.
    assert_eq!(h.prefix(&tokens(1)), 0);
    assert_eq!(h.status().suspects, 3);
    let round = next_round(&mut h);
    for key in &keys[1..] {
        assert!(round.1.contains(key), "{key} is verified");
    }
    assert!(!round.1.contains(&keys[0]));
    // The master still holds them on disk; `_0_k` is stored again, on disk only.
    let _ = answer(&mut h, &round, true);
    // The stream runs on after the capture's last batch (sequence 64, event id 108).
    h.next_seq = 65;
    h.set_next_event_id(109);
    let _ = h.batch(vec![on_disk(stored(keys[0].clone()))]);
    assert_eq!(h.prefix(&tokens(1)), 1);
    assert_eq!(disk_only_pages(&h), 1);
}
