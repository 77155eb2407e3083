//! The traces: Mooncake's FAST'25 request traces, kept gzip-compressed in `data/` and read from
//! the bytes compiled into this crate (no file is opened at run time).

use std::io::Read;

use flate2::read::GzDecoder;
use serde::Deserialize;

/// Tokens in one block of a trace: every hash id stands for this many tokens.
pub const BLOCK_TOKENS: usize = 512;

/// One request of a trace, as its line says.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct Request {
    /// Arrival in milliseconds from the trace's start.
    pub timestamp: u64,
    /// Input tokens.
    pub input_length: usize,
    /// Output tokens (not used by the replay: decoding adds no page to L3 here).
    pub output_length: usize,
    /// The request's prefix blocks, [`BLOCK_TOKENS`] tokens each; the last may be partial.
    pub hash_ids: Vec<u32>,
}

/// A whole trace (or a slice of one), with its name.
#[derive(Clone, Debug)]
pub struct Trace {
    /// `conversation` or `synthetic` (with the slice it is, when one).
    pub name: String,
    /// The requests, in order of arrival.
    pub requests: Vec<Request>,
}

/// The conversation trace: one hour of a production service, 12,031 requests.
const CONVERSATION: &[u8] = include_bytes!("../data/mooncake_fast25_conversation_trace.jsonl.gz");
/// The synthetic trace: Poisson arrivals, 3,993 requests.
const SYNTHETIC: &[u8] = include_bytes!("../data/mooncake_fast25_synthetic_trace.jsonl.gz");

/// Which of the two traces.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum TraceName {
    /// `mooncake_fast25_conversation_trace`.
    Conversation,
    /// `mooncake_fast25_synthetic_trace`.
    Synthetic,
}

impl TraceName {
    /// Both traces, conversation first.
    pub const ALL: [TraceName; 2] = [TraceName::Conversation, TraceName::Synthetic];

    /// Returns the trace's short name.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceName::Conversation => "conversation",
            TraceName::Synthetic => "synthetic",
        }
    }
}

impl Trace {
    /// Decompresses and parses one of the traces compiled into the crate.
    ///
    /// # Panics
    /// If the embedded bytes do not decode (they are checked by this crate's tests).
    pub fn load(name: TraceName) -> Trace {
        let bytes = match name {
            TraceName::Conversation => CONVERSATION,
            TraceName::Synthetic => SYNTHETIC,
        };
        let mut text = String::new();
        GzDecoder::new(bytes)
            .read_to_string(&mut text)
            .expect("the embedded trace is valid gzip and UTF-8");
        let requests = text
            .lines()
            .filter(|line| !line.trim().is_empty())
            .map(|line| serde_json::from_str(line).expect("a trace line is a request"))
            .collect();
        Trace {
            name: name.as_str().to_owned(),
            requests,
        }
    }

    /// Returns the first `n` requests as a trace of their own.
    pub fn slice(&self, n: usize) -> Trace {
        let n = n.min(self.requests.len());
        Trace {
            name: format!("{} (first {n} requests)", self.name),
            requests: self.requests[..n].to_vec(),
        }
    }

    /// Returns how many distinct block ids the requests name.
    pub fn distinct_blocks(&self) -> usize {
        let mut seen = vec![false; self.block_id_bound()];
        let mut distinct = 0;
        for id in self.requests.iter().flat_map(|r| &r.hash_ids) {
            if !std::mem::replace(&mut seen[*id as usize], true) {
                distinct += 1;
            }
        }
        distinct
    }

    /// Returns one more than the largest block id (0 for no block).
    pub fn block_id_bound(&self) -> usize {
        self.requests
            .iter()
            .flat_map(|r| &r.hash_ids)
            .map(|&id| id as usize + 1)
            .max()
            .unwrap_or(0)
    }

    /// Returns the time from the first arrival to the last, in milliseconds: the real time the
    /// trace took.
    pub fn span_ms(&self) -> u64 {
        match (self.requests.first(), self.requests.last()) {
            (Some(first), Some(last)) => last.timestamp.saturating_sub(first.timestamp),
            _ => 0,
        }
    }
}
