//! Resynchronisation from the master's key list: the fetch, its status point placing the
//! stream (rule R6 of [`crate::sequence`]), the key list applied under the live stream, and
//! doubted lines confirmed with `/batch_query_keys` (its state: `parts/resync.rs` and
//! `parts/resync_state.rs`).
//!
//! A live batch applied over the list may be older than it: the master's queue and the network
//! delay what it published before the list was read (its status counts published batches, not
//! queued events). So a key a live batch stores that the list lacks is asked of the master with
//! the doubted lines, and removed if the master no longer holds it; such stores that come while
//! it is asked, or that its answer left out, are asked about next, up to
//! [`MAX_QUESTIONS`](super::parts::resync_state::MAX_QUESTIONS) questions of at most
//! [`MAX_ASKED`](super::parts::resync_state::MAX_ASKED) stores each (the questions and their
//! answers: `session/questions.rs`; a reconcile asks the same about its stores after its status
//! point, once it has applied its list: `session/reconcile.rs`). Doubted lines an answer left
//! out are asked again in the same questions, and fail the fetch if none answers them. Live
//! batches that reach the fetch's buffer bound while only stores are asked about stop the
//! recording of stores (the question out is still awaited) instead of failing the fetch. What
//! no answer covered is claimed unasked, and, when a status point placed the stream, that key
//! list holds back once a change of the master's signals waiting for one it could answer (the
//! watch then reconciles with another list).

use alloc::collections::BTreeSet;

use super::parts::checksum::key_checksum;
use super::*;

/// How many times the retry delay (or the verification interval) the backoff of the master's
/// HTTP side failing grows to at most.
pub(super) const RETRY_BACKOFF_CAP: u32 = 8;

/// Where the keys of a placed fetch's key list go: a reconcile lists them (see
/// `session/reconcile.rs`), a resync stores them ([`store_snapshot_key`]); `applied` counts them.
pub(super) struct KeySink<'a> {
    pub(super) index: &'a mut Index,
    seen: &'a BTreeMap<u64, bool>,
    /// The keys live batches stored that the list has not shown, not asked yet.
    pub(super) unlisted: &'a mut BTreeSet<String>,
    /// The keys asked of the master in the question under way.
    pub(super) asked: &'a mut BTreeSet<String>,
    /// The list's doubted lines no answer covered yet.
    pub(super) doubted: &'a mut BTreeSet<String>,
    cleared: bool,
    pub(super) applied: &'a mut usize,
    reconcile: Option<&'a mut Reconcile>,
}

impl<'a> KeySink<'a> {
    /// Borrows the fetch under way apart once its status point placed it: the filter its lines
    /// go through, and where their keys go (`None`: no fetch is placed).
    pub(super) fn of(
        state: &'a mut ResyncState,
        index: &'a mut Index,
    ) -> Option<(&'a mut LineFilter, KeySink<'a>)> {
        let ResyncState::Fetching {
            applied: Some(applied),
            seen,
            unlisted,
            asked,
            doubted,
            cleared,
            lines,
            reconcile,
            ..
        } = state
        else {
            return None;
        };
        let sink = KeySink {
            index,
            seen,
            unlisted,
            asked,
            doubted,
            cleared: *cleared,
            applied,
            reconcile: reconcile.as_deref_mut(),
        };
        Some((lines, sink))
    }

    /// Takes one key of the key list.
    pub(super) fn take(&mut self, key: &str) {
        match &mut self.reconcile {
            Some(r) => {
                *self.applied +=
                    usize::from(self.index.list_key(DEFAULT_TENANT, key, &mut r.listed));
            }
            None => {
                self.unlisted.remove(key);
                store_snapshot_key(self.index, self.seen, self.cleared, self.applied, key);
            }
        }
    }
}

/// Applies one key of a snapshot unless a live batch since the stream was placed decided its
/// state: removed (or cleared) keys stay out, stored ones are in already.
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

