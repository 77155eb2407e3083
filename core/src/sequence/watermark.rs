//! What the master's status says of its stream: the point a key list read after it stands at.

use super::place::Point;
use crate::frame::Seq;

/// What the master's `GET /kv_events/status` said just before its key list was read: where its
/// stream stood.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watermark {
    /// The last sequence the master had assigned: `published_batches + dropped_events`.
    pub seq: Seq,
    /// The last event id it had given: `published_events` (event ids count published events
    /// from 1); `None` when the master does not tell.
    pub events: Option<u64>,
}

impl From<Seq> for Watermark {
    fn from(seq: Seq) -> Watermark {
        Watermark { seq, events: None }
    }
}

impl Watermark {
    /// The stream point it names.
    pub fn point(self) -> Point {
        Point {
            seq: self.seq,
            last: self.events,
        }
    }
}
