//! Hostile streams: every bad message is decoded or refused with a typed error and counted,
//! nothing panics or grows; a refused batch of this stream (right topic, readable sequence) is
//! loss, so the index forgets (its events are unknown); a flood of unique keys stays within the
//! page cap.

use hicache_index::{
    Config, Effect, FrameError, IndexConfig, PayloadError, Report, Seq, StrayReason, Timestamp,
    DEFAULT_TENANT,
};
use hicache_index_sim::encode::{encode_message, MasterFlavor, OwnedBatch, OwnedEvent};
use hicache_index_tests::{config, mha, page_hashes, store_page, stored, Harness};

/// A harness with one full page stored (TP 1, tokens 1..=4) and the tokens to ask about it.
fn with_one_page() -> (Harness, Vec<u32>) {
    let layout = mha(1);
    let mut h = Harness::connected(config(layout.clone()));
    let tokens: Vec<u32> = (1..=4).collect();
    let _ = h.batch(store_page(&layout, &page_hashes(&layout, &tokens)[0]));
    assert_eq!(h.prefix(&tokens), 1);
    (h, tokens)
}

/// Feeds `[topic, seq 2, payload]` and returns the effects.
fn feed_payload(h: &mut Harness, payload: Vec<u8>) -> Vec<Effect> {
    let frames = [Vec::new(), 2u64.to_be_bytes().to_vec(), payload];
    h.feed_frames(&frames).to_vec()
}

/// Asserts that a refused batch was taken as loss: counted, and the index forgot.
fn assert_loss(h: &Harness, tokens: &[u32]) {
    let c = h.status().counters;
    assert_eq!((c.malformed_payload, c.clears_undecodable), (1, 1), "{c:?}");
    assert_eq!(h.prefix(tokens), 0, "what the batch changed is unknown");
}

fn payload_kind(fx: &[Effect]) -> Option<PayloadError> {
    fx.iter().find_map(|e| match e {
        Effect::Report(Report::Malformed {
            error: FrameError::Payload { kind, .. },
        }) => Some(*kind),
        _ => None,
    })
}

#[test]
fn a_million_tiny_events_in_one_batch_are_refused_counted_and_taken_as_loss() {
    let (mut h, tokens) = with_one_page();
    let n: u32 = 1_000_000;
    let mut payload = vec![0x93, 0x00, 0xdd];
    payload.extend(n.to_be_bytes());
    payload.extend(std::iter::repeat_n(0x80u8, n as usize));
    payload.push(0x00);
    let fx = feed_payload(&mut h, payload);
    assert_eq!(
        payload_kind(&fx),
        Some(PayloadError::TooManyEvents { declared: n }),
        "{fx:?}"
    );
    assert_loss(&h, &tokens);
}

#[test]
fn a_length_header_claiming_gigabytes_is_refused() {
    let (mut h, tokens) = with_one_page();
    // [0, [ {"object_key": str32(4 GiB) "abc"} ], 0]
    let mut payload = vec![0x93, 0x00, 0x91, 0x81, 0xaa];
    payload.extend(b"object_key");
    payload.extend([0xdb, 0xff, 0xff, 0xff, 0xff]);
    payload.extend(b"abc");
    let fx = feed_payload(&mut h, payload);
    assert_eq!(payload_kind(&fx), Some(PayloadError::Truncated), "{fx:?}");
    assert_loss(&h, &tokens);
}

#[test]
fn sixty_four_kib_object_keys_are_counted_and_never_tracked() {
    let (mut h, tokens) = with_one_page();
    let page = page_hashes(&mha(1), &tokens)[0];
    let long_suffix = format!("{page}_{}", "k".repeat(64 * 1024));
    let long_prefix = format!("{}_{page}_0_k", "p".repeat(64 * 1024));
    let fx = h.batch(vec![
        stored("x".repeat(64 * 1024)),
        stored(long_suffix),
        stored(long_prefix),
    ]);
    assert!(fx.is_empty(), "{fx:?}");
    let c = h.status().counters;
    assert_eq!((c.unparsed_keys, c.untracked_objects), (2, 1));
    assert_eq!(
        (c.pages, c.objects),
        (1, 2),
        "the index holds only the good page"
    );
    assert_eq!(h.prefix(&tokens), 1);
}

#[test]
fn deep_nesting_is_refused() {
    let (mut h, tokens) = with_one_page();
    // [0, [ {"x": [[[[...]]]] } ], 0] nested 100 deep.
    let mut payload = vec![0x93, 0x00, 0x91, 0x81, 0xa1, b'x'];
    payload.extend(std::iter::repeat_n(0x91u8, 100));
    payload.push(0xc0);
    payload.push(0x00);
    let fx = feed_payload(&mut h, payload);
    assert_eq!(payload_kind(&fx), Some(PayloadError::TooDeep), "{fx:?}");
    assert_loss(&h, &tokens);
}