impl Session {
    /// Takes the master's key list for the fetch `request` in one piece, from any iterator of
    /// lines (the contract is [`Input::Snapshot`]'s).
    pub(super) fn on_snapshot<I>(
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

    /// Returns the key list handed over in chunks ([`Input::SnapshotLines`]) whose lines the
    /// session takes, and how many of its keys were applied so far ([`SessionStatus::snapshot`]).
    pub(super) fn snapshot_progress(&self) -> Option<SnapshotProgress> {
        match &self.resync.state {
            ResyncState::Fetching {
                request,
                applied: Some(applied),
                confirming: None,
                ..
            } => Some(SnapshotProgress {
                request: *request,
                applied: *applied,
            }),
            _ => None,
        }
    }

    /// Begins handing over the snapshot of `request` in chunks ([`Input::SnapshotBegin`]): its
    /// status point places the stream (R6).
    pub(super) fn begin_snapshot(
        &mut self,
        now: Instant,
        request: SnapshotRequest,
        watermark: Option<Watermark>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let superseded = match &self.resync.state {
            ResyncState::Fetching {
                request: current,
                applied: None,
                superseded,
                ..
            } if *current == request => *superseded,
            _ => {
                self.counters.unawaited_answers += 1;
                return fx;
            }
        };
        if superseded {
            // The index forgot while this key list was read: fetch it again now.
            self.counters.unawaited_answers += 1;
            self.resync.state = ResyncState::Idle;
            self.start_resync(now, &mut fx);
            self.update_health(&mut fx);
            return fx;
        }
        // The master's status answered and did not say its publisher is off.
        self.health.events_disabled = false;
        self.resync.failures.attempts = 0;
        if self.reconciling() {
            return self.begin_reconcile(now, watermark);
        }
        debug_assert!(
            self.stream.is_unplaced(),
            "a fetch answers an unplaced stream: {:?} {:?}",
            self.stream.position(),
            self.link.state
        );
        match self.stream.place(now, watermark.map(Watermark::point)) {
            Placed::Unanchored => {
                self.counters.unanchored_snapshots += 1;
                // Each unanchored fetch in a row waits about twice as long for the next (a
                // master that never tells its status costs a key list per 64 retry periods at
                // most), with the reconnects' backoff.
                let first = self
                    .config
                    .resync
                    .map_or(Duration::from_secs(1), |r| r.retry_after);
                let delay = self.resync.unanchored.delay(&BackoffConfig {
                    initial: first,
                    max: first.saturating_mul(64),
                    ..BackoffConfig::default()
                });
                self.resync.unanchored.attempts = self.resync.unanchored.attempts.saturating_add(1);
                self.resync.state = ResyncState::AwaitingStream {
                    retry_at: now + delay,
                };
                if self.stream.can_anchor() {
                    // A batch arrived while this fetch was under way: the subscription took
                    // effect, so a fetch asked now is anchored by the last batch heard (R6).
                    self.start_resync(now, &mut fx);
                }
            }
            Placed::OtherRun { heard } => {
                // The key list may be of either run, and the held batches that would correct
                // it were dropped: this fetch ends, the index forgets and the fetch is asked
                // again (R6).
                self.counters.status_disagreed += 1;
                self.counters.restarts += 1;
                fx.push(Report::StatusDisagreed {
                    position: Some(heard),
                    status: watermark.map_or(Seq(0), |w| w.seq),
                    ahead: false,
                });
                self.resync.state = ResyncState::Idle;
                self.forget(now, ClearReason::Restart, &mut fx);
            }
            Placed::AtPoint | Placed::LastHeard => {
                self.resync.unanchored.attempts = 0;
                self.counters.placements += 1;
                self.note_placed();
                fx.push(Report::Placed {
                    at: watermark.map(|w| w.seq),
                });
                if let ResyncState::Fetching {
                    applied, at_point, ..
                } = &mut self.resync.state
                {
                    *applied = Some(0);
                    *at_point = watermark.is_some();
                }
                self.release_held(now, &mut fx);
                // A held batch waits for its hole from its arrival: a wait that ran out while
                // the stream was unplaced gives up now (R7).
                if let Some(ruling) = self.stream.handle_timeout(now) {
                    self.act(now, None, None, ruling, &mut fx);
                    self.release_held(now, &mut fx);
                }
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Applies a chunk of the snapshot of `request` ([`Input::SnapshotLines`]). Only lines that
    /// are exactly keys become keys (see [`crate::snapshot`]). Returns how many keys it applied
    /// in all so far, or `None` when `request` is not being handed over (stale, refused by
    /// [`Session::begin_snapshot`], or a reconcile's list already ended: its lines are being
    /// applied, so a line handed after its end is not taken).
    pub(super) fn snapshot_keys<I>(&mut self, request: SnapshotRequest, lines: I) -> Option<usize>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let asked_at = match &self.resync.state {
            ResyncState::Fetching {
                request: current,
                applied: Some(_),
                confirming: None,
                asked_at,
                reconcile,
                ..
            } if *current == request && reconcile.as_ref().is_none_or(|r| r.takes_lines()) => {
                *asked_at
            }
            _ => return None,
        };
        // The master's key list was read after the fetch was asked for.
        self.note_evidence(asked_at);
        let (filter, mut keys) = KeySink::of(&mut self.resync.state, &mut self.index)?;
        for line in lines {
            filter.push(line.as_ref(), |key| keys.take(key));
        }
        Some(*keys.applied)
    }

    /// Ends the key list of `request` ([`Input::SnapshotEnd`]): the doubted lines, and the keys
    /// live batches stored that the list lacks, go to the master, or, with none, the resync
    /// completes. The live batches since the stream was placed were applied as they came, and
    /// the snapshot's keys they touched were left to them: nothing is replayed, so the call is
    /// short (a driver holds its lock for it).
    pub(super) fn finish_snapshot(&mut self, now: Instant, request: SnapshotRequest) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let all_kept = match &mut self.resync.state {
            ResyncState::Fetching {
                request: current,
                applied: Some(applied),
                confirming: None,
                seen,
                unlisted,
                asked,
                doubted,
                cleared,
                lines,
                reconcile,
                ..
            } if *current == request && reconcile.as_ref().is_none_or(|r| r.takes_lines()) => {
                let mut keys = KeySink {
                    index: &mut self.index,
                    seen,
                    unlisted,
                    asked,
                    doubted,
                    cleared: *cleared,
                    applied,
                    reconcile: reconcile.as_deref_mut(),
                };
                lines.finish(|key| keys.take(key));
                let kept = core::mem::take(&mut lines.doubted_keys);
                // Lines past the most kept cannot be confirmed: the fetch fails.
                let all_kept = lines.doubted <= kept.len() as u64;
                // After a live clear no line of the list is taken: its doubted lines need no
                // answer (a reconcile falls back below).
                if !*cleared {
                    keys.doubted.extend(kept);
                }
                all_kept
            }
            _ => {
                self.counters.unawaited_answers += 1;
                return fx;
            }
        };
        if !all_kept {
            self.resync_failed(now, ResyncFailure::Confirm, &mut fx);
            self.update_health(&mut fx);
            return fx;
        }
        if let ResyncState::Fetching {
            reconcile: Some(r), ..
        } = &self.resync.state
        {
            if r.overflowed || r.cleared {
                // It cannot be placed: asking about its doubted lines would only delay that.
                self.reconcile_fell_back(now, &mut fx);
                self.update_health(&mut fx);
                return fx;
            }
        }
        // The doubted lines, and what live batches stored that the list lacks, are asked of
        // the master; a doubted line also stored live is asked once, and its answer counts for
        // both.
        if !self.ask_again(now, &mut fx) {
            self.complete_resync(now, &mut fx);
        }
        fx
    }

    /// Ends the resync under way: the index is live again (once the stream has continued the
    /// status point).
    pub(super) fn complete_resync(&mut self, now: Instant, fx: &mut Effects) {
        let ResyncState::Fetching {
            unlisted,
            doubted,
            beyond,
            at_point,
            asked_at,
            reconcile,
            ..
        } = &mut self.resync.state
        else {
            return;
        };
        if !doubted.is_empty() {
            // Doubted lines no answer covered: see `confirmation_failed`.
            return self.resync_failed(now, ResyncFailure::Confirm, fx);
        }
        if reconcile.as_ref().is_some_and(|r| !r.listed_all) {
            // A reconcile's list ended (its doubted lines confirmed): the stores after its
            // point are asked about once the list is applied.
            return self.reconcile_listed(now, fx);
        }
        // Stores the list lacks that no answer covered (they came while the last question was
        // out, past the most one question asks, once the fetch was full, or its answer left
        // them out) are claimed unasked: the key list may not answer a change of the master's
        // signals then, and holds it back, once, so that the watch reconciles with another
        // list. Not without a status point: a reconcile cannot be placed either, and would
        // forget and resync into the same.
        let unasked = unlisted.len() as u64 + *beyond;
        self.counters.unlisted_unasked += unasked;
        let hold = unasked > 0 && *at_point && self.resync.watch.hold_once(*asked_at);
        if reconcile.is_some() {
            return self.reconcile_finish(hold, fx);
        }
        let ResyncState::Fetching {
            batches,
            applied: Some(applied),
            confirms,
            lines,
            asked_at,
            confirmed,
            ..
        } = &self.resync.state
        else {
            return;
        };
        let (batches, applied, confirms, confirmed) = (*batches, *applied, *confirms, *confirmed);
        if !hold {
            self.resync.watch.satisfied_by(*asked_at);
        }
        self.counters.snapshot_odd_lines += lines.odd;
        self.counters.snapshot_doubted_lines += lines.doubted;
        self.resync.state = ResyncState::Idle;
        // Every object is from the snapshot (read after the fetch was asked for) or from a batch
        // since, unless the index held objects before: then `confirms` is their confirmation.
        self.confirm(confirms);
        self.counters.snapshot_keys += applied as u64;
        self.counters.resyncs_completed += 1;
        fx.push(Report::Resynced {
            keys: applied,
            replayed: batches,
            confirmed,
        });
        self.emit_deltas(fx);
        self.schedule_verify(now);
        // A point proven by numbers while the key list was handed over is checked now, against
        // the whole list (R3).
        if self.stream.take_proved_after_doubt() {
            self.check_point(now, fx);
        }
        self.check_reordered(now, fx);
        self.update_health(fx);
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
        match &self.resync.state {
            ResyncState::Fetching {
                request: current, ..
            } if *current == request => {
                if failure == ResyncFailure::EventsDisabled {
                    self.counters.events_disabled += 1;
                    self.health.events_disabled = true;
                }
                self.resync_failed(now, failure, &mut fx);
            }
            _ => self.counters.unawaited_answers += 1,
        }
        self.update_health(&mut fx);
        fx
    }

    /// Counts a live batch applied while a snapshot is handed over; too many fail the resync.
    pub(super) fn count_for_resync(&mut self, now: Instant, payload_len: usize, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        let ResyncState::Fetching {
            batches,
            bytes,
            applied: Some(_),
            full: false,
            ..
        } = &mut self.resync.state
        else {
            return;
        };
        if *batches >= limits.max_buffered_batches
            || *bytes + payload_len > limits.max_buffered_bytes
        {
            // Only stores the list lacks being asked about: the question out is still awaited,
            // but no store is recorded or asked about any more (they are claimed unasked).
            // Failing would forget and fetch again into the same, for as long as the master is
            // busy.
            if !self.resync.state.fill() {
                self.resync_failed(now, ResyncFailure::BufferFull, fx);
            }
            return;
        }
        *bytes += payload_len;
        *batches += 1;
    }

    /// Asks for a key list (one fetch under way at a time: a fetch still being read is marked
    /// superseded instead, and asked for again when it comes back).
    pub(super) fn start_resync(&mut self, now: Instant, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        if let ResyncState::Fetching {
            applied: None,
            superseded,
            ..
        } = &mut self.resync.state
        {
            // The key list is still being read: asking for another now would read the master's
            // whole key list once more per loss (a storm of them while the stream cannot be
            // placed). This one's answer is discarded and asked for again when it comes.
            if !*superseded {
                *superseded = true;
                self.counters.superseded_fetches += 1;
            }
            self.stream.fetch_dropped();
            return;
        }
        debug_assert!(
            self.stream.is_unplaced(),
            "a fetch is asked for a placed stream: {:?}",
            self.stream.position()
        );
        let request = SnapshotRequest(self.resync.next_request);
        self.resync.next_request += 1;
        self.counters.resyncs_started += 1;
        // A snapshot only adds: objects held already stay as confirmed as they were.
        let confirms = self.confirmed_at().map_or(now, |at| at.min(now));
        self.resync.state =
            ResyncState::fetching(request, now, limits.fetch_timeout, confirms, None);
        self.stream.fetch_asked();
        fx.push(Command::FetchSnapshot { request });
    }

    /// Ends the fetch under way as failed; the next is asked for after the retry delay, twice
    /// as long (jittered, in the upper half) for each failure in a row, up to
    /// [`RETRY_BACKOFF_CAP`] times it: an unreachable master costs a request every 4-8 s, not
    /// every second, and one that comes back is fetched from within 8 retry delays.
    pub(super) fn resync_failed(&mut self, now: Instant, reason: ResyncFailure, fx: &mut Effects) {
        if self.reconciling() {
            // The index was not forgotten for it: it is now.
            fx.push(Report::ResyncFailed { reason });
            return self.reconcile_fell_back(now, fx);
        }
        let retry = self
            .config
            .resync
            .map_or(Duration::from_secs(1), |r| r.retry_after);
        let delay = self.resync.failures.delay(&BackoffConfig {
            initial: retry,
            max: retry.saturating_mul(RETRY_BACKOFF_CAP),
            ..BackoffConfig::default()
        });
        self.resync.failures.attempts = self.resync.failures.attempts.saturating_add(1);
        self.counters.resyncs_failed += 1;
        self.resync.state = ResyncState::Waiting {
            retry_at: now + delay,
            failure: reason,
        };
        // What the stream held for this fetch's status point, and what it applied under it, is
        // reflected in the next key list (R6): the stream is placed again by that one.
        if !self.stream.is_unplaced() {
            self.stream.forget();
            self.verify.drop_point_checks();
            let (pages, objects) = self.index.clear();
            if pages > 0 {
                fx.push(Report::Cleared {
                    reason: ClearReason::Gap,
                    pages,
                    objects,
                });
            }
        }
        self.stream.fetch_dropped();
        fx.push(Report::ResyncFailed { reason });
    }
}
