//! The operator tools' plumbing: page hashes of tokens, object keys of a page, and decoding
//! captured messages to JSON.

use hicache_index::{
    decode, EventKind, Layout, Medium, Namespace, PageHash, PageHashes, Timestamp,
};
use serde_json::{json, Value};
use thousands::Separable;

/// Returns the page hashes of `tokens` (ids up to `u64::MAX`) as lowercase hex.
pub(crate) fn page_hashes_hex(
    tokens: &[u64],
    page_size: u32,
    eagle: bool,
    namespace: Namespace<'_>,
) -> Vec<String> {
    PageHashes::new(tokens, page_size, eagle, namespace)
        .map(|h| h.to_string())
        .collect()
}

/// Returns the object keys of page `hash` under `layout`.
pub(crate) fn object_keys(layout: &Layout, hash: &PageHash) -> Vec<String> {
    layout.object_keys(hash).collect()
}

/// Decodes one JSON line `{"frames_hex": [topic, seq, payload]}` into the JSON line to print:
/// `{"seq", "timestamp_ms", "events": [...]}` or `{"error": "..."}`.
pub(crate) fn decode_line(line: &str) -> Value {
    match decode_line_inner(line) {
        Ok(v) => v,
        Err(e) => json!({ "error": e }),
    }
}

fn decode_line_inner(line: &str) -> Result<Value, String> {
    let doc: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let frames = doc
        .get("frames_hex")
        .and_then(Value::as_array)
        .ok_or("no \"frames_hex\" array")?
        .iter()
        .map(|f| {
            f.as_str()
                .ok_or_else(|| "a frame is not a hex string".to_owned())
                .and_then(|hex| hex::decode(hex).map_err(|e| format!("{e}")))
        })
        .collect::<Result<Vec<Vec<u8>>, String>>()?;
    let borrowed: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
    let batch = decode(&borrowed).map_err(|e| e.to_string())?;
    let timestamp = match batch.timestamp {
        Timestamp::Millis(ms) => json!(ms),
        Timestamp::Negative(v) => json!(v),
        Timestamp::Seconds(s) if s.is_finite() => json!((s * 1000.0).round() as i64),
        Timestamp::Seconds(_) | Timestamp::Nil => Value::Null,
    };
    let events: Vec<Value> = batch
        .events
        .iter()
        .map(|e| {
            json!({
                "event_type": match e.kind {
                    EventKind::Stored => "stored",
                    EventKind::Removed => "removed",
                    EventKind::Cleared => "cleared",
                    EventKind::Unknown => "unknown",
                },
                "object_key": e.object_key,
                "tenant_id": e.tenant_id,
                "group_id": e.group_id.map(String::from_utf8_lossy),
                "medium": e.medium.map(|m| match m {
                    Medium::Cpu => "cpu",
                    Medium::Disk => "disk",
                    Medium::Other => "other",
                }),
                "event_id": e.event_id,
            })
        })
        .collect();
    Ok(json!({ "seq": batch.seq.0, "timestamp_ms": timestamp, "events": events }))
}

/// Formats `n` with thousands separators (`1,048,576`), as reports print counts.
pub(crate) fn thousands(n: u64) -> String {
    n.separate_with_commas()
}

#[cfg(test)]
mod tests {
    //! Moved from `transports/api/tests/api.rs` with their assertions.

    use hicache_index::Namespace;
    use serde_json::Value;

    use super::{decode_line, object_keys, page_hashes_hex, thousands};
    use hicache_index_options::LayoutArgs;

    const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../core/tests/fixtures");

    #[test]
    fn every_captured_message_decodes_to_its_listed_fields() {
        for file in ["mooncake_frames.jsonl", "mooncake_0_3_14_capture.jsonl"] {
            let text = std::fs::read_to_string(format!("{FIXTURES}/{file}")).unwrap();
            for line in text.lines() {
                let vector: Value = serde_json::from_str(line).unwrap();
                if vector.get("frames_hex").is_none() {
                    continue;
                }
                let out = decode_line(line);
                let decoded = &vector["decoded"];
                assert_eq!(out["timestamp_ms"], decoded[0], "{out}");
                let events = out["events"].as_array().unwrap();
                let want = decoded[1].as_array().unwrap();
                assert_eq!(events.len(), want.len());
                for (got, want) in events.iter().zip(want) {
                    for field in [
                        "event_type",
                        "object_key",
                        "tenant_id",
                        "group_id",
                        "medium",
                        "event_id",
                    ] {
                        assert_eq!(got[field], want[field], "{field} in {file}");
                    }
                }
            }
        }
    }

    #[test]
    fn undecodable_lines_become_error_lines() {
        for line in [
            "not json",
            "{}",
            r#"{"frames_hex": ["", "00"]}"#,
            r#"{"frames_hex": ["", "0000000000000001", "zz"]}"#,
        ] {
            assert!(decode_line(line)["error"].is_string(), "{line}");
        }
    }

    #[test]
    fn hash_and_keys_tools_match_the_upstream_vectors() {
        let tokens: Vec<u64> = (1..=10).collect();
        let hashes = page_hashes_hex(&tokens, 4, false, Namespace::NONE);
        assert_eq!(
            hashes[0],
            "cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72"
        );
        let args = LayoutArgs {
            page_size: Some(4),
            tp: Some(2),
            pp: 1,
            model: Some("Qwen/Qwen3-8B".into()),
            ..LayoutArgs::default()
        };
        let layout = args.to_layout().unwrap();
        let keys = object_keys(&layout, &hashes[0].parse().unwrap());
        assert_eq!(
            keys[0],
            "Qwen-Qwen3-8B_cf97adeedb59e05bfd73a2b4c2a8885708c4f4f70c84c64b27120e72ab733b72_0_k"
        );
        assert_eq!(keys.len(), 4);
    }

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }
}
