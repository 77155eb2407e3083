//! Encoders that produce the Mooncake master's exact bytes.
//!
//! The master packs with msgpack-c, which always picks the shortest marker for a value: a
//! millisecond timestamp is a `uint64` (`0xcf`) only because it exceeds `u32::MAX`, an event map
//! of 16 or more fields is a `map16` (`0xde`), a 68-byte key is a `str8` (`0xd9`). The writers
//! here are `rmp::encode`'s, which make the same choices, so encoding a decoded vector gives
//! back its bytes.
//!
//! # Event maps, in the master's field order
//! ```text
//! MasterFlavor::Upstream      (mooncake_frames.jsonl; stored 20 fields, removed the first 17)
//!   event_id timestamp event_type type model_name block_size additional_salt lora_name
//!   tenant_id backend_id group_id medium dp_rank object_key seq_hashes block_hashes
//!   base_block_idx | parent_hash token_ids parent_block_hash
//! MasterFlavor::Release0314   (mooncake_0_3_14_capture.jsonl; stored 21, removed 17)
//!   event_id timestamp event_type type model_name block_size additional_salt lora_name
//!   tenant_id backend_id medium dp_rank group_id object_key seq_hashes block_hashes
//!   [session_id, stored only] base_block_idx | parent_hash token_ids parent_block_hash
//! ```
//! Fields after `|` are written for stored events only. `model_name`, `block_size`,
//! `additional_salt`, `lora_name`, `parent_hash`, `token_ids` and `parent_block_hash` are always
//! nil and `seq_hashes`, `block_hashes` always empty, as in every captured message.

use hicache_index::{Batch, Event, EventKind, Medium, Seq, Timestamp};

/// Which Mooncake master's event layout to reproduce.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Default)]
pub enum MasterFlavor {
    /// The upstream master source the specification was read from (the vectors in
    /// `mooncake_frames.jsonl`): `group_id` before `medium`, 20 fields for stored events.
    #[default]
    Upstream,
    /// The `mooncake_master` of `mooncake-transfer-engine-cuda13` 0.3.14, as captured: `medium`
    /// and `dp_rank` before `group_id`, and a `session_id` in stored events (21 fields).
    Release0314,
}

/// One event to encode, owning its strings.
///
/// The first six fields are what [`Event`] decodes; the others only exist on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnedEvent {
    /// The event type, written as `event_type` and as the legacy `type`.
    pub kind: EventKind,
    /// The physical object key; `None` is written as nil.
    pub object_key: Option<String>,
    /// The tenant; `None` is written as nil (the master always sends one).
    pub tenant_id: Option<String>,
    /// The SGLang group id, as bytes (the decoder does not check it as UTF-8, so a copy of a
    /// decoded event keeps any bytes); written as a string, `None` as nil.
    pub group_id: Option<Vec<u8>>,
    /// The replica medium; [`Medium::Other`] is written as `"other"`, `None` as nil.
    pub medium: Option<Medium>,
    /// The per-event counter; `None` is written as nil (the master always sends one).
    pub event_id: Option<u64>,
    /// The event's own `timestamp` field, in milliseconds since the Unix epoch.
    pub timestamp_ms: u64,
    /// The master's `--kv_events_backend_id`.
    pub backend_id: String,
    /// The event's own `dp_rank` field (nil upstream, 0 from the 0.3.14 master).
    pub dp_rank: Option<u64>,
    /// `base_block_idx` (upstream: 0 in stored events, nil in removed ones; nil in 0.3.14).
    pub base_block_idx: Option<u64>,
    /// `session_id`, written by [`MasterFlavor::Release0314`] in stored events only.
    pub session_id: Option<String>,
}

impl OwnedEvent {
    /// Makes an event of `kind` for `object_key` with the master's usual values: tenant
    /// `"default"`, medium `cpu`, no group, and nil or zero for the rest.
    pub fn new(kind: EventKind, object_key: impl Into<String>) -> OwnedEvent {
        OwnedEvent {
            kind,
            object_key: Some(object_key.into()),
            tenant_id: Some("default".to_owned()),
            group_id: None,
            medium: Some(Medium::Cpu),
            event_id: None,
            timestamp_ms: 0,
            backend_id: String::new(),
            dp_rank: None,
            base_block_idx: None,
            session_id: None,
        }
    }

    /// Borrows this event as the decoder would return it.
    pub fn as_event(&self) -> Event<'_> {
        Event {
            kind: self.kind,
            object_key: self.object_key.as_deref(),
            tenant_id: self.tenant_id.as_deref(),
            group_id: self.group_id.as_deref(),
            medium: self.medium,
            event_id: self.event_id,
        }
    }
}

