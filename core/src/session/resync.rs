//! Resynchronisation from the master's key list, and the status point that proves a snapshot.

use super::*;

impl From<Seq> for Watermark {
    fn from(seq: Seq) -> Watermark {
        Watermark { seq, events: None }
    }
}

/// A snapshot's status point that the stream has not passed yet: until it does, the snapshot may
/// be of another run of the master than the stream (a restart nobody saw between the two).
#[derive(Clone, Copy, Debug)]
pub(super) struct Proof {
    /// The master's stream position when the snapshot was read.
    pub(super) at: Watermark,
    /// Set once the stream has begun short of the point: queries miss until it is passed, and
    /// at this time the snapshot counts as unproven.
    pub(super) deadline: Option<Instant>,
}

/// What a batch says about a pending [`Proof`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProofCheck {
    /// It is before the status point and consistent with it.
    Pending,
    /// It is the first batch after the point and runs on from it.
    Proven,
    /// It contradicts the point: the snapshot and the stream are of different runs.
    Broken,
}

impl Proof {
    /// Checks a batch with sequence `seq` and event ids `first..=last` against the point.
    ///
    /// Event ids count the master's published events from 1, so the status's `events` is the
    /// last id it gave: a batch before the point ends at or below it; the batch at the point
    /// ends exactly at it; the first batch after the point starts right after it.
    ///
    /// A batch before the point that ends exactly at `events` proves nothing: the sequences
    /// after it may have been dropped events (which carry none), but a batch of another run of
    /// the master can end at the same count by chance (found by a long sweep: restart-heavy
    /// seed 123619). The proof waits for the batch at or after the point; in the meantime the
    /// next batch of another run either runs past `events` before the point (broken) or is
    /// out of step at it.
    pub(super) fn check(&self, seq: Seq, first: Option<u64>, last: Option<u64>) -> ProofCheck {
        use core::cmp::Ordering::{Equal, Greater, Less};
        let events = self.at.events;
        match seq.cmp(&self.at.seq) {
            Less => match (events, last) {
                (Some(e), Some(l)) if l > e => ProofCheck::Broken,
                _ => ProofCheck::Pending,
            },
            Equal => match (events, last) {
                (Some(e), Some(l)) if l != e => ProofCheck::Broken,
                _ => ProofCheck::Proven,
            },
            Greater => match (events, first) {
                (Some(e), Some(f)) if e.checked_add(1) != Some(f) => ProofCheck::Broken,
                _ => ProofCheck::Proven,
            },
        }
    }
}

/// The resynchronisation's state.
// One per session, moved only when a resync begins or ends: the size of `Fetching` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(super) enum Resync {
    Idle,
    Fetching {
        request: SnapshotRequest,
        deadline: Instant,
        /// When the fetch was asked for: the master's key list is read after it.
        asked_at: Instant,
        /// What the completed resync confirms: `asked_at`, or the index's confirmation when it
        /// held objects already (a snapshot only adds), lowered by anything older added since.
        confirms: Instant,
        /// Live batches applied since the fetch was asked for, and their payload bytes (bounded:
        /// what they touched is remembered in `seen` until the resync ends).
        batches: usize,
        bytes: usize,
        /// The first sequence of the stream when the fetch was asked for, if it had begun.
        stream_at_request: Option<Seq>,
        /// Keys applied so far, once the driver began handing the snapshot over.
        applied: Option<usize>,
        /// The last live event of each default-tenant key since the fetch was asked for
        /// (`true`: stored): a snapshot key whose last live event removed it is not applied,
        /// so that no query between chunks sees it again.
        ///
        /// Keyed by [`key_checksum`], not by the key: no allocation per live event, and a cheap
        /// drop when the resync ends (under the driver's lock). A removal is sticky (`false`
        /// stays), so two keys with one checksum only keep a snapshot key out: a miss, never a
        /// hit.
        seen: BTreeMap<u64, bool>,
        /// A live `cleared` of the default tenant came since the fetch was asked for.
        cleared: bool,
        /// The stream's last sequence and event id when the fetch was asked for.
        before: Option<(Seq, Option<u64>)>,
        /// Each batch applied live since the fetch was asked for: its sequence and first and
        /// last event ids, to check the snapshot's status point against.
        since: Vec<(Seq, Option<u64>, Option<u64>)>,
        /// Which of the snapshot's lines become keys.
        lines: LineFilter,
        /// The index forgot while the key list was being read, which may be older than what it
        /// forgot: the answer is discarded and the fetch asked for again once it comes back
        /// (one fetch under way at a time, however often the index forgets meanwhile).
        superseded: bool,
    },
    Waiting {
        retry_at: Instant,
    },
    /// A snapshot could not be anchored to the stream: fetch again once a batch has arrived,
    /// or at `retry_at` if none has (an idle master whose status read failed once would
    /// otherwise keep the index recovering until it publishes again).
    AwaitingStream {
        retry_at: Instant,
    },
}