#[test]
fn invalid_utf8_in_an_object_key_is_refused() {
    let (mut h, tokens) = with_one_page();
    let batch = OwnedBatch {
        seq: Seq(2),
        timestamp: Timestamp::Millis(1),
        dp_rank: Some(0),
        events: vec![OwnedEvent::new(
            hicache_index::EventKind::Removed,
            "ZZZZZZZZ",
        )],
    };
    let mut frames = encode_message(b"", &batch, MasterFlavor::Upstream);
    let at = frames[2]
        .windows(8)
        .position(|w| w == b"ZZZZZZZZ")
        .expect("the key is in the payload");
    frames[2][at] = 0xff;
    let fx = h.feed_frames(&frames);
    assert_eq!(payload_kind(&fx), Some(PayloadError::InvalidUtf8), "{fx:?}");
    // The removal could not be read, so which object went is unknown.
    assert_loss(&h, &tokens);
}

#[test]
fn nan_and_negative_timestamps_are_values_not_errors() {
    let layout = mha(1);
    let mut h = Harness::connected(config(layout.clone()));
    let tokens: Vec<u32> = (1..=8).collect();
    let pages = page_hashes(&layout, &tokens);
    for (seq, (timestamp, page)) in [Timestamp::Seconds(f64::NAN), Timestamp::Negative(-5)]
        .into_iter()
        .zip(&pages)
        .enumerate()
    {
        let batch = OwnedBatch {
            seq: Seq(seq as u64 + 1),
            timestamp,
            dp_rank: None,
            events: store_page(&layout, page),
        };
        let fx = h.feed_frames(&encode_message(b"", &batch, MasterFlavor::Upstream));
        assert!(fx.is_empty(), "{fx:?}");
    }
    assert_eq!(h.prefix(&tokens), 2);
}

#[test]
fn sequences_at_u64_max_and_wrapping_restart_the_stream() {
    let (mut h, tokens) = with_one_page();
    let fx = h.batch_at(u64::MAX, vec![stored("a_key")]);
    assert!(
        fx.iter()
            .any(|e| matches!(e, Effect::Report(Report::Gap { .. }))),
        "{fx:?}"
    );
    let fx = h.batch_at(0, vec![stored("b_key")]);
    assert!(
        fx.contains(&Effect::Report(Report::OtherRun {
            position: Some(Seq(u64::MAX)),
            received: Seq(0)
        })),
        "{fx:?}"
    );
    let fx = h.batch_at(1, vec![stored("c_key")]);
    assert!(fx.is_empty(), "the new stream continues: {fx:?}");
    assert_eq!(h.prefix(&tokens), 0);
}

#[test]
fn stray_frames_of_any_count_are_ignored() {
    let (mut h, tokens) = with_one_page();
    for n in [0usize, 1, 2, 4, 9] {
        let frames: Vec<Vec<u8>> = (0..n).map(|i| vec![i as u8; i]).collect();
        let fx = h.feed_frames(&frames);
        assert_eq!(
            fx.to_vec(),
            vec![Effect::Report(Report::Stray {
                reason: StrayReason::FrameCount(n)
            })]
        );
    }
    assert_eq!(h.prefix(&tokens), 1);
}

/// The process's resident set, in bytes (Linux).
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm's second field");
    pages * 4096
}

#[test]
fn a_flood_of_unique_keys_stays_within_the_page_cap_and_resident_memory_stays_flat() {
    const CAP: usize = 4096;
    const BATCHES: u64 = 8_000;
    let layout = mha(1);
    let mut h = Harness::connected(Config {
        index: IndexConfig {
            max_pages: CAP,
            ..IndexConfig::default()
        },
        ..config(layout.clone())
    });
    let mut payload_bytes = 0usize;
    let mut resident_at_quarter = 0;
    for b in 0..BATCHES {
        let events: Vec<OwnedEvent> = (0..32u64)
            .flat_map(|i| {
                let mut h = [0u8; 32];
                h[..8].copy_from_slice(&(b * 32 + i).to_le_bytes());
                h[8] = 0x5a;
                layout
                    .object_keys(&hicache_index::PageHash(h))
                    .map(stored)
                    .collect::<Vec<_>>()
            })
            .collect();
        let frames = h.frames(b + 1, events);
        payload_bytes += frames[2].len();
        let fx = h.feed_frames(&frames);
        assert!(fx.is_empty(), "{fx:?}");
        if b == BATCHES / 4 {
            resident_at_quarter = resident_bytes();
        }
        h.log.clear();
    }
    let grown = resident_bytes().saturating_sub(resident_at_quarter);
    let c = h.status().counters;
    println!(
        "flood: {} events ({} MiB of payload) into a cap of {CAP} pages: {} pages held, {} evicted; \
         resident memory grew {} KiB over the last three quarters",
        c.events,
        payload_bytes >> 20,
        c.pages,
        c.evictions,
        grown >> 10
    );
    assert_eq!(c.pages as usize, CAP);
    assert_eq!(c.evictions, BATCHES * 32 - CAP as u64);
    assert_eq!(c.objects as usize, 2 * CAP);
    assert!(
        h.session.reader().holds_object(
            DEFAULT_TENANT,
            &layout
                .object_keys(&hicache_index::PageHash({
                    let mut last = [0u8; 32];
                    last[..8].copy_from_slice(&(BATCHES * 32 - 1).to_le_bytes());
                    last[8] = 0x5a;
                    last
                }))
                .next()
                .unwrap()
        ),
        "the newest page is held"
    );
    assert!(
        grown < 8 << 20,
        "resident memory grew {grown} bytes while the index stayed at its cap"
    );
}
