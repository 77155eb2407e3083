//! Replays the fuzz seeds (`core/fuzz/seeds/`) and every crash ever found
//! (`core/fuzz/regressions/`) through the fuzz checks, so a fixed crash stays fixed.
//! `cargo test -p hicache-index-tests --test fuzz_corpus -- --ignored write_seeds` rewrites the
//! seeds from the shared vectors and the simulator's encoder.

use std::path::{Path, PathBuf};

use hicache_index_tests::fuzz::{self, meter::Meter};

#[global_allocator]
static ALLOCATOR: Meter = Meter;

/// A fuzz check: panics when its invariant breaks.
type Check = fn(&[u8]);

const TARGETS: [(&str, Check); 5] = [
    ("frame_decode", fuzz::decode_roundtrip),
    ("session", fuzz::session_ops),
    ("object_key", fuzz::object_key),
    ("layout_document", fuzz::layout_document),
    ("query_request", fuzz::query_request),
];

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/fuzz")
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn every_seed_and_past_crash_passes_its_check() {
    let mut replayed = 0;
    for (target, check) in TARGETS {
        let seeds = files(&fuzz_dir().join("seeds").join(target));
        assert!(!seeds.is_empty(), "no seeds for {target}: run write_seeds");
        for path in seeds
            .iter()
            .chain(&files(&fuzz_dir().join("regressions").join(target)))
        {
            let data = std::fs::read(path).unwrap();
            check(&data);
            replayed += 1;
        }
    }
    println!("replayed {replayed} inputs");
}

#[test]
fn the_checks_reject_nothing_on_empty_input() {
    for (_, check) in TARGETS {
        check(&[]);
    }
}

#[test]
#[ignore = "writes the seed corpus; run by hand after the vectors change"]
fn write_seeds() {
    use hicache_index::{EventKind, Layout, Seq, SglangParams, Timestamp};
    use hicache_index_sim::encode::{encode_payload, MasterFlavor, OwnedBatch, OwnedEvent};
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/tests/fixtures");
    let mut seeds: Vec<(&str, String, Vec<u8>)> = Vec::new();
    for file in ["mooncake_frames.jsonl", "mooncake_0_3_14_capture.jsonl"] {
        let text = std::fs::read_to_string(fixtures.join(file)).unwrap();
        for (i, line) in text.lines().enumerate() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let Some(frames) = v["frames_hex"].as_array() else {
                continue;
            };
            let hex = |i: usize| hex::decode(frames[i].as_str().unwrap()).unwrap();
            let mut data = vec![4u8];
            data.extend(hex(1));
            data.extend(hex(2));
            seeds.push(("frame_decode", format!("{file}-{i}"), data));
            for e in v["decoded"][1].as_array().unwrap() {
                let key = e["object_key"].as_str().unwrap().to_owned();
                seeds.push((
                    "object_key",
                    format!("{file}-{i}-{}", seeds.len()),
                    key.into_bytes(),
                ));
            }
        }
    }
    let layout = Layout::from_sglang(&SglangParams::new(4, 8)).unwrap();
    let page = hicache_index::PageHash([0xab; 32]);
    let events: Vec<OwnedEvent> = layout
        .object_keys(&page)
        .map(|k| OwnedEvent::new(EventKind::Stored, k))
        .collect();
    let batch = OwnedBatch {
        seq: Seq(7),
        timestamp: Timestamp::Millis(1_767_225_600_000),
        dp_rank: Some(0),
        events,
    };
    for (name, flavor) in [
        ("upstream", MasterFlavor::Upstream),
        ("release0314", MasterFlavor::Release0314),
    ] {
        let mut data = vec![4u8];
        data.extend(7u64.to_be_bytes());
        data.extend(encode_payload(&batch, flavor));
        seeds.push(("frame_decode", format!("sim-tp8-{name}"), data));
    }
    for (i, doc) in [
        r#"{"page_size":64,"hicache_object_layout":{"key_prefix":"Qwen-Qwen3-8B","pools":[{"pool":"kv","suffixes":["__k"],"hit_policy":"all_pages"}]}}"#,
        r#"{"page_size":16,"hicache_object_layout":{"key_prefix":null,"pools":[{"pool":"kv","suffixes":["_0_k","_0_v"]},{"pool":"mamba","suffixes":["_s"],"hit_policy":"trailing_pages","trailing_pages":2}]},"extra":1}"#,
    ]
    .iter()
    .enumerate()
    {
        seeds.push(("layout_document", format!("doc-{i}"), doc.as_bytes().to_vec()));
    }
    for (i, body) in [
        r#"{"tokens":[1,2,3,4,5,6,7,8,9,10]}"#,
        r#"{"tokens":[1,2,3,4],"tenant":"default","model":"m","extra_key":"lora-7","cache_salt":null}"#,
        r#"{"page_hashes":["cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"]}"#,
    ]
    .iter()
    .enumerate()
    {
        seeds.push(("query_request", format!("json-{i}"), body.as_bytes().to_vec()));
    }
    for i in 0..8u8 {
        let data: Vec<u8> = (0..200u32)
            .map(|j| (j as u8).wrapping_mul(31).wrapping_add(i * 17))
            .collect();
        seeds.push(("session", format!("walk-{i}"), data));
    }
    for (target, name, data) in seeds {
        let dir = fuzz_dir().join("seeds").join(target);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(name), data).unwrap();
    }
}
