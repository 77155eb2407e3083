//! The operator tools' plumbing: page hashes of tokens, object keys of a page, and decoding
//! captured messages to JSON.

use hicache_index::{
    decode, EventKind, Layout, Medium, Namespace, PageHash, PageHashes, Timestamp,
};
use serde_json::{json, Value};

/// Returns the page hashes of `tokens` (ids up to `u64::MAX`) as lowercase hex.
pub fn page_hashes_hex(
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
pub fn object_keys(layout: &Layout, hash: &PageHash) -> Vec<String> {
    layout.object_keys(hash).collect()
}

/// Decodes one JSON line `{"frames_hex": [topic, seq, payload]}` into the JSON line to print:
/// `{"seq", "timestamp_ms", "events": [...]}` or `{"error": "..."}`.
pub fn decode_line(line: &str) -> Value {
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
                .and_then(from_hex)
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
                "group_id": e.group_id,
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

/// Parses lowercase or uppercase hex.
pub fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err("odd number of hex digits".into());
    }
    hex.as_bytes()
        .chunks_exact(2)
        .map(|pair| {
            let digit = |c: u8| {
                (c as char)
                    .to_digit(16)
                    .ok_or_else(|| format!("not a hex digit: {:?}", c as char))
            };
            Ok((digit(pair[0])? * 16 + digit(pair[1])?) as u8)
        })
        .collect()
}

/// Formats `n` with thousands separators (`1,048,576`), as reports print counts.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}
