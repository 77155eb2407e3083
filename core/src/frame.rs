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
//!
//! # Publisher generations
//! All three Mooncake payload generations decode alike, because only the fields above are read:
//! PR 2214 (20 fields for `stored`, 17 for `removed`), PR 2876 (adds `connector_block_hash`,
//! `cache_prefix`, `tp_rank`, `head_or_tp_rank`, `pcp_rank`, `dcp_rank`, `pp_rank`, `layer_id`
//! for connector keys, and a tenant-wide `cleared` with neither `object_key` nor `group_id`),
//! and PR 3744 (the raw `object_key` with empty `seq_hashes`/`block_hashes` and nil
//! `base_block_idx`, `parent_hash`, `token_ids`; 0.3.14 adds `session_id`). The vectors are in
//! `core/tests/fixtures/payload_generations.jsonl`.
//!
//! # Robustness
//! [`decode`] never panics and never allocates more than one `Vec` of events, whose capacity is
//! bounded by the payload length (every event takes at least one byte): a length header that
//! claims more than the remaining bytes is [`PayloadError::Truncated`] before anything is
//! allocated. Strings are borrowed from the payload. Ignored values are skipped without being
//! decoded, up to [`MAX_DEPTH`] nested arrays and maps.

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
    /// `sglang-hicache:{logical key}` when SGLang group semantics are on, as raw bytes: it is
    /// only compared with the object key, so it is not checked as UTF-8 (a group id that is
    /// not counts as one that does not match).
    pub group_id: Option<&'a [u8]>,
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
    /// The events array holds more than [`MAX_EVENTS`] events.
    TooManyEvents {
        /// How many it declares.
        declared: u32,
    },
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::FrameCount { found } => {
                write!(f, "the message has {found} frames instead of 3")
            }
            FrameError::SeqLength { len } => {
                write!(f, "the sequence frame is {len} bytes long instead of 8")
            }
            FrameError::Payload { offset, kind } => {
                write!(f, "the payload is invalid at byte {offset}: {kind}")
            }
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PayloadError::Truncated => f.write_str("the payload ends in the middle of a value"),
            PayloadError::WrongType { expected, marker } => {
                write!(
                    f,
                    "expected {expected}, found msgpack marker 0x{marker:02x}"
                )
            }
            PayloadError::ShortArray { len } => {
                write!(
                    f,
                    "the top-level array has {len} elements instead of at least 2"
                )
            }
            PayloadError::InvalidUtf8 => f.write_str("a string the index uses is not UTF-8"),
            PayloadError::TooDeep => {
                write!(f, "arrays and maps nest deeper than {MAX_DEPTH} levels")
            }
            PayloadError::TrailingBytes => f.write_str("bytes follow the top-level array"),
            PayloadError::ReservedMarker => f.write_str("the reserved msgpack marker 0xc1 appears"),
            PayloadError::TooManyEvents { declared } => {
                write!(
                    f,
                    "the batch declares {declared} events, more than {MAX_EVENTS}"
                )
            }
        }
    }
}

impl core::error::Error for FrameError {}
impl core::error::Error for PayloadError {}

/// How many arrays and maps may nest in a payload, the top-level array included.
pub const MAX_DEPTH: u32 = 32;

/// The most events one batch may hold (the Mooncake master sends at most 64; vLLM and SGLang
/// publishers a few hundred). A batch declaring more is a [`PayloadError::TooManyEvents`], which
/// bounds what one message can make the decoder allocate.
pub const MAX_EVENTS: u32 = 1 << 16;