/// What the resynchronisation's timer asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ResyncDue {
    /// The fetch was not answered within the fetch timeout: it failed.
    FetchTimedOut,
    /// The retry time after a failure came: fetch again.
    Retry,
}

impl Resync {
    /// Returns when [`Resync::handle_timeout`] is next due.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        match self {
            Resync::Idle => None,
            Resync::Fetching { deadline, .. } => Some(*deadline),
            Resync::Waiting { retry_at } | Resync::AwaitingStream { retry_at } => Some(*retry_at),
        }
    }

    /// Returns what is due at `now`, if anything (the session acts on it).
    pub(super) fn handle_timeout(&self, now: Instant) -> Option<ResyncDue> {
        match *self {
            Resync::Fetching { deadline, .. } if deadline <= now => Some(ResyncDue::FetchTimedOut),
            Resync::Waiting { retry_at } | Resync::AwaitingStream { retry_at }
                if retry_at <= now =>
            {
                Some(ResyncDue::Retry)
            }
            _ => None,
        }
    }
}

impl Proof {
    /// Returns when [`Proof::handle_timeout`] is next due: once the stream has begun short of
    /// the point.
    pub(super) fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Reports whether the stream failed to pass the point in time at `now`: the snapshot is
    /// unproven.
    pub(super) fn handle_timeout(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|at| at <= now)
    }
}

/// Applies one key of a snapshot unless a live batch since the fetch decided its state: removed
/// (or cleared) keys stay out, stored ones are in already.
pub(super) fn store_snapshot_key(
    index: &mut Index,
    seen: &BTreeMap<u64, bool>,
    cleared: bool,
    applied: &mut usize,
    key: &str,
) {
    if cleared || seen.contains_key(&key_checksum(key)) {
        return;
    }
    let _ = index.store(DEFAULT_TENANT, key, None, None);
    *applied += 1;
}

