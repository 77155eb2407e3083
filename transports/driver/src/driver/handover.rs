//! Handing a key list over to the session chunk by chunk, between live batches
//! ([`Driver::advance_snapshot`]).

use hicache_index::Input;

use crate::handle::HoldKind;
use crate::observe::Observer;

use super::{hold, Driver, SNAPSHOT_CHUNK_LINES};

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