/// Decodes one message, `[topic, seq, payload]`, into a [`Batch`] borrowing from the payload.
///
/// The topic is not checked here: the caller MUST have matched it already. The payload is a
/// msgpack array `[timestamp, events, dp_rank]`; a missing `dp_rank` reads as `None` and elements
/// after it are skipped. Event maps are read by field name (see the module docs); an event that is
/// not a map decodes as [`EventKind::Unknown`] with every field `None`.
///
/// # Errors
/// [`FrameError::FrameCount`] unless there are exactly three frames, [`FrameError::SeqLength`]
/// unless the sequence frame is 8 bytes, and [`FrameError::Payload`] with the byte offset of the
/// offending value when the payload cannot be read.
pub fn decode<'a>(frames: &[&'a [u8]]) -> Result<Batch<'a>, FrameError> {
    let &[_topic, seq, payload] = frames else {
        return Err(FrameError::FrameCount {
            found: frames.len(),
        });
    };
    let seq: [u8; 8] = seq
        .try_into()
        .map_err(|_| FrameError::SeqLength { len: seq.len() })?;
    decode_payload(Seq(u64::from_be_bytes(seq)), payload)
}

fn decode_payload(seq: Seq, payload: &[u8]) -> Result<Batch<'_>, FrameError> {
    let mut r = Reader {
        buf: payload,
        pos: 0,
    };
    let len = r.array_len()?;
    if len < 2 {
        return Err(r.error(0, PayloadError::ShortArray { len }));
    }
    let timestamp = r.timestamp()?;
    let events = r.events()?;
    let dp_rank = if len >= 3 { r.opt_uint()? } else { None };
    // Every skipped value takes at least one byte, so this loop ends within the payload.
    for _ in 3..len {
        r.skip(1)?;
    }
    if r.pos != payload.len() {
        return Err(r.error(r.pos, PayloadError::TrailingBytes));
    }
    Ok(Batch {
        seq,
        timestamp,
        dp_rank,
        events,
    })
}

/// An event with nothing known about it.
const UNKNOWN_EVENT: Event<'static> = Event {
    kind: EventKind::Unknown,
    object_key: None,
    tenant_id: None,
    group_id: None,
    medium: None,
    event_id: None,
};

/// The nesting level of an event map's keys and values (top array 0, events 1, event map 2).
const FIELD_LEVEL: u32 = 3;

/// A msgpack cursor over one payload. `pos <= buf.len()` always holds.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Converts a length header to `usize`; one that does not fit cannot fit in the payload either.
fn to_usize(len: u32) -> usize {
    usize::try_from(len).unwrap_or(usize::MAX)
}

impl<'a> Reader<'a> {
    fn error(&self, offset: usize, kind: PayloadError) -> FrameError {
        FrameError::Payload { offset, kind }
    }

    fn truncated(&self, at: usize) -> FrameError {
        self.error(at, PayloadError::Truncated)
    }

    fn wrong(&self, at: usize, expected: &'static str, marker: u8) -> FrameError {
        self.error(at, PayloadError::WrongType { expected, marker })
    }

    fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Reads the next byte; `at` is where the value being read starts.
    #[inline]
    fn byte(&mut self, at: usize) -> Result<u8, FrameError> {
        let b = *self.buf.get(self.pos).ok_or_else(|| self.truncated(at))?;
        self.pos += 1;
        Ok(b)
    }

