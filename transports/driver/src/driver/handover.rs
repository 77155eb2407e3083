//! A key list handed over to the session chunk by chunk ([`Handover`]), between live batches.

use std::time::Duration;

use hicache_index::{Input, SnapshotRequest};

use super::{hold, Driver, SNAPSHOT_CHUNK_LINES};
use crate::handle::HoldKind;
use crate::observe::Observer;

/// A key list being handed over to the session, chunk by chunk.
pub(crate) struct Handover {
    /// The core's request.
    pub(super) request: SnapshotRequest,
    /// The body of `/get_all_keys`.
    body: Vec<u8>,
    /// Where its lines end: before its last `\n`, if it ends in one.
    end: usize,
    /// Where the next line begins; past `end` once every line was handed over.
    pub(super) next: usize,
    /// Chunks applied so far.
    chunks: usize,
    /// The write-lock hold of the last chunk.
    pub(super) last: Duration,
    /// The longest write-lock hold for one chunk.
    longest: Duration,
    /// When the body reached the loop.
    began: std::time::Instant,
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

impl<O: Observer> Driver<O> {
    /// Applies the next chunk (at most [`SNAPSHOT_CHUNK_LINES`] lines) of the key list being
    /// handed over, under one hold of the write lock, or finishes the handover once every line
    /// is in. Returns true while chunks remain: the loop must then come back without waiting,
    /// after draining the socket, so that live batches go in between chunks.
    ///
    /// A handover the session no longer wants (it reconnected, cleared or fetched anew) is
    /// dropped.
    pub fn advance_snapshot(&mut self) -> bool {
        let now = self.now();
        let Some(h) = &mut self.handover else {
            return false;
        };
        if self.stopped {
            return false;
        }
        if !h.is_done() {
            let held = std::time::Instant::now();
            let request = h.request;
            let lines: Vec<&[u8]> = h.lines(SNAPSHOT_CHUNK_LINES).collect();
            let taken = hold(
                &self.shared,
                HoldKind::SnapshotChunk,
                "snapshot chunk",
                |session| {
                    let lines = &lines[..];
                    let fx = session.handle(now, Input::SnapshotLines { request, lines });
                    debug_assert!(fx.is_empty(), "lines of a snapshot have no effects");
                    session.status(now).snapshot_applied(request).is_some()
                },
            );
            drop(lines);
            h.last = held.elapsed();
            h.longest = h.longest.max(h.last);
            h.chunks += 1;
            if taken != Some(true) {
                tracing::debug!(
                    request = h.request.0,
                    "the session no longer wants this snapshot"
                );
                self.handover = None;
                return false;
            }
            return true;
        }
        let Some(h) = self.handover.take() else {
            return false;
        };
        let finished = hold(
            &self.shared,
            HoldKind::Other,
            "snapshot finish",
            |session| {
                let request = h.request;
                (
                    session.handle(now, Input::SnapshotEnd { request }),
                    session.poll_timeout(),
                )
            },
        );
        if let Some((fx, deadline)) = finished {
            self.deadline = deadline;
            self.observe_and_execute(now, fx);
        }
        tracing::debug!(
            request = h.request.0,
            bytes = h.body.len(),
            chunks = h.chunks,
            longest_chunk_us = h.longest.as_micros() as u64,
            took_ms = h.began.elapsed().as_millis() as u64,
            "snapshot handed over"
        );
        false
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