impl From<&Event<'_>> for OwnedEvent {
    /// Copies the decoded fields; the wire-only fields get the defaults of [`OwnedEvent::new`].
    fn from(event: &Event<'_>) -> OwnedEvent {
        OwnedEvent {
            kind: event.kind,
            object_key: event.object_key.map(str::to_owned),
            tenant_id: event.tenant_id.map(str::to_owned),
            group_id: event.group_id.map(<[u8]>::to_vec),
            medium: event.medium,
            event_id: event.event_id,
            timestamp_ms: 0,
            backend_id: String::new(),
            dp_rank: None,
            base_block_idx: None,
            session_id: None,
        }
    }
}

/// One batch to encode, owning its events.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnedBatch {
    /// The sequence number (frame 1).
    pub seq: Seq,
    /// The batch timestamp; the master sends [`Timestamp::Millis`].
    pub timestamp: Timestamp,
    /// The batch's `dp_rank` (0 from the master); `None` is written as nil.
    pub dp_rank: Option<u64>,
    /// The events, in order (the master sends at most 64).
    pub events: Vec<OwnedEvent>,
}

impl OwnedBatch {
    /// Borrows this batch as the decoder would return it (allocating the events `Vec`).
    pub fn as_batch(&self) -> Batch<'_> {
        Batch {
            seq: self.seq,
            timestamp: self.timestamp,
            dp_rank: self.dp_rank,
            events: self.events.iter().map(OwnedEvent::as_event).collect(),
        }
    }
}

impl From<&Batch<'_>> for OwnedBatch {
    /// Copies a decoded batch; each event's `timestamp_ms` is the batch's, when it is in
    /// milliseconds (0 otherwise).
    fn from(batch: &Batch<'_>) -> OwnedBatch {
        let timestamp_ms = match batch.timestamp {
            Timestamp::Millis(ms) => ms,
            _ => 0,
        };
        OwnedBatch {
            seq: batch.seq,
            timestamp: batch.timestamp,
            dp_rank: batch.dp_rank,
            events: batch
                .events
                .iter()
                .map(|e| OwnedEvent {
                    timestamp_ms,
                    ..OwnedEvent::from(e)
                })
                .collect(),
        }
    }
}

/// The smallest event id msgpack writes in 9 bytes (`0xcf` and 8 bytes big-endian): batches
/// encoded with ids from here can be renumbered in place ([`EventIdSlots`]).
pub const FIXED_WIDTH_EVENT_ID: u64 = 1 << 32;

/// Where a payload's event ids are, to send a pre-encoded batch again with fresh ids.
///
/// Benchmarks cycle a few pre-encoded batches, but a stream's event ids MUST keep increasing
/// from batch to batch (ids that go back are taken for a publisher restart, which clears the
/// index): each batch is renumbered before it is sent again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EventIdSlots(Vec<usize>);

impl EventIdSlots {
    /// Finds the event ids of `payload`, an encoded batch; only ids written in 9 bytes (at
    /// least [`FIXED_WIDTH_EVENT_ID`]) are found.
    pub fn find(payload: &[u8]) -> EventIdSlots {
        const KEY: &[u8] = b"\xa8event_id\xcf";
        let slots = payload
            .windows(KEY.len())
            .enumerate()
            .filter(|(_, w)| *w == KEY)
            .map(|(at, _)| at + KEY.len())
            .filter(|&at| at + 8 <= payload.len())
            .collect();
        EventIdSlots(slots)
    }

    /// Returns how many event ids were found.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Reports whether no event id was found.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Writes the ids `next, next + 1, ...` into `payload` (the one they were found in), in
    /// order; returns the id after the last one written.
    pub fn renumber(&self, payload: &mut [u8], mut next: u64) -> u64 {
        for &at in &self.0 {
            payload[at..at + 8].copy_from_slice(&next.to_be_bytes());
            next += 1;
        }
        next
    }
}

/// Encodes a whole message: `[topic, seq as 8 bytes big-endian, payload]`.
pub fn encode_message(topic: &[u8], batch: &OwnedBatch, flavor: MasterFlavor) -> [Vec<u8>; 3] {
    [
        topic.to_vec(),
        encode_seq(batch.seq).to_vec(),
        encode_payload(batch, flavor),
    ]
}

/// Encodes a sequence number as its frame.
pub fn encode_seq(seq: Seq) -> [u8; 8] {
    seq.0.to_be_bytes()
}

/// Encodes a batch's payload frame, `[timestamp, [events...], dp_rank]`.
pub fn encode_payload(batch: &OwnedBatch, flavor: MasterFlavor) -> Vec<u8> {
    let mut out = Vec::new();
    encode_payload_into(&mut out, batch, flavor);
    out
}