    /// Reads the next `n` bytes; `at` is where the value being read starts.
    #[inline]
    fn take(&mut self, n: usize, at: usize) -> Result<&'a [u8], FrameError> {
        let end = self.pos.checked_add(n).ok_or_else(|| self.truncated(at))?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or_else(|| self.truncated(at))?;
        self.pos = end;
        Ok(bytes)
    }

    #[inline]
    fn array<const N: usize>(&mut self, at: usize) -> Result<[u8; N], FrameError> {
        let bytes = self.take(N, at)?;
        bytes.try_into().map_err(|_| self.truncated(at))
    }

    fn be_u16(&mut self, at: usize) -> Result<u16, FrameError> {
        self.array(at).map(u16::from_be_bytes)
    }

    fn be_u32(&mut self, at: usize) -> Result<u32, FrameError> {
        self.array(at).map(u32::from_be_bytes)
    }

    fn be_u64(&mut self, at: usize) -> Result<u64, FrameError> {
        self.array(at).map(u64::from_be_bytes)
    }

    /// Reads an array header.
    fn array_len(&mut self) -> Result<u32, FrameError> {
        let at = self.pos;
        match self.byte(at)? {
            m @ 0x90..=0x9f => Ok(u32::from(m & 0x0f)),
            0xdc => self.be_u16(at).map(u32::from),
            0xdd => self.be_u32(at),
            m => Err(self.wrong(at, "an array", m)),
        }
    }

    /// Reads a signed integer whose marker was just read; `None` when the marker is not one.
    fn signed(&mut self, marker: u8, at: usize) -> Result<Option<i64>, FrameError> {
        Ok(Some(match marker {
            0xe0..=0xff => i64::from(i8::from_be_bytes([marker])),
            0xd0 => i64::from(i8::from_be_bytes(self.array(at)?)),
            0xd1 => i64::from(i16::from_be_bytes(self.array(at)?)),
            0xd2 => i64::from(i32::from_be_bytes(self.array(at)?)),
            0xd3 => i64::from_be_bytes(self.array(at)?),
            _ => return Ok(None),
        }))
    }

    /// Reads an unsigned integer whose marker was just read; `None` when the marker is not one.
    fn unsigned(&mut self, marker: u8, at: usize) -> Result<Option<u64>, FrameError> {
        Ok(Some(match marker {
            0x00..=0x7f => u64::from(marker),
            0xcc => u64::from(self.byte(at)?),
            0xcd => u64::from(self.be_u16(at)?),
            0xce => u64::from(self.be_u32(at)?),
            0xcf => self.be_u64(at)?,
            _ => return Ok(None),
        }))
    }

    /// Reads a non-negative integer (in any integer encoding) or nil.
    fn opt_uint(&mut self) -> Result<Option<u64>, FrameError> {
        const EXPECTED: &str = "an unsigned integer or nil";
        let at = self.pos;
        let m = self.byte(at)?;
        if m == 0xc0 {
            return Ok(None);
        }
        if let Some(v) = self.unsigned(m, at)? {
            return Ok(Some(v));
        }
        match self.signed(m, at)? {
            Some(v) => u64::try_from(v)
                .map(Some)
                .map_err(|_| self.wrong(at, EXPECTED, m)),
            None => Err(self.wrong(at, EXPECTED, m)),
        }
    }

    fn timestamp(&mut self) -> Result<Timestamp, FrameError> {
        let at = self.pos;
        let m = self.byte(at)?;
        if let Some(v) = self.unsigned(m, at)? {
            return Ok(Timestamp::Millis(v));
        }
        if let Some(v) = self.signed(m, at)? {
            return Ok(match u64::try_from(v) {
                Ok(v) => Timestamp::Millis(v),
                Err(_) => Timestamp::Negative(v),
            });
        }
        match m {
            0xc0 => Ok(Timestamp::Nil),
            0xca => Ok(Timestamp::Seconds(f64::from(f32::from_be_bytes(
                self.array(at)?,
            )))),
            0xcb => Ok(Timestamp::Seconds(f64::from_be_bytes(self.array(at)?))),
            _ => Err(self.wrong(at, "a number or nil", m)),
        }
    }

    /// Reads the body of a string whose marker was just read; `None` when it is not a string.
    #[inline]
    fn str_body(&mut self, marker: u8, at: usize) -> Result<Option<&'a [u8]>, FrameError> {
        let len = match marker {
            0xa0..=0xbf => usize::from(marker & 0x1f),
            0xd9 => usize::from(self.byte(at)?),
            0xda => usize::from(self.be_u16(at)?),
            0xdb => to_usize(self.be_u32(at)?),
            _ => return Ok(None),
        };
        self.take(len, at).map(Some)
    }

    /// Reads a string's raw bytes or nil.
    #[inline(always)]
    fn opt_str_bytes(&mut self) -> Result<Option<&'a [u8]>, FrameError> {
        let at = self.pos;
        let m = self.byte(at)?;
        match self.str_body(m, at)? {
            Some(bytes) => Ok(Some(bytes)),
            None if m == 0xc0 => Ok(None),
            None => Err(self.wrong(at, "a string or nil", m)),
        }
    }

    /// Reads a UTF-8 string or nil.
    #[inline]
    fn opt_str(&mut self) -> Result<Option<&'a str>, FrameError> {
        let at = self.pos;
        match self.opt_str_bytes()? {
            Some(bytes) => core::str::from_utf8(bytes)
                .map(Some)
                .map_err(|_| self.error(at, PayloadError::InvalidUtf8)),
            None => Ok(None),
        }
    }

    /// Checks that `items` values (each at least one byte) can fit in what remains.
    fn check_items(&self, items: usize, at: usize) -> Result<(), FrameError> {
        if items > self.remaining() {
            Err(self.truncated(at))
        } else {
            Ok(())
        }
    }

    /// Skips one value of any type found at nesting `level` without decoding it.
    fn skip(&mut self, level: u32) -> Result<(), FrameError> {
        let at = self.pos;
        let m = self.byte(at)?;
        let (bytes, items) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => return Ok(()),
            0x80..=0x8f => (0, usize::from(m & 0x0f) * 2),
            0x90..=0x9f => (0, usize::from(m & 0x0f)),
            0xa0..=0xbf => (usize::from(m & 0x1f), 0),
            0xc1 => return Err(self.error(at, PayloadError::ReservedMarker)),
            0xc4 | 0xd9 => (usize::from(self.byte(at)?), 0),
            0xc5 | 0xda => (usize::from(self.be_u16(at)?), 0),
            0xc6 | 0xdb => (to_usize(self.be_u32(at)?), 0),
            // ext: a length, then a type byte, then the data
            0xc7 => (usize::from(self.byte(at)?) + 1, 0),
            0xc8 => (usize::from(self.be_u16(at)?) + 1, 0),
            0xc9 => (to_usize(self.be_u32(at)?).saturating_add(1), 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (0, usize::from(self.be_u16(at)?)),
            0xdd => (0, to_usize(self.be_u32(at)?)),
            0xde => (0, usize::from(self.be_u16(at)?) * 2),
            0xdf => (0, to_usize(self.be_u32(at)?).saturating_mul(2)),
        };
        if bytes > 0 {
            self.take(bytes, at)?;
            return Ok(());
        }
        // Only containers get here; an empty one still counts as a level.
        if level >= MAX_DEPTH {
            return Err(self.error(at, PayloadError::TooDeep));
        }
        self.check_items(items, at)?;
        for _ in 0..items {
            self.skip(level + 1)?;
        }
        Ok(())
    }

    /// Reads the events array, allocating its `Vec` once.
    fn events(&mut self) -> Result<Vec<Event<'a>>, FrameError> {
        let at = self.pos;
        let declared = self.array_len()?;
        if declared > MAX_EVENTS {
            return Err(FrameError::Payload {
                offset: at,
                kind: PayloadError::TooManyEvents { declared },
            });
        }
        let len = to_usize(declared);
        self.check_items(len, at)?;
        let mut events = Vec::with_capacity(len);
        for _ in 0..len {
            events.push(self.event()?);
        }
        Ok(events)
    }

    /// Reads one event: a map by field name, or any other value as an unknown event.
    fn event(&mut self) -> Result<Event<'a>, FrameError> {
        let at = self.pos;
        let len = match self.buf.get(at).copied() {
            Some(m @ 0x80..=0x8f) => {
                self.pos += 1;
                usize::from(m & 0x0f)
            }
            Some(0xde) => {
                self.pos += 1;
                usize::from(self.be_u16(at)?)
            }
            Some(0xdf) => {
                self.pos += 1;
                to_usize(self.be_u32(at)?)
            }
            _ => {
                self.skip(FIELD_LEVEL - 1)?;
                return Ok(UNKNOWN_EVENT);
            }
        };
        self.check_items(len.saturating_mul(2), at)?;
        let mut event = UNKNOWN_EVENT;
        // `Some(None)` is a nil `event_type`, which falls back like a missing one.
        let mut event_type: Option<Option<&[u8]>> = None;
        let mut legacy_type: Option<&[u8]> = None;
        for _ in 0..len {
            let key_at = self.pos;
            let m = self.byte(key_at)?;
            let key = if let 0xa0..=0xbf = m {
                // The common case: a short field name.
                Some(self.take(usize::from(m & 0x1f), key_at)?)
            } else {
                self.str_body(m, key_at)?
            };
            let Some(key) = key else {
                // Not a string key: skip the key and its value.
                self.pos = key_at;
                self.skip(FIELD_LEVEL)?;
                self.skip(FIELD_LEVEL)?;
                continue;
            };
            match Field::of(key) {
                Field::ObjectKey => event.object_key = self.opt_str()?,
                Field::TenantId => event.tenant_id = self.opt_str()?,
                Field::GroupId => event.group_id = self.opt_str_bytes()?,
                Field::EventType => event_type = Some(self.opt_str_bytes()?),
                Field::Type => legacy_type = self.opt_str_bytes()?,
                Field::Medium => event.medium = self.opt_str_bytes()?.map(medium_from),
                Field::EventId => event.event_id = self.opt_uint()?,
                Field::Ignored => self.skip_field_value()?,
            }
        }
        // `event_type` wins unless it is missing or nil; then the legacy `type`, if any.
        event.kind = match event_type.flatten() {
            Some(value) => kind_from_event_type(value),
            None => legacy_type.map_or(EventKind::Unknown, kind_from_legacy_type),
        };
        Ok(event)
    }

    /// Skips an ignored field's value, with the values Mooncake sends handled inline.
    #[inline]
    fn skip_field_value(&mut self) -> Result<(), FrameError> {
        match self.buf.get(self.pos).copied() {
            // nil, small integers, booleans, empty arrays and maps
            Some(0x00..=0x7f | 0xc0 | 0xc2 | 0xc3 | 0x80 | 0x90) => {
                self.pos += 1;
                Ok(())
            }
            Some(m @ 0xa0..=0xbf) => {
                let at = self.pos;
                self.pos += 1;
                self.take(usize::from(m & 0x1f), at).map(drop)
            }
            _ => self.skip(FIELD_LEVEL),
        }
    }
}

