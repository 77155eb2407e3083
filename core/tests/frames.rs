//! The frame decoder against the published vectors, malformed input and allocation limits.

// The counting allocator at the bottom needs `unsafe impl GlobalAlloc`.
#![allow(unsafe_code)]

use hicache_index::frame::{decode, MAX_DEPTH};
use hicache_index::{Batch, EventKind, FrameError, Medium, PayloadError, Seq, Timestamp};
use quickcheck::{Arbitrary, Gen};
use quickcheck_macros::quickcheck;
use serde_json::Value;

const VECTORS: &str = include_str!("fixtures/mooncake_frames.jsonl");
const CAPTURE: &str = include_str!("fixtures/mooncake_0_3_14_capture.jsonl");
/// One batch per publisher payload generation (PR 2214, PR 2876, PR 3744), written by
/// `fixtures/payload_generations.py` from the upstream packer (sources named per record).
const GENERATIONS: &str = include_str!("fixtures/payload_generations.jsonl");
/// The real 0.3.14 master with a disk tier (`tests/mooncake/capture_disk_replica.py`).
const DISK_CAPTURE: &str = include_str!("fixtures/mooncake_0_3_14_disk_replica.jsonl");
const SEQ_ONE: [u8; 8] = 1u64.to_be_bytes();

fn unhex(hex: &str) -> Vec<u8> {
    hex::decode(hex).expect("an even number of hex digits")
}

fn records(jsonl: &str) -> Vec<Value> {
    jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("fixture line is JSON"))
        .collect()
}

/// Every vector that has frames, as `(name, frames)`.
fn published_frames() -> Vec<(String, Vec<Vec<u8>>, Value)> {
    let mut out = Vec::new();
    for (file, jsonl) in [("vectors", VECTORS), ("capture", CAPTURE)] {
        for (i, rec) in records(jsonl).into_iter().enumerate() {
            let Some(frames) = rec.get("frames_hex").and_then(Value::as_array) else {
                continue;
            };
            let frames = frames
                .iter()
                .map(|f| unhex(f.as_str().expect("frame is a hex string")))
                .collect();
            let name = rec
                .get("name")
                .and_then(Value::as_str)
                .map_or_else(|| format!("{file}[{i}]"), str::to_owned);
            out.push((name, frames, rec["decoded"].clone()));
        }
    }
    out
}

fn frame_refs(frames: &[Vec<u8>]) -> Vec<&[u8]> {
    frames.iter().map(Vec::as_slice).collect()
}

/// The first vector's payload: one batch of two stored events.
fn real_payload() -> Vec<u8> {
    published_frames()[0].1[2].clone()
}

fn decode_payload(payload: &[u8]) -> Result<Batch<'_>, FrameError> {
    decode(&[b"", &SEQ_ONE, payload])
}

fn payload_error(offset: usize, kind: PayloadError) -> FrameError {
    FrameError::Payload { offset, kind }
}

/// A minimal msgpack writer for hand-made payloads.
#[derive(Default)]
struct Mp(Vec<u8>);