/// An order-independent checksum term of one key (FNV-1a, then mixed): a round's answer names
/// every key asked about, each once, when the sums of the terms agree (and the counts).
pub(super) fn key_checksum(key: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

/// How many times the retry delay (or the verification interval) the backoff of the master's
/// HTTP side grows to at most.
pub(super) const RETRY_BACKOFF_CAP: u32 = 8;

impl Session {
    /// Hands over the master's key list (default tenant) for the fetch `request`, one item per
    /// line exactly as the master wrote it (see [`crate::snapshot_lines`]), with the
    /// [`Watermark`] read just before it, or `None` when the master does not tell.
    ///
    /// The snapshot holds only if the live stream covers every batch after it, from the same run
    /// of the master:
    /// - the stream must begin at or before `watermark.seq + 1`; a stream that begins later lost
    ///   batches between the snapshot and the subscription taking effect: that is a gap, and the
    ///   session fetches again;
    /// - the status point must agree with the stream: the master's counters only grow within
    ///   one run, so a stream that was already past the watermark when the fetch was asked for,
    ///   a batch at or before it with a later event id than `watermark.events`, or a first batch
    ///   after it that does not start at event id `watermark.events + 1`, is another run: the
    ///   session forgets and fetches again;
    /// - the stream passes the status point with the batch at it or the first one after it (a
    ///   batch before it that ends at `watermark.events` does not count: one of another run
    ///   can end there by chance);
    /// - until the stream has passed the status point, the index has not caught up with the
    ///   snapshot: the health stays [`Health::Recovering`] and queries miss, and if the point is
    ///   not passed within the fetch timeout the session forgets and fetches again. (With no
    ///   batch since the connection, an idle master, the snapshot is live at once and its point
    ///   is checked by the first batch.)
    ///
    /// Without a watermark, a snapshot asked for before any batch arrived cannot be anchored; the
    /// session fetches again once the stream has begun, or, if it has not, after the resync's
    /// retry delay (backing off up to 64 times it while snapshots stay unanchored). Lines that
    /// are not exactly keys are never applied (see [`crate::snapshot`]). Shortcut for
    /// [`Input::Snapshot`] that takes any iterator of lines.
    pub fn handle_snapshot<I>(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
        lines: I,
    ) -> Effects
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut fx = self.begin_snapshot(now, request, watermark);
        if self.snapshot_keys(request, lines).is_some() {
            fx.0.extend(self.finish_snapshot(now, request).0);
        }
        self.index.settle();
        fx
    }

    /// Returns how many keys of the snapshot `request`, handed over in chunks
    /// ([`Input::SnapshotLines`]), were applied so far; `None` when the session does not take
    /// its lines (not begun, stale, refused by [`Input::SnapshotBegin`], or finished). A driver
    /// SHOULD drop a handover the session no longer takes.
    pub fn snapshot_progress(&self, request: SnapshotRequest) -> Option<usize> {
        match &self.resync {
            Resync::Fetching {
                request: current,
                applied: Some(applied),
                ..
            } if *current == request => Some(*applied),
            _ => None,
        }
    }

    /// Begins handing over the snapshot of `request` in chunks ([`Input::SnapshotBegin`]).
    pub(super) fn begin_snapshot(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let (stream_at_request, batches_since) = match &self.resync {
            Resync::Fetching {
                request: current,
                applied: None,
                superseded: true,
                ..
            } if *current == request => {
                // The index forgot while this key list was read: fetch it again now.
                self.counters.stale_answers += 1;
                self.resync = Resync::Idle;
                self.start_resync(now, &mut fx);
                self.update_health(&mut fx);
                return fx;
            }
            Resync::Fetching {
                request: current,
                stream_at_request,
                applied: None,
                since,
                ..
            } if *current == request => (*stream_at_request, !since.is_empty()),
            _ => {
                self.counters.stale_answers += 1;
                return fx;
            }
        };
        // The master's status answered and did not say its publisher is off.
        self.events_disabled = false;
        self.http_backoff.attempts = 0;
        let check = watermark.map(|w| (w, self.check_status_point(w)));
        if let Some((_, ProofCheck::Broken)) = check {
            // The master's counters went back, or its event ids disagree with the stream's:
            // the snapshot and the stream are of different runs of the master.
            self.counters.restarts += 1;
            self.counters.run_mismatches += 1;
            self.resync = Resync::Idle;
            self.reset_stream();
            self.forget(now, ClearReason::Restart, &mut fx);
            self.update_health(&mut fx);
            return fx;
        }
        let max_first = watermark.map(|w| Seq(w.seq.0.saturating_add(1)));
        match (max_first, self.stream_start) {
            (Some(max_first), Some(start)) if start > max_first => {
                self.counters.unanchored_snapshots += 1;
                self.note_gap(max_first, start, &mut fx);
                self.resync = Resync::Idle;
                // The stream's beginning cannot be anchored to this master's counters (batches
                // were lost, or they are another run's, an idle restarted master's): the next
                // batch begins the stream anew, so that the next snapshot can be.
                self.reset_stream();
                self.forget(now, ClearReason::Gap, &mut fx);
            }
            (None, _) if stream_at_request.is_none() => {
                self.counters.unanchored_snapshots += 1;
                // Each unanchored fetch in a row waits about twice as long for the next (a
                // master that never tells its status costs a key list per 64 retry periods at
                // most), with the reconnects' backoff.
                let first = self
                    .config
                    .resync
                    .map_or(Duration::from_secs(1), |r| r.retry_after);
                let delay = self.unanchored.delay(&BackoffConfig {
                    initial: first,
                    max: first.saturating_mul(64),
                    ..BackoffConfig::default()
                });
                self.unanchored.attempts = self.unanchored.attempts.saturating_add(1);
                self.resync = Resync::AwaitingStream {
                    retry_at: now + delay,
                };
                if self.stream_start.is_some() {
                    // The stream began while this fetch was under way: a new one is anchored.
                    self.start_resync(now, &mut fx);
                }
            }
            (max_first, start) => {
                self.unanchored.attempts = 0;
                if let (Some(max_first), None) = (max_first, start) {
                    self.anchor = Some(max_first);
                }
                if let Some((at, ProofCheck::Pending)) = check {
                    // Queries miss until the stream passes the point, once a batch shows the
                    // stream short of it; with none since the fetch was asked for (an idle
                    // master), the next batch checks the point.
                    let timeout = self
                        .config
                        .resync
                        .map_or(Duration::ZERO, |r| r.fetch_timeout);
                    self.proof = Some(Proof {
                        at,
                        deadline: batches_since.then(|| now + timeout),
                    });
                    self.publish_query_state();
                }
                if let Resync::Fetching { applied, .. } = &mut self.resync {
                    *applied = Some(0);
                }
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Checks a snapshot's status point against the stream as it stood when the fetch was asked
    /// for and against the batches applied since.
    pub(super) fn check_status_point(&self, at: Watermark) -> ProofCheck {
        let Resync::Fetching { before, since, .. } = &self.resync else {
            return ProofCheck::Pending;
        };
        let proof = Proof { at, deadline: None };
        // The stream when the fetch was asked for: the status was read after it, so a stream
        // already past the point is another run (the master's counters only grow in one).
        let before = match *before {
            Some((seq, _)) if seq > at.seq => return ProofCheck::Broken,
            Some((seq, last)) => proof.check(seq, None, last),
            None => ProofCheck::Pending,
        };
        if before != ProofCheck::Pending {
            return before;
        }
        since
            .iter()
            .map(|&(seq, first, last)| proof.check(seq, first, last))
            .find(|c| *c != ProofCheck::Pending)
            .unwrap_or(ProofCheck::Pending)
    }

    /// Applies a chunk of the snapshot of `request` ([`Input::SnapshotLines`]). Only lines that
    /// are exactly keys become keys (see [`crate::snapshot`]). Returns how many keys it applied
    /// in all so far, or `None` when `request` is not being handed over (stale, refused by
    /// [`Session::begin_snapshot`]).
    pub(super) fn snapshot_keys<I>(&mut self, request: SnapshotRequest, lines: I) -> Option<usize>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let asked_at = match &self.resync {
            Resync::Fetching {
                request: current,
                applied: Some(_),
                asked_at,
                ..
            } if *current == request => *asked_at,
            _ => return None,
        };
        // The master's key list was read after the fetch was asked for.
        self.note_evidence(asked_at);
        let Resync::Fetching {
            applied: Some(applied),
            seen,
            cleared,
            lines: filter,
            ..
        } = &mut self.resync
        else {
            return None;
        };
        let index = &mut self.index;
        for line in lines {
            filter.push(line.as_ref(), |key| {
                store_snapshot_key(index, seen, *cleared, applied, key)
            });
        }
        Some(*applied)
    }

    /// Ends the snapshot of `request`: the index is live again (once the stream has passed the
    /// snapshot's status point). The live batches since the fetch was asked for were applied as
    /// they came, and the snapshot's keys they touched were left to them: nothing is replayed, so
    /// the call is short (a driver holds its lock for it). [`Input::SnapshotEnd`].
    pub(super) fn finish_snapshot(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let (batches, applied, confirms, odd, doubted) = match &mut self.resync {
            Resync::Fetching {
                request: current,
                batches,
                applied: Some(applied),
                confirms,
                seen,
                cleared,
                lines,
                ..
            } if *current == request => {
                let index = &mut self.index;
                lines.finish(|key| store_snapshot_key(index, seen, *cleared, applied, key));
                (*batches, *applied, *confirms, lines.odd, lines.doubted)
            }
            _ => {
                self.counters.stale_answers += 1;
                return fx;
            }
        };
        self.counters.snapshot_odd_lines += odd;
        self.counters.snapshot_doubted_lines += doubted;
        self.resync = Resync::Idle;
        // Every object is from the snapshot (read after the fetch was asked for) or from a batch
        // since, unless the index held objects before: then `confirms` is their confirmation.
        self.confirm(confirms);
        self.counters.snapshot_keys += applied as u64;
        self.counters.resyncs_completed += 1;
        fx.push(Report::Resynced {
            keys: applied,
            replayed: batches,
        });
        self.emit_deltas(&mut fx);
        self.schedule_verify(now);
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the fetch `request` failed; it is retried later (shortcut for
    /// [`Input::SnapshotFailed`]).
    pub fn handle_snapshot_failed(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.handle(now, Input::SnapshotFailed { request })
    }

    /// Ends the fetch `request` with `failure` if it is the current one (it is retried later);
    /// an answer for another request is stale.
    pub(super) fn fetch_failed(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        failure: ResyncFailure,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match &self.resync {
            Resync::Fetching {
                request: current, ..
            } if *current == request => {
                if failure == ResyncFailure::EventsDisabled {
                    self.counters.events_disabled += 1;
                    self.events_disabled = true;
                }
                self.resync_failed(now, failure, &mut fx);
            }
            _ => self.counters.stale_answers += 1,
        }
        self.update_health(&mut fx);
        fx
    }

    /// Checks a live batch about to apply against the pending status point of the last
    /// snapshot, and records it for the status point of the snapshot being fetched. A batch that
    /// contradicts the point starts the stream anew: the index forgets first.
    pub(super) fn check_proof(
        &mut self,
        now: Instant,
        seq: Seq,
        fp: Fingerprint,
        fx: &mut Effects,
    ) {
        let (first, last) = (fp.first_event_id(), fp.last_event_id());
        if let Some(proof) = &mut self.proof {
            match proof.check(seq, first, last) {
                ProofCheck::Proven => self.proof = None,
                ProofCheck::Pending => {
                    if proof.deadline.is_none() {
                        let timeout = self
                            .config
                            .resync
                            .map_or(Duration::ZERO, |r| r.fetch_timeout);
                        proof.deadline = Some(now + timeout);
                        // Queries miss from now on, before this batch changes a page.
                        self.publish_query_state();
                    }
                }
                ProofCheck::Broken => {
                    self.counters.restarts += 1;
                    self.counters.run_mismatches += 1;
                    self.reset_stream();
                    self.begin_stream(now, seq, fx);
                    self.forget(now, ClearReason::Restart, fx);
                }
            }
        }
        if let Resync::Fetching { since, .. } = &mut self.resync {
            since.push((seq, first, last));
        }
    }

    /// Reports whether the last snapshot is not yet proven to be of the stream's run while the
    /// stream has begun short of its status point: queries miss then.
    pub(super) fn is_unproven(&self) -> bool {
        self.proof.is_some_and(|p| p.deadline.is_some())
    }

    /// Counts a live batch applied while a snapshot is fetched; too many fail the resync.
    pub(super) fn count_for_resync(&mut self, now: Instant, payload_len: usize, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        let Resync::Fetching { batches, bytes, .. } = &mut self.resync else {
            return;
        };
        if *batches >= limits.max_buffered_batches
            || *bytes + payload_len > limits.max_buffered_bytes
        {
            self.resync_failed(now, ResyncFailure::BufferFull, fx);
            return;
        }
        *bytes += payload_len;
        *batches += 1;
    }

    pub(super) fn start_resync(&mut self, now: Instant, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        if let Resync::Fetching {
            applied: None,
            superseded,
            ..
        } = &mut self.resync
        {
            // The key list is still being read: asking for another now would read the master's
            // whole key list once more per loss (a storm of them while a fence skips batch
            // after batch). This one's answer is discarded and asked for again when it comes.
            if !*superseded {
                *superseded = true;
                self.counters.superseded_fetches += 1;
            }
            return;
        }
        let request = SnapshotRequest(self.next_request);
        self.next_request += 1;
        self.counters.resyncs_started += 1;
        // A snapshot only adds: objects held already stay as confirmed as they were.
        let confirms = if self.index.object_count() == 0 {
            now
        } else {
            self.confirmed_at.min(now)
        };
        self.resync = Resync::Fetching {
            request,
            deadline: now + limits.fetch_timeout,
            asked_at: now,
            confirms,
            batches: 0,
            bytes: 0,
            stream_at_request: self.stream_start,
            applied: None,
            seen: BTreeMap::new(),
            cleared: false,
            before: self
                .tracker
                .last_applied()
                .map(|seq| (seq, self.tracker.last_event_id())),
            since: Vec::new(),
            lines: LineFilter::default(),
            superseded: false,
        };
        fx.push(Command::FetchSnapshot { request });
    }

    /// Ends the fetch under way as failed; the next is asked for after the retry delay, twice
    /// as long (jittered, in the upper half) for each failure of the master's HTTP side in a
    /// row, up to 8 times it: an unreachable master costs a request every 4-8 s, not every
    /// second, and one that comes back is fetched from within 8 retry delays (the simulator's
    /// liveness check, a quiet period of 10 retry delays, holds the cap to that).
    pub(super) fn resync_failed(&mut self, now: Instant, reason: ResyncFailure, fx: &mut Effects) {
        let retry = self
            .config
            .resync
            .map_or(Duration::from_secs(1), |r| r.retry_after);
        let delay = self.http_backoff.delay(&BackoffConfig {
            initial: retry,
            max: retry.saturating_mul(RETRY_BACKOFF_CAP),
            ..BackoffConfig::default()
        });
        self.http_backoff.attempts = self.http_backoff.attempts.saturating_add(1);
        self.counters.resyncs_failed += 1;
        self.resync = Resync::Waiting {
            retry_at: now + delay,
        };
        fx.push(Report::ResyncFailed { reason });
    }
}
