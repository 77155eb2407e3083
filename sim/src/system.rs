//! The system under test: the part of [`Session`]'s public API the world drives, as a trait, so
//! that the same checker runs against the real session and against deliberately broken ones.

use std::collections::BTreeMap;

use hicache_index::{
    Config, ConfigError, Counters, Effects, Health, Hits, Instant, Lookup, QueryError, Seq,
    Session, Watermark,
};

use crate::master::Status;

/// What the world needs from a session (see [`Session`] for each method's contract).
pub trait System {
    /// Feeds one multipart message.
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects;
    /// Does whatever is due at `now`.
    fn handle_timeout(&mut self, now: Instant) -> Effects;
    /// Reports that the subscriber connected.
    fn handle_connected(&mut self, now: Instant) -> Effects;
    /// Reports that the connection was lost or failed.
    fn handle_disconnected(&mut self, now: Instant) -> Effects;
    /// Hands over a snapshot answer: the master's `GET /kv_events/status` read first (`None`
    /// when the master does not tell), then the `GET /get_all_keys` body cut into lines at `\n`
    /// (each line exactly as the master wrote it, without its `\n`).
    fn handle_snapshot(
        &mut self,
        now: Instant,
        request: u64,
        status: Option<Status>,
        lines: &[&[u8]],
    ) -> Effects;
    /// Reports a failed snapshot fetch.
    fn handle_snapshot_failed(&mut self, now: Instant, request: u64) -> Effects;
    /// Reports a failed verification request.
    fn handle_verify_failed(&mut self, now: Instant, request: u64) -> Effects;
    /// Hands over a verification answer.
    fn handle_verify_result<'k>(
        &mut self,
        now: Instant,
        request: u64,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects;
    /// Forgets every page now.
    fn clear(&mut self, now: Instant) -> Effects;
    /// Returns when `handle_timeout` must next be called.
    fn poll_timeout(&self) -> Option<Instant>;
    /// Answers a prefix query.
    fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError>;
    /// Answers a query with a per-page map.
    fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError>;
    /// Returns the sequence of the last batch applied, as the publisher sent it.
    fn last_applied_seq(&self) -> Option<Seq>;
    /// Returns the counters.
    fn counters(&self) -> Counters;
    /// Returns the counters, with the unconfirmed age as of `now`.
    fn counters_at(&self, now: Instant) -> Counters;
    /// Returns the health.
    fn health(&self) -> Health;
    /// Reports whether the index holds one object, when the system can tell (for failure
    /// reports only; never used by a check).
    fn holds_object(&self, tenant: &str, key: &str) -> Option<bool> {
        let _ = (tenant, key);
        None
    }
}

impl System for Session {
    fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        Session::feed(self, now, frames)
    }
    fn handle_timeout(&mut self, now: Instant) -> Effects {
        Session::handle_timeout(self, now)
    }
    fn handle_connected(&mut self, now: Instant) -> Effects {
        Session::handle_connected(self, now)
    }
    fn handle_disconnected(&mut self, now: Instant) -> Effects {
        Session::handle_disconnected(self, now)
    }
    fn handle_snapshot(
        &mut self,
        now: Instant,
        request: u64,
        status: Option<Status>,
        lines: &[&[u8]],
    ) -> Effects {
        handle_snapshot_with(self, now, request, status, true, lines)
    }
    fn handle_verify_failed(&mut self, now: Instant, request: u64) -> Effects {
        Session::handle_verify_failed(self, now, request)
    }
    fn handle_snapshot_failed(&mut self, now: Instant, request: u64) -> Effects {
        Session::handle_snapshot_failed(self, now, request)
    }
    fn handle_verify_result<'k>(
        &mut self,
        now: Instant,
        request: u64,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects {
        Session::handle_verify_result(self, now, request, results)
    }
    fn clear(&mut self, now: Instant) -> Effects {
        Session::clear(self, now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        Session::poll_timeout(self)
    }
    fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        Session::query(self, lookup)
    }
    fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        Session::query_map(self, lookup, map)
    }
    fn last_applied_seq(&self) -> Option<Seq> {
        Session::last_applied_seq(self)
    }
    fn counters(&self) -> Counters {
        Session::counters(self)
    }
    fn counters_at(&self, now: Instant) -> Counters {
        Session::counters_at(self, now)
    }
    fn health(&self) -> Health {
        Session::health(self)
    }
    fn holds_object(&self, tenant: &str, key: &str) -> Option<bool> {
        Some(self.index().contains_key(tenant, key))
    }
}