impl Mp {
    fn raw(mut self, bytes: &[u8]) -> Self {
        self.0.extend_from_slice(bytes);
        self
    }
    fn str(self, s: &str) -> Self {
        self.str_bytes(s.as_bytes())
    }
    fn str_bytes(mut self, s: &[u8]) -> Self {
        match s.len() {
            n @ 0..=31 => self.0.push(0xa0 | n as u8),
            n @ 32..=255 => self.0.extend_from_slice(&[0xd9, n as u8]),
            n => {
                self.0.push(0xda);
                self.0.extend_from_slice(&(n as u16).to_be_bytes());
            }
        }
        self.0.extend_from_slice(s);
        self
    }
    fn array(self, len: u8) -> Self {
        assert!(len < 16);
        self.raw(&[0x90 | len])
    }
    fn map(self, len: u8) -> Self {
        assert!(len < 16);
        self.raw(&[0x80 | len])
    }
    fn nil(self) -> Self {
        self.raw(&[0xc0])
    }
    fn uint(self, v: u64) -> Self {
        self.raw(&[0xcf]).raw(&v.to_be_bytes())
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

/// `[1767225600000, [<events>], 0]` with `n_events` events to be appended, then the trailer.
fn batch_head(n_events: u8) -> Mp {
    Mp::default()
        .array(3)
        .uint(1_767_225_600_000)
        .array(n_events)
}

fn batch_tail(mp: Mp) -> Vec<u8> {
    mp.raw(&[0x00]).0
}

/// One event map with only the fields the index uses.
fn plain_event(mp: Mp, key: &str) -> Mp {
    mp.map(3)
        .str("event_type")
        .str("stored")
        .str("object_key")
        .str(key)
        .str("tenant_id")
        .str("default")
}

fn as_opt_str(v: &Value) -> Option<&str> {
    match v {
        Value::Null => None,
        Value::String(s) => Some(s),
        other => panic!("expected a string or null, got {other}"),
    }
}

#[test]
fn every_published_vector_decodes_to_its_listed_fields() {
    let vectors = published_frames();
    assert_eq!(vectors.len(), 4 + 14, "both fixture files are read");
    for (name, frames, decoded) in &vectors {
        let batch = decode(&frame_refs(frames)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected_seq = u64::from_be_bytes(frames[1].as_slice().try_into().unwrap());
        assert_eq!(batch.seq, Seq(expected_seq), "{name}");
        assert_eq!(
            batch.timestamp,
            Timestamp::Millis(decoded[0].as_u64().unwrap()),
            "{name}"
        );
        assert_eq!(batch.dp_rank, decoded[2].as_u64(), "{name}");
        let events = decoded[1].as_array().unwrap();
        assert_eq!(batch.events.len(), events.len(), "{name}");
        for (got, want) in batch.events.iter().zip(events) {
            let kind = match want["event_type"].as_str().unwrap() {
                "stored" => EventKind::Stored,
                "removed" => EventKind::Removed,
                other => panic!("{name}: unexpected event_type {other}"),
            };
            let medium = match want["medium"].as_str().unwrap() {
                "cpu" => Medium::Cpu,
                "disk" => Medium::Disk,
                _ => Medium::Other,
            };
            assert_eq!(got.kind, kind, "{name}");
            assert_eq!(got.object_key, as_opt_str(&want["object_key"]), "{name}");
            assert_eq!(got.tenant_id, as_opt_str(&want["tenant_id"]), "{name}");
            assert_eq!(
                got.group_id,
                as_opt_str(&want["group_id"]).map(str::as_bytes),
                "{name}"
            );
            assert_eq!(got.medium, Some(medium), "{name}");
            assert_eq!(got.event_id, want["event_id"].as_u64(), "{name}");
        }
    }
}

#[test]
fn every_payload_generation_decodes_to_its_listed_fields() {
    let recs = records(GENERATIONS);
    let names: Vec<&str> = recs.iter().map(|r| r["name"].as_str().unwrap()).collect();
    for generation in ["pr2214_", "pr2876_", "pr3744_"] {
        assert!(
            names.iter().any(|n| n.starts_with(generation)),
            "no vector of {generation}"
        );
    }
    for rec in &recs {
        assert!(
            rec["source"].is_string(),
            "{} names its source",
            rec["name"]
        );
    }
    check_listed_fields(&recs);
}

#[test]
fn every_batch_of_the_disk_replica_capture_decodes_to_its_listed_fields() {
    let recs: Vec<Value> = records(DISK_CAPTURE)
        .into_iter()
        .filter(|r| r.get("frames_hex").is_some())
        .collect();
    assert_eq!(recs.len(), 64);
    check_listed_fields(&recs);
}

/// Decodes each record's frames and compares every event with its `decoded` form.
fn check_listed_fields(recs: &[Value]) {
    for rec in recs {
        let name = rec["name"].as_str().unwrap_or("capture");
        let frames: Vec<Vec<u8>> = rec["frames_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| unhex(f.as_str().unwrap()))
            .collect();
        let batch = decode(&frame_refs(&frames)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let decoded = &rec["decoded"];
        assert_eq!(batch.dp_rank, decoded[2].as_u64(), "{name}");
        let events = decoded[1].as_array().unwrap();
        assert_eq!(batch.events.len(), events.len(), "{name}");
        for (got, want) in batch.events.iter().zip(events) {
            let kind = match want["event_type"].as_str().unwrap() {
                "stored" => EventKind::Stored,
                "removed" => EventKind::Removed,
                "cleared" => EventKind::Cleared,
                other => panic!("{name}: unexpected event_type {other}"),
            };
            let medium = want["medium"].as_str().map(|m| match m {
                "cpu" => Medium::Cpu,
                "disk" => Medium::Disk,
                _ => Medium::Other,
            });
            assert_eq!(got.kind, kind, "{name}");
            assert_eq!(
                got.object_key,
                want.get("object_key").and_then(Value::as_str),
                "{name}"
            );
            assert_eq!(got.tenant_id, as_opt_str(&want["tenant_id"]), "{name}");
            assert_eq!(
                got.group_id,
                want.get("group_id")
                    .and_then(Value::as_str)
                    .map(str::as_bytes),
                "{name}"
            );
            assert_eq!(got.medium, medium, "{name}");
            assert_eq!(got.event_id, want["event_id"].as_u64(), "{name}");
        }
    }
}

#[test]
fn a_pr2876_cleared_event_names_its_tenant_and_no_object() {
    let recs = records(GENERATIONS);
    let rec = recs
        .iter()
        .find(|r| r["name"] == "pr2876_removed_per_medium_then_cleared")
        .expect("the vector is there");
    let payload = unhex(rec["frames_hex"][2].as_str().unwrap());
    let batch = decode_payload(&payload).unwrap();
    let cleared = batch.events.last().unwrap();
    assert_eq!(cleared.kind, EventKind::Cleared);
    assert_eq!(cleared.tenant_id, Some("default"));
    assert_eq!(cleared.object_key, None);
    assert_eq!(cleared.medium, None);
    let media: Vec<_> = batch.events[..2].iter().map(|e| e.medium).collect();
    assert_eq!(media, [Some(Medium::Cpu), Some(Medium::Disk)]);
}

#[test]
fn the_unpublished_vector_has_no_frames() {
    let recs = records(VECTORS);
    let unpublished: Vec<_> = recs
        .iter()
        .filter(|r| r["published"] == Value::Bool(false))
        .collect();
    assert_eq!(unpublished.len(), 1);
    let frames = unpublished[0].get("frames_hex").unwrap_or(&Value::Null);
    assert!(
        frames.is_null(),
        "an unpublished vector has frames: {frames}"
    );
}

#[test]
fn two_frames_are_a_frame_count_error() {
    let payload = real_payload();
    assert_eq!(
        decode(&[&SEQ_ONE, &payload]),
        Err(FrameError::FrameCount { found: 2 })
    );
}

#[test]
fn four_frames_are_a_frame_count_error() {
    let payload = real_payload();
    assert_eq!(
        decode(&[b"", b"", &SEQ_ONE, &payload]),
        Err(FrameError::FrameCount { found: 4 })
    );
}

#[test]
fn a_seven_byte_seq_is_a_seq_length_error() {
    let payload = real_payload();
    assert_eq!(
        decode(&[b"", &SEQ_ONE[..7], &payload]),
        Err(FrameError::SeqLength { len: 7 })
    );
}

#[test]
fn the_topic_is_left_to_the_caller() {
    let payload = real_payload();
    assert!(decode(&[b"some-other-topic", &SEQ_ONE, &payload]).is_ok());
}

#[test]
fn every_truncation_of_every_vector_is_a_truncated_error() {
    for (name, frames, _) in published_frames() {
        let payload = &frames[2];
        for cut in 0..payload.len() {
            match decode_payload(&payload[..cut]) {
                Err(FrameError::Payload {
                    offset,
                    kind: PayloadError::Truncated,
                }) => assert!(offset <= cut, "{name} cut at {cut}: offset {offset}"),
                other => panic!("{name} cut at {cut}: {other:?}"),
            }
        }
    }
}

#[test]
fn a_str32_claiming_four_gigabytes_is_truncated_without_allocating_it() {
    let mp = batch_head(1).map(1).str("object_key");
    let at = mp.len();
    let payload = batch_tail(mp.raw(&[0xdb, 0xff, 0xff, 0xff, 0xff]).raw(b"abc"));
    let (result, allocs) = count_allocations(|| decode_payload(&payload).map(|_| ()));
    assert_eq!(result, Err(payload_error(at, PayloadError::Truncated)));
    assert!(allocs.bytes < 1024, "allocated {} bytes", allocs.bytes);
}

#[test]
fn an_array32_of_four_billion_events_is_too_many_without_allocating() {
    // [0, array32(u32::MAX) ..., 0]: 10 bytes in all.
    let payload = [0x93, 0x00, 0xdd, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00];
    let (result, allocs) = count_allocations(|| decode_payload(&payload).map(|_| ()));
    let too_many = PayloadError::TooManyEvents { declared: u32::MAX };
    assert_eq!(result, Err(payload_error(2, too_many)));
    assert_eq!(allocs.count, 0);
}

#[test]
fn an_events_array_longer_than_the_bytes_left_is_truncated_without_allocating() {
    // [0, array16(1000) ..., 0]: 1,000 events declared, 3 bytes left.
    let payload = [0x93, 0x00, 0xdc, 0x03, 0xe8, 0x80, 0x80, 0x00];
    let (result, allocs) = count_allocations(|| decode_payload(&payload).map(|_| ()));
    assert_eq!(result, Err(payload_error(2, PayloadError::Truncated)));
    assert_eq!(allocs.count, 0);
}

#[test]
fn a_map32_event_claiming_four_billion_fields_is_truncated() {
    let payload = batch_tail(batch_head(1).raw(&[0xdf, 0xff, 0xff, 0xff, 0xff]));
    assert_eq!(
        decode_payload(&payload),
        Err(payload_error(11, PayloadError::Truncated))
    );
}

#[test]
fn an_integer_object_key_is_a_wrong_type_at_its_offset() {
    let mp = batch_head(1)
        .map(2)
        .str("event_type")
        .str("stored")
        .str("object_key");
    let at = mp.len();
    let payload = batch_tail(mp.raw(&[0x2a]));
    assert_eq!(
        decode_payload(&payload),
        Err(payload_error(
            at,
            PayloadError::WrongType {
                expected: "a string or nil",
                marker: 0x2a
            }
        ))
    );
}

#[test]
fn a_string_event_id_is_a_wrong_type_at_its_offset() {
    let mp = batch_head(1).map(1).str("event_id");
    let at = mp.len();
    let payload = batch_tail(mp.str("7"));
    assert!(matches!(
        decode_payload(&payload),
        Err(FrameError::Payload { offset, kind: PayloadError::WrongType { marker: 0xa1, .. } })
            if offset == at
    ));
}

#[test]
fn a_negative_event_id_is_a_wrong_type() {
    let mp = batch_head(1).map(1).str("event_id");
    let at = mp.len();
    let payload = batch_tail(mp.raw(&[0xff]));
    assert!(matches!(
        decode_payload(&payload),
        Err(FrameError::Payload { offset, kind: PayloadError::WrongType { marker: 0xff, .. } })
            if offset == at
    ));
}

#[test]
fn a_string_timestamp_is_a_wrong_type_at_offset_one() {
    let payload = Mp::default().array(3).str("now").array(0).nil().0;
    assert!(matches!(
        decode_payload(&payload),
        Err(FrameError::Payload {
            offset: 1,
            kind: PayloadError::WrongType { marker: 0xa3, .. }
        })
    ));
}

#[test]
fn events_that_are_not_an_array_are_a_wrong_type() {
    let payload = Mp::default().array(3).uint(1).nil().nil().0;
    assert!(matches!(
        decode_payload(&payload),
        Err(FrameError::Payload {
            offset: 10,
            kind: PayloadError::WrongType { marker: 0xc0, .. }
        })
    ));
}

#[test]
fn a_string_dp_rank_is_a_wrong_type_at_its_offset() {
    let mp = Mp::default().array(3).uint(1).array(0);
    let at = mp.len();
    let payload = mp.str("0").0;
    assert!(matches!(
        decode_payload(&payload),
        Err(FrameError::Payload { offset, kind: PayloadError::WrongType { marker: 0xa1, .. } })
            if offset == at
    ));
}

#[test]
fn a_payload_that_is_not_an_array_is_a_wrong_type_at_offset_zero() {
    assert!(matches!(
        decode_payload(&[0x80]),
        Err(FrameError::Payload {
            offset: 0,
            kind: PayloadError::WrongType { marker: 0x80, .. }
        })
    ));
}

#[test]
fn a_top_level_array_of_one_is_a_short_array() {
    assert_eq!(
        decode_payload(&[0x91, 0x00]),
        Err(payload_error(0, PayloadError::ShortArray { len: 1 }))
    );
}

#[test]
fn an_empty_payload_is_truncated() {
    assert_eq!(
        decode_payload(&[]),
        Err(payload_error(0, PayloadError::Truncated))
    );
}

#[test]
fn invalid_utf8_in_object_key_is_rejected_at_its_offset() {
    let mp = batch_head(1).map(1).str("object_key");
    let at = mp.len();
    let payload = batch_tail(mp.str_bytes(b"abc\xff\xfe_0_k"));
    assert_eq!(
        decode_payload(&payload),
        Err(payload_error(at, PayloadError::InvalidUtf8))
    );
}

#[test]
fn invalid_utf8_in_an_ignored_field_is_skipped() {
    let payload = batch_tail(
        batch_head(1)
            .map(2)
            .str("model_name")
            .str_bytes(b"\xff\xfe")
            .str("object_key")
            .str("k"),
    );
    assert_eq!(
        decode_payload(&payload).unwrap().events[0].object_key,
        Some("k")
    );
}

#[test]
fn a_group_id_that_is_not_utf8_is_read_as_its_bytes() {
    let payload = batch_tail(
        batch_head(1)
            .map(2)
            .str("group_id")
            .str_bytes(b"sglang-hicache:\xff\xfe")
            .str("object_key")
            .str("k"),
    );
    let batch = decode_payload(&payload).expect("only compared with the key, never text");
    assert_eq!(
        batch.events[0].group_id,
        Some(&b"sglang-hicache:\xff\xfe"[..])
    );
    assert_eq!(batch.events[0].object_key, Some("k"));
}

/// `depth` nested arrays around a zero, as the value of an ignored field.
fn nested_ignored_field(depth: usize) -> (usize, Vec<u8>) {
    let mut mp = batch_head(1).map(2).str("seq_hashes");
    let at = mp.len();
    for _ in 0..depth {
        mp = mp.array(1);
    }
    mp = mp.raw(&[0x00]).str("object_key").str("k");
    (at, batch_tail(mp))
}

#[test]
fn deep_nesting_in_an_ignored_field_is_too_deep() {
    // Levels: top array 0, events 1, event map 2, field values 3.
    let limit = MAX_DEPTH as usize - 3;
    let (_, ok) = nested_ignored_field(limit);
    assert_eq!(decode_payload(&ok).unwrap().events[0].object_key, Some("k"));

    let (at, too_deep) = nested_ignored_field(limit + 1);
    assert_eq!(
        decode_payload(&too_deep),
        Err(payload_error(at + limit, PayloadError::TooDeep))
    );

    let (_, very_deep) = nested_ignored_field(100_000);
    assert!(matches!(
        decode_payload(&very_deep),
        Err(FrameError::Payload {
            kind: PayloadError::TooDeep,
            ..
        })
    ));
}

#[test]
fn bytes_after_the_top_level_array_are_trailing_bytes() {
    let mut payload = real_payload();
    let at = payload.len();
    payload.push(0xc0);
    assert_eq!(
        decode_payload(&payload),
        Err(payload_error(at, PayloadError::TrailingBytes))
    );
}

#[test]
fn the_reserved_marker_in_an_ignored_field_is_rejected() {
    let mp = batch_head(1).map(1).str("model_name");
    let at = mp.len();
    let payload = batch_tail(mp.raw(&[0xc1]));
    assert_eq!(
        decode_payload(&payload),
        Err(payload_error(at, PayloadError::ReservedMarker))
    );
}

#[test]
fn a_float_timestamp_is_seconds() {
    let payload = Mp::default()
        .array(3)
        .raw(&[0xcb])
        .raw(&1_767_225_600.25f64.to_be_bytes())
        .array(0)
        .nil()
        .0;
    assert_eq!(
        decode_payload(&payload).unwrap().timestamp,
        Timestamp::Seconds(1_767_225_600.25)
    );
    let payload = Mp::default()
        .array(2)
        .raw(&[0xca])
        .raw(&1.5f32.to_be_bytes())
        .array(0)
        .0;
    assert_eq!(
        decode_payload(&payload).unwrap().timestamp,
        Timestamp::Seconds(1.5)
    );
}

#[test]
fn integer_and_nil_timestamps_keep_their_kind() {
    let cases: [(&[u8], Timestamp); 5] = [
        (&[0x05], Timestamp::Millis(5)),
        (&[0xcc, 0xff], Timestamp::Millis(255)),
        (&[0xd0, 0x05], Timestamp::Millis(5)),
        (&[0xfb], Timestamp::Negative(-5)),
        (&[0xc0], Timestamp::Nil),
    ];
    for (bytes, want) in cases {
        let payload = Mp::default().array(2).raw(bytes).array(0).0;
        assert_eq!(
            decode_payload(&payload).unwrap().timestamp,
            want,
            "{bytes:02x?}"
        );
    }
}

#[test]
fn a_nil_or_missing_dp_rank_is_none() {
    let nil = Mp::default().array(3).uint(1).array(0).nil().0;
    assert_eq!(decode_payload(&nil).unwrap().dp_rank, None);
    let missing = Mp::default().array(2).uint(1).array(0).0;
    assert_eq!(decode_payload(&missing).unwrap().dp_rank, None);
    let present = Mp::default().array(3).uint(1).array(0).raw(&[0x07]).0;
    assert_eq!(decode_payload(&present).unwrap().dp_rank, Some(7));
}

#[test]
fn elements_after_dp_rank_are_skipped() {
    let payload = Mp::default()
        .array(5)
        .uint(1)
        .array(0)
        .raw(&[0x02])
        .map(1)
        .str("a")
        .array(2)
        .raw(&[0x01, 0x02])
        .raw(&[0xc4, 0x02, 0xff, 0xff])
        .0;
    let batch = decode_payload(&payload).unwrap();
    assert_eq!(batch.dp_rank, Some(2));
    assert!(batch.events.is_empty());
}

#[test]
fn the_legacy_type_is_used_when_event_type_is_missing_or_nil() {
    let payload = batch_tail(
        batch_head(3)
            .map(2)
            .str("type")
            .str("BlockRemoved")
            .str("object_key")
            .str("a")
            .map(2)
            .str("event_type")
            .nil()
            .str("type")
            .str("BlockStored")
            .map(1)
            .str("type")
            .str("AllBlocksCleared"),
    );
    let kinds: Vec<_> = decode_payload(&payload)
        .unwrap()
        .events
        .iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(
        kinds,
        [EventKind::Removed, EventKind::Stored, EventKind::Cleared]
    );
}

#[test]
fn an_event_without_any_type_is_unknown() {
    let payload = batch_tail(batch_head(1).map(1).str("object_key").str("a"));
    let batch = decode_payload(&payload).unwrap();
    assert_eq!(batch.events[0].kind, EventKind::Unknown);
    assert_eq!(batch.events[0].object_key, Some("a"));
}

#[test]
fn an_unknown_event_type_is_unknown_even_with_a_legacy_type() {
    let payload = batch_tail(
        batch_head(2)
            .map(2)
            .str("event_type")
            .str("evicted")
            .str("type")
            .str("BlockStored")
            .map(1)
            .str("event_type")
            .str("cleared"),
    );
    let batch = decode_payload(&payload).unwrap();
    assert_eq!(batch.events[0].kind, EventKind::Unknown);
    assert_eq!(batch.events[1].kind, EventKind::Cleared);
}

#[test]
fn unknown_fields_of_every_type_are_ignored() {
    let payload = batch_tail(
        batch_head(1)
            .map(14)
            .str("future_string")
            .str("x")
            .str("future_map")
            .map(2)
            .str("a")
            .array(1)
            .nil()
            .raw(&[0x01])
            .raw(&[0xc3])
            .str("future_bin")
            .raw(&[0xc5, 0x00, 0x03, 1, 2, 3])
            .str("future_ext")
            .raw(&[0xc7, 0x02, 0x05, 0xaa, 0xbb])
            .str("future_fixext")
            .raw(&[0xd8, 0x01])
            .raw(&[0u8; 16])
            .str("future_float")
            .raw(&[0xcb])
            .raw(&0.5f64.to_be_bytes())
            .raw(&[0x07]) // an integer key ...
            .str("ignored") // ... and its value
            .array(1) // an array key ...
            .str("object_key")
            .str("not-the-key") // ... and its value
            .str("event_type")
            .str("removed")
            .str("object_key")
            .str("k_0_v")
            .str("tenant_id")
            .nil()
            .str("group_id")
            .str("sglang-hicache:k")
            .str("medium")
            .str("ssd")
            .str("event_id")
            .raw(&[0xcd, 0x01, 0x00]),
    );
    let batch = decode_payload(&payload).unwrap();
    let event = batch.events[0];
    assert_eq!(event.kind, EventKind::Removed);
    assert_eq!(event.object_key, Some("k_0_v"));
    assert_eq!(event.tenant_id, None);
    assert_eq!(event.group_id, Some(&b"sglang-hicache:k"[..]));
    assert_eq!(event.medium, Some(Medium::Other));
    assert_eq!(event.event_id, Some(256));
}

#[test]
fn a_positional_array_event_is_unknown_and_the_next_event_still_decodes() {
    let payload = batch_tail(
        plain_event(
            batch_head(2)
                .array(4)
                .str("BlockStored")
                .array(2)
                .raw(&[0x01, 0x02])
                .nil()
                .raw(&[0x10]),
            "after",
        )
        .raw(&[]),
    );
    let batch = decode_payload(&payload).unwrap();
    let positional = batch.events[0];
    assert_eq!(positional.kind, EventKind::Unknown);
    assert_eq!(
        (
            positional.object_key,
            positional.tenant_id,
            positional.group_id,
            positional.medium,
            positional.event_id
        ),
        (None, None, None, None, None)
    );
    assert_eq!(batch.events[1].kind, EventKind::Stored);
    assert_eq!(batch.events[1].object_key, Some("after"));
}

#[test]
fn errors_display_as_one_sentence() {
    let errors = [
        FrameError::FrameCount { found: 2 },
        FrameError::SeqLength { len: 7 },
        payload_error(3, PayloadError::Truncated),
        payload_error(
            3,
            PayloadError::WrongType {
                expected: "an array",
                marker: 0xc0,
            },
        ),
        payload_error(0, PayloadError::ShortArray { len: 1 }),
        payload_error(3, PayloadError::InvalidUtf8),
        payload_error(3, PayloadError::TooDeep),
        payload_error(3, PayloadError::TrailingBytes),
        payload_error(3, PayloadError::ReservedMarker),
    ];
    for e in errors {
        let text = e.to_string();
        assert!(!text.is_empty() && !text.contains('\n'), "{text}");
    }
    assert_eq!(
        payload_error(
            12,
            PayloadError::WrongType {
                expected: "an array",
                marker: 0xc0
            }
        )
        .to_string(),
        "the payload is invalid at byte 12: expected an array, found msgpack marker 0xc0"
    );
}

/// A Mooncake batch of 64 stored events (the master's largest), built from a real event.
fn mooncake_batch_of_64() -> Vec<u8> {
    let payload = real_payload();
    // 0x93, 0xcf + 8 timestamp bytes, 0x92, then two events of equal length, then dp_rank.
    assert_eq!(&payload[..2], &[0x93, 0xcf]);
    assert_eq!(payload[10], 0x92);
    let event_len = (payload.len() - 12) / 2;
    let event = &payload[11..11 + event_len];
    let mut out = payload[..10].to_vec();
    out.extend_from_slice(&[0xdc, 0x00, 64]);
    for _ in 0..64 {
        out.extend_from_slice(event);
    }
    out.push(0x00);
    out
}

#[test]
fn decoding_a_64_event_mooncake_batch_allocates_once() {
    let payload = mooncake_batch_of_64();
    let (batch, allocs) = count_allocations(|| decode_payload(&payload));
    let batch = batch.unwrap();
    assert_eq!(batch.events.len(), 64);
    assert!(batch.events.iter().all(|e| e.kind == EventKind::Stored));
    assert!(allocs.count <= 1, "{} allocations", allocs.count);
}

#[quickcheck]
fn decode_never_panics_on_arbitrary_payloads(bytes: Vec<u8>) -> bool {
    let _ = decode_payload(&bytes);
    // Also from inside a plausible header, so random bytes reach the event decoder.
    let mut framed = vec![0x93, 0x00, 0xdc, 0x00, 0x40];
    framed.extend_from_slice(&bytes);
    let _ = decode_payload(&framed);
    true
}

#[quickcheck]
fn decode_never_panics_on_arbitrary_frames(frames: Vec<Vec<u8>>) -> bool {
    let refs = frame_refs(&frames);
    let _ = decode(&refs);
    true
}

/// One edit of a payload.
#[derive(Clone, Debug)]
enum Mutation {
    FlipBit { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, byte: u8 },
    Delete { at: usize },
    Truncate { len: usize },
}

impl Arbitrary for Mutation {
    fn arbitrary(g: &mut Gen) -> Self {
        let at = usize::arbitrary(g);
        match u8::arbitrary(g) % 5 {
            0 => Mutation::FlipBit {
                at,
                bit: u8::arbitrary(g) % 8,
            },
            1 => Mutation::Set {
                at,
                byte: u8::arbitrary(g),
            },
            2 => Mutation::Insert {
                at,
                byte: u8::arbitrary(g),
            },
            3 => Mutation::Delete { at },
            _ => Mutation::Truncate { len: at },
        }
    }
}

impl Mutation {
    fn apply(&self, bytes: &mut Vec<u8>) {
        let len = bytes.len();
        match *self {
            Mutation::FlipBit { at, bit } if len > 0 => bytes[at % len] ^= 1 << bit,
            Mutation::Set { at, byte } if len > 0 => bytes[at % len] = byte,
            Mutation::Insert { at, byte } => bytes.insert(at % (len + 1), byte),
            Mutation::Delete { at } if len > 0 => {
                bytes.remove(at % len);
            }
            Mutation::Truncate { len: keep } => bytes.truncate(keep % (len + 1)),
            _ => {}
        }
    }
}

#[quickcheck]
fn mutations_of_real_vectors_never_panic(which: usize, mutations: Vec<Mutation>) -> bool {
    let vectors = published_frames();
    let mut payload = vectors[which % vectors.len()].1[2].clone();
    for m in &mutations {
        m.apply(&mut payload);
    }
    match decode_payload(&payload) {
        Ok(batch) => batch.events.len() <= payload.len(),
        Err(FrameError::Payload { offset, .. }) => offset <= payload.len(),
        Err(other) => panic!("unexpected {other:?}"),
    }
}

// ---- a per-thread counting allocator ----

mod counting {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// Counts this thread's allocations, so that parallel tests do not disturb each other.
    pub(crate) struct CountingAllocator;

    thread_local! {
        static COUNT: Cell<usize> = const { Cell::new(0) };
        static BYTES: Cell<usize> = const { Cell::new(0) };
    }

    fn record(size: usize) {
        let _ = COUNT.try_with(|c| c.set(c.get() + 1));
        let _ = BYTES.try_with(|c| c.set(c.get() + size));
    }

    /// `(allocations, bytes)` made by this thread so far.
    pub(crate) fn snapshot() -> (usize, usize) {
        (COUNT.with(Cell::get), BYTES.with(Cell::get))
    }

    // SAFETY: every call forwards to `System` with the caller's arguments unchanged.
    unsafe impl GlobalAlloc for CountingAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            record(layout.size());
            // SAFETY: forwarded unchanged.
            unsafe { System.alloc(layout) }
        }
        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            record(layout.size());
            // SAFETY: forwarded unchanged.
            unsafe { System.alloc_zeroed(layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            record(new_size);
            // SAFETY: forwarded unchanged.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: forwarded unchanged.
            unsafe { System.dealloc(ptr, layout) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: counting::CountingAllocator = counting::CountingAllocator;

struct Allocations {
    count: usize,
    bytes: usize,
}

fn count_allocations<R>(f: impl FnOnce() -> R) -> (R, Allocations) {
    let (count0, bytes0) = counting::snapshot();
    let result = f();
    let (count1, bytes1) = counting::snapshot();
    (
        result,
        Allocations {
            count: count1 - count0,
            bytes: bytes1 - bytes0,
        },
    )
}
