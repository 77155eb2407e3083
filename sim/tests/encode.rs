//! The encoder reproduces the Mooncake master's bytes, and the decoder reads back what it writes.

use hicache_index::frame::decode;
use hicache_index::{EventKind, Medium, Seq, Timestamp};
use hicache_index_sim::encode::{
    encode_message, encode_payload, encode_payload_into, EventIdSlots, MasterFlavor, OwnedBatch,
    OwnedEvent, FIXED_WIDTH_EVENT_ID,
};
use quickcheck::{Arbitrary, Gen, QuickCheck};
use serde_json::Value;
use std::path::PathBuf;

fn fixture(name: &str) -> String {
    let path: PathBuf = [
        env!("CARGO_MANIFEST_DIR"),
        "..",
        "core",
        "tests",
        "fixtures",
        name,
    ]
    .iter()
    .collect();
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn unhex(hex: &str) -> Vec<u8> {
    hex::decode(hex).expect("hex digits")
}

fn opt_string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// Builds the batch a vector lists in its `decoded` field, with every wire field.
fn batch_from_listing(seq: Seq, decoded: &Value) -> OwnedBatch {
    let events = decoded[1]
        .as_array()
        .expect("events array")
        .iter()
        .map(|e| OwnedEvent {
            kind: match e["event_type"].as_str() {
                Some("stored") => EventKind::Stored,
                Some("removed") => EventKind::Removed,
                other => panic!("unexpected event_type {other:?}"),
            },
            object_key: opt_string(&e["object_key"]),
            tenant_id: opt_string(&e["tenant_id"]),
            group_id: opt_string(&e["group_id"]).map(String::into_bytes),
            medium: e["medium"].as_str().map(|m| match m {
                "cpu" => Medium::Cpu,
                "disk" => Medium::Disk,
                _ => Medium::Other,
            }),
            event_id: e["event_id"].as_u64(),
            timestamp_ms: e["timestamp"].as_u64().expect("event timestamp"),
            backend_id: e["backend_id"].as_str().expect("backend_id").to_owned(),
            dp_rank: e["dp_rank"].as_u64(),
            base_block_idx: e["base_block_idx"].as_u64(),
            session_id: opt_string(&e["session_id"]),
        })
        .collect();
    OwnedBatch {
        seq,
        timestamp: Timestamp::Millis(decoded[0].as_u64().expect("batch timestamp")),
        dp_rank: decoded[2].as_u64(),
        events,
    }
}

/// `(name, flavor, frames, decoded)` for every vector that has frames.
fn published_vectors() -> Vec<(String, MasterFlavor, Vec<Vec<u8>>, Value)> {
    let mut out = Vec::new();
    for (file, flavor) in [
        ("mooncake_frames.jsonl", MasterFlavor::Upstream),
        ("mooncake_0_3_14_capture.jsonl", MasterFlavor::Release0314),
    ] {
        for (i, line) in fixture(file).lines().enumerate() {
            let rec: Value = serde_json::from_str(line).expect("fixture line is JSON");
            let Some(frames) = rec["frames_hex"].as_array() else {
                continue;
            };
            let frames = frames
                .iter()
                .map(|f| unhex(f.as_str().expect("hex frame")))
                .collect();
            let name = rec["name"]
                .as_str()
                .map_or_else(|| format!("{file}[{i}]"), str::to_owned);
            out.push((name, flavor, frames, rec["decoded"].clone()));
        }
    }
    out
}

#[test]
fn re_encoding_every_vector_gives_its_exact_frames() {
    let vectors = published_vectors();
    assert_eq!(vectors.len(), 4 + 14, "both fixture files are read");
    for (name, flavor, frames, decoded) in vectors {
        let seq = Seq(u64::from_be_bytes(frames[1].as_slice().try_into().unwrap()));
        let batch = batch_from_listing(seq, &decoded);
        let encoded = encode_message(&frames[0], &batch, flavor);
        for (i, (got, want)) in encoded.iter().zip(&frames).enumerate() {
            assert!(
                got == want,
                "{name}: frame {i} differs\n got  {got:02x?}\n want {want:02x?}"
            );
        }
    }
}

#[test]
fn a_decoded_vector_survives_owning_and_re_encoding() {
    for (name, flavor, frames, _) in published_vectors() {
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let batch = decode(&refs).unwrap();
        let owned = OwnedBatch::from(&batch);
        let again = encode_message(b"", &owned, flavor);
        let again_refs: Vec<&[u8]> = again.iter().map(Vec::as_slice).collect();
        assert_eq!(decode(&again_refs).unwrap(), batch, "{name}");
    }
}

#[test]
fn encoding_into_a_reused_buffer_appends_the_same_bytes() {
    let (_, flavor, frames, decoded) = published_vectors().swap_remove(0);
    let batch = batch_from_listing(Seq(1), &decoded);
    let mut buf = Vec::new();
    for _ in 0..3 {
        buf.clear();
        encode_payload_into(&mut buf, &batch, flavor);
        assert_eq!(buf, frames[2]);
    }
    assert_eq!(encode_payload(&batch, flavor), frames[2]);
}

#[test]
fn a_batch_of_64_events_uses_an_array16() {
    let events = (0..64)
        .map(|i| OwnedEvent::new(EventKind::Stored, format!("key_{i}_k")))
        .collect();
    let batch = OwnedBatch {
        seq: Seq(9),
        timestamp: Timestamp::Millis(1_767_225_600_000),
        dp_rank: Some(0),
        events,
    };
    let payload = encode_payload(&batch, MasterFlavor::Release0314);
    assert_eq!(&payload[10..13], &[0xdc, 0x00, 64]);
    let frames = encode_message(b"", &batch, MasterFlavor::Release0314);
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    assert_eq!(decode(&refs).unwrap(), batch.as_batch());
}

#[test]
fn renumbered_event_ids_decode_as_written_and_nothing_else_changes() {
    for flavor in [MasterFlavor::Upstream, MasterFlavor::Release0314] {
        let first = FIXED_WIDTH_EVENT_ID + 7;
        let mut batch = OwnedBatch {
            seq: Seq(3),
            timestamp: Timestamp::Millis(1_767_225_600_000),
            dp_rank: Some(0),
            events: (0..64u64)
                .map(|i| {
                    let kind = [EventKind::Stored, EventKind::Removed][i as usize % 2];
                    let mut e = OwnedEvent::new(kind, format!("key_{i}_k"));
                    e.event_id = Some(first + i);
                    e
                })
                .collect(),
        };
        let mut payload = encode_payload(&batch, flavor);
        let slots = EventIdSlots::find(&payload);
        assert_eq!(slots.len(), 64);
        assert_eq!(slots.renumber(&mut payload, 1 << 40), (1 << 40) + 64);
        for (i, e) in batch.events.iter_mut().enumerate() {
            e.event_id = Some((1 << 40) + i as u64);
        }
        assert_eq!(payload, encode_payload(&batch, flavor), "{flavor:?}");
    }
    // Short ids are not found (they cannot be rewritten in place).
    let mut e = OwnedEvent::new(EventKind::Stored, "k");
    e.event_id = Some(1);
    let batch = OwnedBatch {
        seq: Seq(1),
        timestamp: Timestamp::Millis(1),
        dp_rank: None,
        events: vec![e],
    };
    assert!(EventIdSlots::find(&encode_payload(&batch, MasterFlavor::Upstream)).is_empty());
}

/// An arbitrary batch with an arbitrary flavor.
#[derive(Clone, Debug)]
struct AnyBatch(OwnedBatch, MasterFlavor);

fn any_string(g: &mut Gen) -> String {
    let s = String::arbitrary(g);
    // Now and then a long one, to reach str8 and str16.
    match u8::arbitrary(g) % 8 {
        0 => s.repeat(40),
        1 => s.repeat(700),
        _ => s,
    }
}

fn any_opt_string(g: &mut Gen) -> Option<String> {
    bool::arbitrary(g).then(|| any_string(g))
}

impl Arbitrary for AnyBatch {
    fn arbitrary(g: &mut Gen) -> Self {
        let timestamp = match u8::arbitrary(g) % 4 {
            0 => Timestamp::Millis(u64::arbitrary(g)),
            // Any value in i64::MIN..=-1, mostly small ones.
            1 => Timestamp::Negative(-1 - (i64::arbitrary(g) & i64::MAX)),
            2 => {
                let s = f64::arbitrary(g);
                Timestamp::Seconds(if s.is_nan() { 0.5 } else { s })
            }
            _ => Timestamp::Nil,
        };
        let n_events = usize::arbitrary(g) % 80;
        let events = (0..n_events)
            .map(|_| OwnedEvent {
                kind: *g
                    .choose(&[
                        EventKind::Stored,
                        EventKind::Removed,
                        EventKind::Cleared,
                        EventKind::Unknown,
                    ])
                    .unwrap(),
                object_key: any_opt_string(g),
                tenant_id: any_opt_string(g),
                group_id: any_opt_string(g).map(String::into_bytes),
                medium: *g
                    .choose(&[
                        None,
                        Some(Medium::Cpu),
                        Some(Medium::Disk),
                        Some(Medium::Other),
                    ])
                    .unwrap(),
                event_id: Option::arbitrary(g),
                timestamp_ms: u64::arbitrary(g),
                backend_id: any_string(g),
                dp_rank: Option::arbitrary(g),
                base_block_idx: Option::arbitrary(g),
                session_id: any_opt_string(g),
            })
            .collect();
        let batch = OwnedBatch {
            seq: Seq(u64::arbitrary(g)),
            timestamp,
            dp_rank: Option::arbitrary(g),
            events,
        };
        let flavor = *g
            .choose(&[MasterFlavor::Upstream, MasterFlavor::Release0314])
            .unwrap();
        AnyBatch(batch, flavor)
    }
}

fn decodes_to_what_was_encoded(AnyBatch(batch, flavor): AnyBatch) -> bool {
    let frames = encode_message(b"", &batch, flavor);
    let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    decode(&refs) == Ok(batch.as_batch())
}

#[test]
fn decoding_an_encoded_batch_gives_the_batch_back() {
    QuickCheck::new()
        .tests(300)
        .quickcheck(decodes_to_what_was_encoded as fn(AnyBatch) -> bool);
}