/// Appends a batch's payload frame to `out`; reuse one `Vec` (cleared by the caller) to avoid
/// allocating per batch.
pub fn encode_payload_into(out: &mut Vec<u8>, batch: &OwnedBatch, flavor: MasterFlavor) {
    out.reserve(16 + batch.events.iter().map(estimated_len).sum::<usize>());
    write_array_len(out, 3);
    match batch.timestamp {
        Timestamp::Millis(ms) => write_uint(out, ms),
        Timestamp::Negative(v) => write_int(out, v),
        Timestamp::Seconds(s) => write_f64(out, s),
        Timestamp::Nil => write_nil(out),
    }
    write_array_len(out, batch.events.len());
    for event in &batch.events {
        encode_event_into(out, event, flavor);
    }
    write_opt_uint(out, batch.dp_rank);
}

/// Appends one event map to `out`, with the flavor's fields in the master's order.
pub fn encode_event_into(out: &mut Vec<u8>, event: &OwnedEvent, flavor: MasterFlavor) {
    let stored = event.kind == EventKind::Stored;
    let fields = match (flavor, stored) {
        (_, false) => 17,
        (MasterFlavor::Upstream, true) => 20,
        (MasterFlavor::Release0314, true) => 21,
    };
    let (event_type, legacy_type) = match event.kind {
        EventKind::Stored => ("stored", "BlockStored"),
        EventKind::Removed => ("removed", "BlockRemoved"),
        EventKind::Cleared => ("cleared", "AllBlocksCleared"),
        EventKind::Unknown => ("unknown", "Unknown"),
    };
    write_map_len(out, fields);
    write_key(out, "event_id");
    write_opt_uint(out, event.event_id);
    write_key(out, "timestamp");
    write_uint(out, event.timestamp_ms);
    write_key(out, "event_type");
    write_str(out, event_type);
    write_key(out, "type");
    write_str(out, legacy_type);
    for key in ["model_name", "block_size", "additional_salt", "lora_name"] {
        write_key(out, key);
        write_nil(out);
    }
    write_key(out, "tenant_id");
    write_opt_str(out, event.tenant_id.as_deref());
    write_key(out, "backend_id");
    write_str(out, &event.backend_id);
    match flavor {
        MasterFlavor::Upstream => {
            write_key(out, "group_id");
            write_opt_str_bytes(out, event.group_id.as_deref());
            write_medium(out, event.medium);
            write_key(out, "dp_rank");
            write_opt_uint(out, event.dp_rank);
        }
        MasterFlavor::Release0314 => {
            write_medium(out, event.medium);
            write_key(out, "dp_rank");
            write_opt_uint(out, event.dp_rank);
            write_key(out, "group_id");
            write_opt_str_bytes(out, event.group_id.as_deref());
        }
    }
    write_key(out, "object_key");
    write_opt_str(out, event.object_key.as_deref());
    write_key(out, "seq_hashes");
    write_array_len(out, 0);
    write_key(out, "block_hashes");
    write_array_len(out, 0);
    if stored && flavor == MasterFlavor::Release0314 {
        write_key(out, "session_id");
        write_opt_str(out, event.session_id.as_deref());
    }
    write_key(out, "base_block_idx");
    write_opt_uint(out, event.base_block_idx);
    if stored {
        for key in ["parent_hash", "token_ids", "parent_block_hash"] {
            write_key(out, key);
            write_nil(out);
        }
    }
}

/// A generous guess of an event's encoded size, to reserve once per payload.
fn estimated_len(event: &OwnedEvent) -> usize {
    let len = |s: &Option<String>| s.as_ref().map_or(1, |s| s.len() + 5);
    320 + len(&event.object_key)
        + len(&event.tenant_id)
        + event.group_id.as_ref().map_or(1, |g| g.len() + 5)
        + len(&event.session_id)
        + event.backend_id.len()
}

fn write_medium(out: &mut Vec<u8>, medium: Option<Medium>) {
    write_key(out, "medium");
    write_opt_str(
        out,
        medium.map(|m| match m {
            Medium::Cpu => "cpu",
            Medium::Disk => "disk",
            Medium::Other => "other",
        }),
    );
}

// ---- msgpack writers: rmp::encode, which like msgpack-c picks the shortest marker ----

/// What `rmp` reports writing into a `Vec`, which cannot fail.
const GROWS: &str = "writing into a Vec cannot fail";

fn write_nil(out: &mut Vec<u8>) {
    rmp::encode::write_nil(out).expect(GROWS);
}

