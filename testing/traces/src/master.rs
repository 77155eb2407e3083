//! The master's side of the replay: the store's changes as Mooncake's messages,
//! `[topic, seq, payload]`, encoded by the project's wire crate in the 0.3.14 master's layout
//! (at most 64 events a batch, sequences and event ids from 1, an SGLang group id on every
//! event, medium `cpu`).

use hicache_index::{EventKind, Layout, Medium, PageHash, Seq, Timestamp};
use hicache_index_wire::{encode_payload_into, MasterFlavor, OwnedBatch, OwnedEvent};

use crate::blocks::{Blocks, PageId};
use crate::store::Change;

/// The most events in one batch (the master's).
pub const MAX_BATCH_EVENTS: usize = 64;

/// The Unix time in milliseconds that the trace's time 0 stands for.
const EPOCH_MS: u64 = 1_767_225_600_000;

/// Encodes the store's changes as the master's messages (see the module docs).
#[derive(Debug)]
pub struct Master {
    layout: Layout,
    suffixes: Vec<String>,
    seq: u64,
    event_id: u64,
    /// Reused: the batch being encoded (its events keep their strings' buffers).
    batch: OwnedBatch,
    logical: String,
}

/// One encoded message: the sequence frame and the payload (the topic is empty).
#[derive(Clone, Debug, Default)]
pub struct Message {
    /// The sequence, 8 bytes big-endian.
    pub seq: [u8; 8],
    /// The msgpack payload.
    pub payload: Vec<u8>,
    /// Events in it.
    pub events: usize,
}

impl Message {
    /// Returns the three frames, `[topic, seq, payload]`.
    pub fn frames(&self) -> [&[u8]; 3] {
        [b"", &self.seq, &self.payload]
    }
}

impl Master {
    /// Makes a master publishing the objects of `layout`.
    pub fn new(layout: &Layout) -> Master {
        Master {
            layout: layout.clone(),
            suffixes: layout.suffixes().map(|(s, _)| s.to_owned()).collect(),
            seq: 0,
            event_id: 0,
            batch: OwnedBatch {
                seq: Seq(0),
                timestamp: Timestamp::Millis(EPOCH_MS),
                dp_rank: Some(0),
                events: Vec::new(),
            },
            logical: String::new(),
        }
    }

    /// Returns the objects of a page in this layout.
    pub fn objects_per_page(&self) -> u32 {
        self.suffixes.len() as u32
    }

    /// Encodes `changes` at trace time `at_ms` into `out` (reusing its messages' buffers),
    /// [`MAX_BATCH_EVENTS`] events a message; returns how many messages it filled.
    pub fn publish(
        &mut self,
        at_ms: u64,
        changes: &[Change],
        blocks: &Blocks,
        out: &mut Vec<Message>,
    ) -> usize {
        let objects = self.suffixes.len() as u32;
        let mut filled = 0;
        for chunk in changes.chunks(MAX_BATCH_EVENTS) {
            self.seq += 1;
            self.batch.seq = Seq(self.seq);
            self.batch.timestamp = Timestamp::Millis(EPOCH_MS + at_ms);
            self.batch.events.resize_with(chunk.len(), || {
                let mut e = OwnedEvent::new(EventKind::Stored, String::new());
                e.group_id = Some(Vec::new());
                e.dp_rank = Some(0);
                e.backend_id = "trace-store".to_owned();
                e.medium = Some(Medium::Cpu);
                e
            });
            for (event, change) in self.batch.events.iter_mut().zip(chunk) {
                self.event_id += 1;
                let page: PageId = change.object / objects;
                let hash: PageHash = blocks.page_hash(page);
                let suffix = &self.suffixes[(change.object % objects) as usize];
                self.layout.write_logical_key(&hash, &mut self.logical);
                let key = event.object_key.get_or_insert_with(String::new);
                key.clear();
                key.push_str(&self.logical);
                key.push_str(suffix);
                let group = event.group_id.get_or_insert_with(Vec::new);
                group.clear();
                group.extend_from_slice(b"sglang-hicache:");
                group.extend_from_slice(self.logical.as_bytes());
                event.kind = change.kind;
                event.event_id = Some(self.event_id);
                event.timestamp_ms = EPOCH_MS + at_ms;
                event.base_block_idx = (change.kind == EventKind::Stored).then_some(0);
            }
            if out.len() == filled {
                out.push(Message::default());
            }
            let message = &mut out[filled];
            message.seq = self.seq.to_be_bytes();
            message.payload.clear();
            encode_payload_into(&mut message.payload, &self.batch, MasterFlavor::Release0314);
            message.events = chunk.len();
            filled += 1;
        }
        filled
    }
}
