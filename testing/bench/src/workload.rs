//! What the benches share: the TP 8 layout, token chains and Mooncake batches of its pages.

use hicache_index::{EventKind, Layout, Namespace, PageHash, Seq, SglangParams, Timestamp};
use hicache_index_wire::{encode_payload, MasterFlavor, OwnedBatch, OwnedEvent};

/// Tokens per page in the benches.
pub const PAGE_SIZE: u32 = 64;

/// MHA, TP 8, PP 1: 16 objects a page.
pub fn tp8() -> Layout {
    Layout::from_sglang(&SglangParams::new(PAGE_SIZE, 8)).expect("a valid layout")
}

/// The TP 8 layout of model `i` of a cluster serving several: its own key prefix (`model-{i}`,
/// as SGLang puts the served model name in the prefix).
pub fn tp8_of_model(i: usize) -> Layout {
    let mut params = SglangParams::new(PAGE_SIZE, 8);
    params.model = Some(format!("model-{i}"));
    Layout::from_sglang(&params).expect("a valid layout")
}

/// A token chain of `pages` full pages, distinct per `salt`.
pub fn tokens(pages: usize, salt: u32) -> Vec<u32> {
    (0..pages as u32 * PAGE_SIZE)
        .map(|t| t.wrapping_mul(2_654_435_761).wrapping_add(salt))
        .collect()
}

/// The page hashes of `tokens`.
pub fn hashes(layout: &Layout, tokens: &[u32]) -> Vec<PageHash> {
    layout.page_hashes(tokens, Namespace::NONE).collect()
}

/// A synthetic page hash (as uniform as a real one).
pub fn synthetic_page(i: u64) -> PageHash {
    let mut h = [0u8; 32];
    let mut x = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    for chunk in h.chunks_mut(8) {
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^= x >> 29;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    PageHash(h)
}

/// Payloads of 64 `stored` events each (20-field Mooncake maps) for the objects of `pages`, with
/// event ids from `first_event_id` (a stream's ids MUST keep increasing from batch to batch: ids
/// that go back are a publisher restart, which clears the index).
pub fn payloads(layout: &Layout, pages: &[PageHash], first_event_id: u64) -> Vec<Vec<u8>> {
    payloads_of(EventKind::Stored, layout, pages, first_event_id)
}

/// Payloads like [`payloads`], of `kind` events (`Removed`: each object's removal from memory).
pub fn payloads_of(
    kind: EventKind,
    layout: &Layout,
    pages: &[PageHash],
    first_event_id: u64,
) -> Vec<Vec<u8>> {
    let keys: Vec<(String, String)> = pages
        .iter()
        .flat_map(|p| layout.object_keys(p).map(|k| (k, layout.group_id(p))))
        .collect();
    keys.chunks(64)
        .enumerate()
        .map(|(i, chunk)| {
            let events = chunk
                .iter()
                .enumerate()
                .map(|(j, (k, group))| {
                    let mut e = OwnedEvent::new(kind, k.clone());
                    e.event_id = Some(first_event_id + (i * 64 + j) as u64);
                    e.timestamp_ms = 1_767_225_600_000;
                    e.backend_id = "store-node-1".into();
                    e.group_id = Some(group.clone().into_bytes());
                    e.base_block_idx = Some(0);
                    e
                })
                .collect();
            let batch = OwnedBatch {
                seq: Seq(i as u64 + 1),
                timestamp: Timestamp::Millis(1_767_225_600_000),
                dp_rank: Some(0),
                events,
            };
            encode_payload(&batch, MasterFlavor::Upstream)
        })
        .collect()
}
