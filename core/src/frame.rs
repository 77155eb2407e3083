//! Decoding of Mooncake KV-event messages: `[topic, seq, payload]` into a typed [`Batch`].
//!
//! # Wire layout (one ZeroMQ multipart message = one batch)
//! ```text
//! frame 0  topic    bytes; the Mooncake master sends an empty frame
//! frame 1  seq      exactly 8 bytes, big-endian u64; one per batch, starts at 1 (Mooncake)
//! frame 2  payload  msgpack array [timestamp, events, dp_rank]
//!            timestamp  uint ms since the Unix epoch (Mooncake), or float seconds (vLLM/SGLang)
//!            events     array of maps decoded by field name (unknown fields ignored)
//!            dp_rank    uint or nil (absent in very old publishers)
//! ```
//! Event map fields used: `event_type` (`"stored"`, `"removed"`, `"cleared"`; falling back to the
//! legacy `type`: `"BlockStored"`, `"BlockRemoved"`, `"AllBlocksCleared"`), `object_key`,
//! `tenant_id`, `group_id`, `medium`, `event_id`. Every other field is skipped unread.

// IMPLEMENTATION PENDING (helper): see the crate's issue 2.

use alloc::vec::Vec;
use core::fmt;

/// A publisher's batch sequence number (frame 1 of a message).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Seq(pub u64);

impl fmt::Display for Seq {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The batch timestamp as the publisher sent it.
#[derive(Copy, Clone, Debug, PartialEq)]
pub enum Timestamp {
    /// An unsigned integer: milliseconds since the Unix epoch (the Mooncake master).
    Millis(u64),
    /// A negative integer (never sent by a correct publisher; kept, not interpreted).
    Negative(i64),
    /// A float: seconds since the Unix epoch (vLLM and SGLang publishers); may be NaN.
    Seconds(f64),
    /// Nil.
    Nil,
}

/// What an event says happened to its object.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The object is now present (one event per replica medium; idempotent).
    Stored,
    /// The object is gone.
    Removed,
    /// Every object of the event's tenant (or of every tenant, without a tenant) is gone.
    Cleared,
    /// A type this decoder does not know; the event must be counted and ignored.
    Unknown,
}

/// The residency tier an event reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Medium {
    /// Host memory.
    Cpu,
    /// Local disk or SSD.
    Disk,
    /// Any other value.
    Other,
}

/// One decoded event, borrowing its strings from the payload.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Event<'a> {
    /// From `event_type`, or the legacy `type` when `event_type` is missing or nil.
    pub kind: EventKind,
    /// The physical Mooncake object key.
    pub object_key: Option<&'a str>,
    /// The tenant; `None` when missing or nil (the index reads that as `"default"`).
    pub tenant_id: Option<&'a str>,
    /// `sglang-hicache:{logical key}` when SGLang group semantics are on.
    pub group_id: Option<&'a str>,
    /// The replica's medium.
    pub medium: Option<Medium>,
    /// The publisher's per-event counter.
    pub event_id: Option<u64>,
}

/// One decoded message: a sequence number, a timestamp and its events.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch<'a> {
    /// The batch sequence number.
    pub seq: Seq,
    /// The batch timestamp.
    pub timestamp: Timestamp,
    /// The data-parallel rank, when the publisher sent one.
    pub dp_rank: Option<u64>,
    /// The events, in publisher order. Events that are maps are decoded by field name; an event
    /// that is not a map (a positional vLLM event) decodes as [`EventKind::Unknown`].
    pub events: Vec<Event<'a>>,
}

/// Why a message could not be read as a batch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FrameError {
    /// The message did not have exactly three frames.
    FrameCount {
        /// How many frames it had.
        found: usize,
    },
    /// The sequence frame was not exactly 8 bytes.
    SeqLength {
        /// Its length.
        len: usize,
    },
    /// The payload was not a valid batch; `offset` is the byte in the payload where it went wrong.
    Payload {
        /// Byte offset into the payload frame.
        offset: usize,
        /// What was wrong there.
        kind: PayloadError,
    },
}

/// What was wrong in a payload.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PayloadError {
    /// The payload ended in the middle of a value, or a length header claims more bytes than
    /// remain.
    Truncated,
    /// A value had the wrong msgpack type.
    WrongType {
        /// What was expected there.
        expected: &'static str,
        /// The msgpack marker byte found.
        marker: u8,
    },
    /// The top-level array had fewer than two elements.
    ShortArray {
        /// Its length.
        len: u32,
    },
    /// A string used by the index was not UTF-8.
    InvalidUtf8,
    /// Values nested deeper than the decoder allows.
    TooDeep,
    /// Bytes followed the top-level array.
    TrailingBytes,
    /// A msgpack marker that is reserved (0xc1).
    ReservedMarker,
}