/// Hands a snapshot to a real session: the status becomes the watermark (its event count only
/// when `events` is set), the lines go as they are.
pub fn handle_snapshot_with(
    session: &mut Session,
    now: Instant,
    request: u64,
    status: Option<Status>,
    events: bool,
    lines: &[&[u8]],
) -> Effects {
    let watermark = status.map(|s| Watermark {
        seq: s.last_seq(),
        events: events.then_some(s.published_events),
    });
    Session::handle_snapshot(session, now, request, watermark, lines.iter())
}

/// A deliberately broken session: it renumbers the sequence frames of the messages it is fed
/// so that they are consecutive, so the real session behind it never sees a gap or a restart
/// (the bug "ignore gaps" of a naive subscriber). A repeated sequence keeps its number, so
/// duplicates are still recognised. [`System::last_applied_seq`] reports the publisher's own
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

impl System for GapBlindSession {
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
                let mut owned = crate::encode::OwnedBatch::from(&batch);
                for event in &mut owned.events {
                    event.event_id = None;
                }
                crate::encode::encode_payload(&owned, crate::encode::MasterFlavor::Release0314)
            }
            Err(_) => frames[2].to_vec(),
        };
        self.inner.feed(now, &[frames[0], &seq, &payload])
    }
    fn handle_timeout(&mut self, now: Instant) -> Effects {
        self.inner.handle_timeout(now)
    }
    fn handle_connected(&mut self, now: Instant) -> Effects {
        self.inner.handle_connected(now)
    }
    fn handle_disconnected(&mut self, now: Instant) -> Effects {
        self.inner.handle_disconnected(now)
    }
    fn handle_snapshot(
        &mut self,
        now: Instant,
        request: u64,
        status: Option<Status>,
        lines: &[&[u8]],
    ) -> Effects {
        // The inner session counts renumbered sequences: translate the watermark to the
        // renumbered sequence of the last batch fed at or below it. The event ids were
        // stripped, so the event count means nothing to it either.
        let status = status.map(|s| {
            let w = s.last_seq().0;
            let below = self.originals.iter().rev().find(|&(_, &o)| o <= w);
            Status {
                published_batches: below.map_or(0, |(&n, &o)| n + (w - o)),
                published_events: 0,
                dropped_events: 0,
            }
        });
        handle_snapshot_with(&mut self.inner, now, request, status, false, lines)
    }
    fn handle_verify_failed(&mut self, now: Instant, request: u64) -> Effects {
        self.inner.handle_verify_failed(now, request)
    }
    fn handle_snapshot_failed(&mut self, now: Instant, request: u64) -> Effects {
        self.inner.handle_snapshot_failed(now, request)
    }
    fn handle_verify_result<'k>(
        &mut self,
        now: Instant,
        request: u64,
        results: impl IntoIterator<Item = (&'k str, bool)>,
    ) -> Effects {
        self.inner.handle_verify_result(now, request, results)
    }
    fn clear(&mut self, now: Instant) -> Effects {
        self.inner.clear(now)
    }
    fn poll_timeout(&self) -> Option<Instant> {
        self.inner.poll_timeout()
    }
    fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.inner.query(lookup)
    }
    fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.inner.query_map(lookup, map)
    }
    fn last_applied_seq(&self) -> Option<Seq> {
        let renumbered = self.inner.last_applied_seq()?;
        self.originals.get(&renumbered.0).map(|&s| Seq(s))
    }
    fn counters(&self) -> Counters {
        self.inner.counters()
    }
    fn counters_at(&self, now: Instant) -> Counters {
        self.inner.counters_at(now)
    }
    fn health(&self) -> Health {
        self.inner.health()
    }
}
