//! A key list being handed over to the session ([`Handover`]) and its next lines ([`Lines`]).

use std::time::Duration;

use hicache_index::SnapshotRequest;

/// A key list being handed over to the session, chunk by chunk.
pub(crate) struct Handover {
    /// The core's request.
    pub(super) request: SnapshotRequest,
    /// The body of `/get_all_keys`.
    pub(super) body: Vec<u8>,
    /// Where its lines end: before its last `\n`, if it ends in one.
    end: usize,
    /// Where the next line begins; past `end` once every line was handed over.
    pub(super) next: usize,
    /// Chunks applied so far.
    pub(super) chunks: usize,
    /// The write-lock hold of the last chunk.
    pub(super) last: Duration,
    /// The longest write-lock hold for one chunk.
    pub(super) longest: Duration,
    /// When the body reached the loop.
    pub(super) began: std::time::Instant,
}

impl Handover {
    pub(super) fn new(request: SnapshotRequest, body: Vec<u8>) -> Handover {
        let end = body.strip_suffix(b"\n").map_or(body.len(), <[u8]>::len);
        Handover {
            request,
            // An empty list has no line at all, not one empty line.
            next: usize::from(end == 0),
            end,
            body,
            chunks: 0,
            last: Duration::ZERO,
            longest: Duration::ZERO,
            began: std::time::Instant::now(),
        }
    }

    /// The next lines, at most `max` of them: together, every line exactly as
    /// [`hicache_index::snapshot_lines`] splits the whole body.
    pub(super) fn lines(&mut self, max: usize) -> Lines<'_> {
        Lines {
            body: &self.body[..self.end],
            next: &mut self.next,
            left: max,
        }
    }

    /// Reports whether every line was handed over.
    pub(super) fn is_done(&self) -> bool {
        self.next > self.end
    }
}

/// The next lines of a key list's `body` (cut before its last `\n`), split on `\n` only and
/// never trimmed, at most `left` of them, moving `next` past each (past the end after the last).
pub(super) struct Lines<'b> {
    body: &'b [u8],
    next: &'b mut usize,
    left: usize,
}

impl<'b> Iterator for Lines<'b> {
    type Item = &'b [u8];

    fn next(&mut self) -> Option<&'b [u8]> {
        let rest = self.body.get(*self.next..).filter(|_| self.left > 0)?;
        self.left -= 1;
        let len = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        *self.next += len + 1;
        Some(&rest[..len])
    }
}