/// The event map fields the decoder reads.
#[derive(Copy, Clone)]
enum Field {
    ObjectKey,
    TenantId,
    GroupId,
    EventType,
    Type,
    Medium,
    EventId,
    Ignored,
}

impl Field {
    /// Recognises a field name, comparing fixed-size arrays after a dispatch on the length.
    #[inline]
    fn of(key: &[u8]) -> Field {
        match key.len() {
            4 if key == b"type" => Field::Type,
            6 if key == b"medium" => Field::Medium,
            8 => match <[u8; 8]>::try_from(key) {
                Ok(k) if k == *b"group_id" => Field::GroupId,
                Ok(k) if k == *b"event_id" => Field::EventId,
                _ => Field::Ignored,
            },
            9 if key == b"tenant_id" => Field::TenantId,
            10 => match <[u8; 10]>::try_from(key) {
                Ok(k) if k == *b"object_key" => Field::ObjectKey,
                Ok(k) if k == *b"event_type" => Field::EventType,
                _ => Field::Ignored,
            },
            _ => Field::Ignored,
        }
    }
}

fn kind_from_event_type(value: &[u8]) -> EventKind {
    match value {
        b"stored" => EventKind::Stored,
        b"removed" => EventKind::Removed,
        b"cleared" => EventKind::Cleared,
        _ => EventKind::Unknown,
    }
}

fn kind_from_legacy_type(value: &[u8]) -> EventKind {
    match value {
        b"BlockStored" => EventKind::Stored,
        b"BlockRemoved" => EventKind::Removed,
        b"AllBlocksCleared" => EventKind::Cleared,
        _ => EventKind::Unknown,
    }
}

fn medium_from(value: &[u8]) -> Medium {
    match value {
        b"cpu" => Medium::Cpu,
        b"disk" => Medium::Disk,
        _ => Medium::Other,
    }
}