/// A field name: always a fixstr (every name is shorter than 32 bytes).
fn write_key(out: &mut Vec<u8>, key: &str) {
    debug_assert!(key.len() < 32);
    write_str(out, key);
}

fn write_uint(out: &mut Vec<u8>, v: u64) {
    rmp::encode::write_uint(out, v).expect(GROWS);
}

fn write_opt_uint(out: &mut Vec<u8>, v: Option<u64>) {
    match v {
        Some(v) => write_uint(out, v),
        None => write_nil(out),
    }
}

fn write_int(out: &mut Vec<u8>, v: i64) {
    rmp::encode::write_sint(out, v).expect(GROWS);
}

fn write_f64(out: &mut Vec<u8>, v: f64) {
    rmp::encode::write_f64(out, v).expect(GROWS);
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    rmp::encode::write_str(out, s).expect("a msgpack string is shorter than 4 GiB");
}

fn write_opt_str(out: &mut Vec<u8>, s: Option<&str>) {
    write_opt_str_bytes(out, s.map(str::as_bytes));
}

/// Writes `bytes` as a msgpack string (whatever they hold), or nil.
fn write_opt_str_bytes(out: &mut Vec<u8>, bytes: Option<&[u8]>) {
    match bytes {
        Some(b) => {
            let len = u32::try_from(b.len()).expect("a msgpack string is shorter than 4 GiB");
            rmp::encode::write_str_len(out, len).expect(GROWS);
            out.extend_from_slice(b);
        }
        None => write_nil(out),
    }
}

fn write_array_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("a msgpack container has fewer than 2^32 items");
    rmp::encode::write_array_len(out, len).expect(GROWS);
}

fn write_map_len(out: &mut Vec<u8>, len: usize) {
    let len = u32::try_from(len).expect("a msgpack container has fewer than 2^32 items");
    rmp::encode::write_map_len(out, len).expect(GROWS);
}

#[cfg(test)]
mod tests {
    //! The writers pick msgpack-c's markers (the shortest form) at every boundary; the vectors
    //! of `sim/tests/encode.rs` check whole payloads byte for byte.

    use super::*;

    fn first(write: impl FnOnce(&mut Vec<u8>)) -> u8 {
        let mut out = Vec::new();
        write(&mut out);
        out[0]
    }

    #[test]
    fn boundary_lengths_use_msgpack_cs_markers() {
        for (len, marker) in [
            (0, 0xa0),
            (31, 0xbf),
            (32, 0xd9),
            (255, 0xd9),
            (256, 0xda),
            (65_535, 0xda),
            (65_536, 0xdb),
        ] {
            assert_eq!(
                first(|o| write_str(o, &"x".repeat(len))),
                marker,
                "string of {len}"
            );
        }
        for (len, array, map) in [
            (0, 0x90, 0x80),
            (15, 0x9f, 0x8f),
            (16, 0xdc, 0xde),
            (65_535, 0xdc, 0xde),
            (65_536, 0xdd, 0xdf),
        ] {
            assert_eq!(first(|o| write_array_len(o, len)), array, "array of {len}");
            assert_eq!(first(|o| write_map_len(o, len)), map, "map of {len}");
        }
        for (v, marker) in [
            (0, 0x00),
            (127, 0x7f),
            (128, 0xcc),
            (255, 0xcc),
            (256, 0xcd),
            (65_535, 0xcd),
            (65_536, 0xce),
            (u64::from(u32::MAX), 0xce),
            (u64::from(u32::MAX) + 1, 0xcf),
            (u64::MAX, 0xcf),
        ] {
            assert_eq!(first(|o| write_uint(o, v)), marker, "uint {v}");
        }
        for (v, marker) in [
            (-1, 0xff),
            (-32, 0xe0),
            (-33, 0xd0),
            (-128, 0xd0),
            (-129, 0xd1),
            (-32_768, 0xd1),
            (-32_769, 0xd2),
            (i64::MIN, 0xd3),
            (5, 0x05),
            (i64::MAX, 0xcf),
        ] {
            assert_eq!(first(|o| write_int(o, v)), marker, "int {v}");
        }
        assert_eq!(first(|o| write_f64(o, 1.5)), 0xcb);
        assert_eq!(first(write_nil), 0xc0);
    }

    #[test]
    fn a_millisecond_timestamp_past_u32_is_a_uint64() {
        let mut out = Vec::new();
        write_uint(&mut out, 1_764_000_000_000);
        assert_eq!(out[0], 0xcf);
        assert_eq!(out[1..], 1_764_000_000_000u64.to_be_bytes());
    }
}
