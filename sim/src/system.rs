//! The system under test: the part of [`Session`]'s public API the world drives, as a trait, so
//! that the same checker runs against the real session and against deliberately broken ones.

use std::collections::BTreeMap;

use hicache_index::{
    Config, ConfigError, Effects, Hits, Input, Instant, Lookup, QueryError, Seq, Session,
    SessionStatus, Watermark,
};
use hicache_index_shortcuts::Shortcuts;

use crate::master::Status;

/// What the world needs from a session (see [`Session`] for each method's contract): one way
/// in, and what it reads. A system is a session, or a session behind a deliberately broken
/// way in: the reads go to the session inside unless a system says otherwise.
pub trait System {
    /// Hands over one input (see [`Session::handle`]).
    fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects;
    /// Returns the session inside, which the reads ask.
    fn session(&self) -> &Session;
    /// Returns when [`Input::Timeout`] is next due.
    fn poll_timeout(&self) -> Option<Instant> {
        self.session().poll_timeout()
    }
    /// Answers a prefix query.
    fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.session().query(lookup)
    }
    /// Answers a query with a per-page map.
    fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.session().query_map(lookup, map)
    }
    /// Returns where the session is, with the unconfirmed age as of `now` and the sequence of
    /// the last batch applied as the publisher sent it.
    fn status(&self, now: Instant) -> SessionStatus {
        self.session().status(now)
    }
    /// Reports whether the index holds one object, when the system can tell (`None`: it
    /// cannot, and the exact mode's object check skips it); it changes nothing in the index.
    fn holds_object(&self, tenant: &str, key: &str) -> Option<bool> {
        Some(self.session().reader().holds_object(tenant, key))
    }
}

impl System for Session {
    fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects {
        Session::handle(self, now, input)
    }
    fn session(&self) -> &Session {
        self
    }
}

/// The watermark a driver reads from the master's `GET /kv_events/status`: its last sequence
/// and its event count.
pub fn watermark_of(status: Status) -> Watermark {
    Watermark {
        seq: status.last_seq(),
        events: Some(status.published_events),
    }
}

/// A deliberately broken session: it renumbers the sequence frames of the messages it is fed
/// so that they are consecutive, so the real session behind it never sees a gap or a restart
/// (the bug "ignore gaps" of a naive subscriber). A repeated sequence keeps its number, so
/// duplicates are still recognised. [`System::status`] reports the publisher's own
/// sequence, so the checker compares at the right point of the history.
///
/// The checker MUST find false hits with it under loss; see the planted-bug test.
#[derive(Debug)]
pub struct GapBlindSession {
    inner: Session,
    topic: Vec<u8>,
    last_original: Option<u64>,
    next: u64,
    originals: BTreeMap<u64, u64>,
}

impl GapBlindSession {
    /// Wraps a real session made from `config`.
    pub fn new(config: Config) -> Result<GapBlindSession, ConfigError> {
        let topic = config.topic.clone();
        Ok(GapBlindSession {
            inner: Session::new(config)?,
            topic,
            last_original: None,
            next: 1,
            originals: BTreeMap::new(),
        })
    }
}

impl GapBlindSession {
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        let renumber = frames.len() == 3 && frames[0] == self.topic && frames[1].len() == 8;
        if !renumber {
            return self.inner.feed(now, frames);
        }
        let original = u64::from_be_bytes(frames[1].try_into().expect("8 bytes"));
        let number = if self.last_original == Some(original) {
            self.next - 1
        } else {
            self.next += 1;
            self.next - 1
        };
        self.last_original = Some(original);
        self.originals.insert(number, original);
        let seq = number.to_be_bytes();
        // Event ids would tell the session that consecutive numbers hide lost batches: strip
        // them, so that the planted blindness is complete.
        let payload = match hicache_index::decode(frames) {
            Ok(batch) => {
                let mut owned = hicache_index_wire::OwnedBatch::from(&batch);
                for event in &mut owned.events {
                    event.event_id = None;
                }
                hicache_index_wire::encode_payload(
                    &owned,
                    hicache_index_wire::MasterFlavor::Release0314,
                )
            }
            Err(_) => frames[2].to_vec(),
        };
        self.inner.feed(now, &[frames[0], &seq, &payload])
    }
}

impl System for GapBlindSession {
    fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects {
        match input {
            Input::Message(frames) => self.feed(now, frames),
            Input::Snapshot {
                request,
                watermark,
                lines,
            } => {
                // The inner session counts renumbered sequences: translate the watermark to the
                // renumbered sequence of the last batch fed at or below it. The event ids were
                // stripped, so the event count means nothing to it either.
                let watermark = watermark.map(|w| {
                    let w = w.seq.0;
                    let below = self.originals.iter().rev().find(|&(_, &o)| o <= w);
                    Watermark {
                        seq: Seq(below.map_or(0, |(&n, &o)| n + (w - o))),
                        events: None,
                    }
                });
                self.inner.handle(
                    now,
                    Input::Snapshot {
                        request,
                        watermark,
                        lines,
                    },
                )
            }
            other => self.inner.handle(now, other),
        }
    }
    fn session(&self) -> &Session {
        &self.inner
    }
    fn status(&self, now: Instant) -> SessionStatus {
        let mut status = self.inner.status(now);
        status.last_applied_seq = status
            .last_applied_seq
            .and_then(|renumbered| self.originals.get(&renumbered.0).map(|&s| Seq(s)));
        status
    }
    /// Reports nothing: failure reports of this system leave the index's objects out.
    fn holds_object(&self, _tenant: &str, _key: &str) -> Option<bool> {
        None
    }
}
