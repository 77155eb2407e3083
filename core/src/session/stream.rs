//! The stream: batches in order, held, late or stale, applied to the index; gaps and restarts.

use super::*;

/// A batch kept for later: its sequence frame and payload, and when it arrived.
#[derive(Clone, Debug)]
pub(super) struct HeldBatch {
    pub(super) seq: [u8; 8],
    pub(super) payload: Vec<u8>,
    /// When the session received it: what it stores was present at the master then.
    pub(super) arrived: Instant,
}

impl HeldBatch {
    pub(super) fn copy(arrived: Instant, frames: &[&[u8]]) -> HeldBatch {
        let mut seq = [0u8; 8];
        seq.copy_from_slice(frames[1]);
        HeldBatch {
            seq,
            payload: frames[2].to_vec(),
            arrived,
        }
    }

    pub(super) fn decode(&self) -> Batch<'_> {
        decode(&[&[], &self.seq, &self.payload]).expect("a kept batch decoded when it arrived")
    }
}

impl Session {
    /// Feeds one multipart message (`[topic, seq, payload]`). Nothing of `frames` is kept
    /// borrowed (shortcut for [`Input::Message`]).
    pub fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        self.handle(now, Input::Message(frames))
    }

    pub(super) fn on_message(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        if frames.len() != 3 {
            self.counters.stray_frame_count += 1;
            fx.push(Report::Stray {
                reason: StrayReason::FrameCount(frames.len()),
            });
            return fx;
        }
        if frames[0] != self.config.topic.as_slice() {
            self.counters.stray_topic += 1;
            fx.push(Report::Stray {
                reason: StrayReason::Topic,
            });
            return fx;
        }
        if self.leader.as_ref().is_some_and(|l| !l.is_following()) {
            // Between a leader change and following the new leader, a batch can only be the old
            // leader's: its stream is not the one the index will follow.
            self.counters.fenced_batches += 1;
            return fx;
        }
        let batch = match decode(frames) {
            Ok(batch) => batch,
            Err(error @ FrameError::SeqLength { .. }) => {
                // No sequence to place it by: count it and drop it, as a stray.
                self.counters.malformed_seq += 1;
                fx.push(Report::Malformed { error });
                return fx;
            }
            Err(error) => {
                // A batch of this stream (right topic, readable sequence) whose events cannot
                // be read: its sequence was consumed and what it changed is unknown. That is
                // loss: forget, and start the stream over from the next batch.
                self.counters.malformed_payload += 1;
                fx.push(Report::Malformed { error });
                let mut raw = [0u8; 8];
                raw.copy_from_slice(frames[1]);
                let seq = Seq(u64::from_be_bytes(raw));
                match self.tracker.observe_unreadable(now, seq) {
                    Verdict::Hold => {
                        // Ahead of a hole: the batches before it apply first, then it forgets.
                        self.counters.held += 1;
                        let held = HeldBatch::copy(now, frames);
                        if let Some(loss) =
                            self.tracker.hold(now, seq, Fingerprint::unreadable(), held)
                        {
                            self.reorder_loss(now, loss, &mut fx);
                        }
                    }
                    Verdict::Stale => self.stale_batch(now, seq, &mut fx),
                    Verdict::Duplicate => {
                        self.counters.duplicates += 1;
                        fx.push(Report::Duplicate { seq });
                    }
                    _ => {
                        self.pass_unreadable(now, &mut fx);
                        // It may have filled the hole before batches held behind it.
                        self.drain_held(now, &mut fx);
                    }
                }
                self.update_health(&mut fx);
                return fx;
            }
        };
        if let Link::Connecting { .. } = self.link {
            self.link_up(now, &mut fx);
        }
        let seq = batch.seq;
        let fingerprint = Fingerprint::of(&batch);
        let continuing = self.tracker.last_applied().is_some();
        match self.tracker.observe(now, seq, fingerprint) {
            Verdict::Apply => {
                if !continuing {
                    self.begin_stream(now, seq, &mut fx);
                }
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
            Verdict::Duplicate => {
                self.counters.duplicates += 1;
                fx.push(Report::Duplicate { seq });
            }
            Verdict::Late => {
                self.counters.late += 1;
                fx.push(Report::Late { seq });
            }
            Verdict::Stale => self.stale_batch(now, seq, &mut fx),
            // Only unreadable batches are ruled so; were one, forgetting is the safe reading.
            Verdict::Unreadable => self.pass_unreadable(now, &mut fx),
            Verdict::Hold => {
                self.counters.held += 1;
                if let Some(loss) =
                    self.tracker
                        .hold(now, seq, fingerprint, HeldBatch::copy(now, frames))
                {
                    self.reorder_loss(now, loss, &mut fx);
                }
            }
            Verdict::Gap { expected, .. } => {
                self.note_gap(expected, seq, &mut fx);
                self.begin_stream(now, seq, &mut fx);
                self.forget(now, ClearReason::Gap, &mut fx);
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
            Verdict::Restart { last } => {
                self.counters.restarts += 1;
                fx.push(Report::Restart {
                    last,
                    received: seq,
                });
                // The old run's position means nothing to the new one (its resync must not be
                // checked against it); the tracker fenced what it applied against its late
                // batches, and kept the held batches that may be the new run's.
                self.forget_stream_position();
                self.begin_stream(now, seq, &mut fx);
                self.forget(now, ClearReason::Restart, &mut fx);
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn apply_in_order(
        &mut self,
        now: Instant,
        batch: &Batch<'_>,
        fp: Fingerprint,
        payload: &[u8],
        fx: &mut Effects,
    ) {
        self.check_proof(now, batch.seq, fp, fx);
        self.apply_batch(now, now, batch, fp, payload.len(), fx);
        self.tracker.applied(batch.seq, fp);
        self.drain_held(now, fx);
        if matches!(self.resync, Resync::AwaitingStream { .. }) {
            self.start_resync(now, fx);
        }
    }

    pub(super) fn drain_held(&mut self, now: Instant, fx: &mut Effects) {
        while let Some((seq, held, verdict)) = self.tracker.pop_ready() {
            if verdict == Verdict::Unreadable {
                self.pass_unreadable(now, fx);
                continue;
            }
            if verdict == Verdict::Stale {
                self.stale_batch(now, seq, fx);
                continue;
            }
            if let Verdict::Restart { last } = verdict {
                // Released from the window, yet its event ids do not run on from the batch
                // before it: another run of the publisher.
                self.counters.restarts += 1;
                fx.push(Report::Restart {
                    last,
                    received: seq,
                });
                self.begin_stream(now, seq, fx);
                self.forget(now, ClearReason::Restart, fx);
            } else if self.tracker.last_applied().is_none() {
                self.begin_stream(now, seq, fx);
            }
            let batch = held.decode();
            let fp = Fingerprint::of(&batch);
            self.check_proof(now, seq, fp, fx);
            self.apply_batch(now, held.arrived, &batch, fp, held.payload.len(), fx);
            self.tracker.applied(seq, fp);
        }
    }

    /// Moves past an unreadable batch ([`Verdict::Unreadable`]): it consumed its sequence and
    /// what it changed is unknown, which is loss. The stream begins again with the next
    /// readable batch after it (the tracker rules anything at or before it stale, since any of
    /// those may store what it removed).
    pub(super) fn pass_unreadable(&mut self, now: Instant, fx: &mut Effects) {
        self.stream_start = None;
        self.forget(now, ClearReason::Undecodable, fx);
    }

    /// Skips an old batch that is no copy of one applied ([`Verdict::Stale`]): late, or from a
    /// restarted publisher whose clock went back, or of the current run but fenced by an
    /// unreadable batch. Whatever the index holds (a snapshot, say) may be contradicted by it:
    /// forget, and fetch again (the keys live batches stored after a fetch's key list was read
    /// come back only so), and so is a fetch under way. With the index empty and nothing to
    /// contradict, it forgets too (what the batch stored is lost: that is reported, and a
    /// fetch brings it back), unless a resync is waiting for its retry (or for the stream):
    /// that fetch brings it back, and a restarted master whose clock is behind costs one
    /// fetch a retry period, not one a batch.
    pub(super) fn stale_batch(&mut self, now: Instant, seq: Seq, fx: &mut Effects) {
        self.counters.late += 1;
        fx.push(Report::Late { seq });
        // A fetch under way is contradicted too (the key list may be read before or after what
        // the skipped batch removed, and a batch skipped now is never applied again): only a
        // resync waiting for its retry, with nothing held, lets the skip pass unforgotten.
        let retrying = matches!(
            self.resync,
            Resync::Waiting { .. } | Resync::AwaitingStream { .. }
        );
        if !retrying
            || self.index.object_count() > 0
            || self.proof.is_some()
            || self.anchor.is_some()
        {
            self.forget(now, ClearReason::StaleBatch, fx);
        }
    }

    /// Applies a live batch's events; `arrived` is when the session received it. An event that
    /// may have removed objects it does not name forgets once the whole batch is applied, and
    /// the batch then counts as seen by the resync that starts (not as a live batch of it).
    pub(super) fn apply_batch(
        &mut self,
        now: Instant,
        arrived: Instant,
        batch: &Batch<'_>,
        fp: Fingerprint,
        payload_len: usize,
        fx: &mut Effects,
    ) {
        self.note_evidence(arrived);
        // A batch holding anything that may lead to a clear (an event that names no object: a
        // removal of unknown extent, a clear) is one change for lock-free readers from its
        // first event (the session settles it when the input ends): a query that overlaps it
        // reads again, so none claims a page the clear at its end takes. Keyed stores and
        // removals need none: each removal is written in its page's slot, and a query that
        // overlaps one checks the slots of the pages it claims again.
        if batch
            .events
            .iter()
            .any(|e| e.object_key.is_none() || e.kind == EventKind::Cleared)
        {
            self.index.begin_change();
        }
        let mut lossy = false;
        for event in &batch.events {
            let tenant = event.tenant_id.unwrap_or(DEFAULT_TENANT);
            match (event.kind, event.object_key) {
                (EventKind::Stored, Some(key)) => {
                    self.counters.stored += 1;
                    let _ = self.index.store(tenant, key, event.group_id, event.medium);
                }
                (EventKind::Stored, None) => self.counters.stored_without_key += 1,
                (EventKind::Removed, Some(key)) => {
                    // One medium only; the object misses until its other medium is proven.
                    self.counters.removed += 1;
                    let _ = self.index.remove_replica(tenant, key, event.medium);
                }
                (EventKind::Removed, None) => {
                    self.counters.unreadable_removals += 1;
                    lossy = true;
                }
                (EventKind::Cleared, _) => {
                    self.counters.publisher_clears += 1;
                    let (pages, objects) = match event.tenant_id {
                        Some(t) => self.index.clear_tenant(t),
                        None => self.index.clear(),
                    };
                    fx.push(Report::Cleared {
                        reason: ClearReason::PublisherCleared,
                        pages,
                        objects,
                    });
                }
                (EventKind::Unknown, Some(key)) => {
                    // An event this decoder does not know may mean the object went: doubt is a
                    // miss, so the object it names is taken as absent.
                    self.counters.unknown_events += 1;
                    let _ = self.index.remove(tenant, key);
                }
                (EventKind::Unknown, None) => {
                    // An unknown event that names no object may remove any number of them (a
                    // future tenant-wide removal, say): read it as the widest removal.
                    self.counters.unknown_events += 1;
                    self.counters.unreadable_removals += 1;
                    lossy = true;
                }
            }
            if tenant == DEFAULT_TENANT {
                if let Resync::Fetching { seen, cleared, .. } = &mut self.resync {
                    match (event.kind, event.object_key) {
                        (EventKind::Stored, Some(key)) => {
                            seen.entry(key_checksum(key)).or_insert(true);
                        }
                        (EventKind::Removed | EventKind::Unknown, Some(key)) => {
                            seen.insert(key_checksum(key), false);
                        }
                        (EventKind::Cleared, _) => *cleared = true,
                        _ => {}
                    }
                }
            }
        }
        self.counters.batches += 1;
        self.counters.events += batch.events.len() as u64;
        if lossy {
            self.forget(now, ClearReason::UnreadableRemoval, fx);
            // The resync this starts reads the key list after this batch: it is where the
            // stream stood then.
            if let Resync::Fetching { since, .. } = &mut self.resync {
                since.push((batch.seq, fp.first_event_id(), fp.last_event_id()));
            }
        } else {
            self.count_for_resync(now, payload_len, fx);
        }
        self.emit_deltas(fx);
    }

    pub(super) fn emit_deltas(&mut self, fx: &mut Effects) {
        if !self.config.page_deltas {
            return;
        }
        let deltas: Vec<_> = self.index.drain_deltas().collect();
        for d in deltas {
            let (tenant, prefix) = self
                .index
                .namespace(d.namespace)
                .expect("deltas name live namespaces");
            fx.push(Report::Page {
                tenant: tenant.into(),
                prefix: prefix.map(String::from),
                page: d.page,
                complete: d.complete,
            });
        }
    }

    pub(super) fn reorder_loss(&mut self, now: Instant, loss: Loss, fx: &mut Effects) {
        self.note_gap(loss.expected, loss.resumed, fx);
        self.forget(now, ClearReason::Gap, fx);
        self.drain_held(now, fx);
    }

    /// Counts and reports a gap from `expected` to `received`.
    pub(super) fn note_gap(&mut self, expected: Seq, received: Seq, fx: &mut Effects) {
        self.counters.gaps += 1;
        self.counters.missing_sequences += received.0.saturating_sub(expected.0);
        fx.push(Report::Gap { expected, received });
    }

    /// Records that a stream begins at `seq`: the batch about to apply is a baseline. A snapshot
    /// applied before the stream began holds only if the stream begins at or before its anchor.
    pub(super) fn begin_stream(&mut self, now: Instant, seq: Seq, fx: &mut Effects) {
        self.stream_start = Some(seq);
        if let Some(max_first) = self.anchor.take() {
            if seq > max_first {
                self.counters.unanchored_snapshots += 1;
                self.note_gap(max_first, seq, fx);
                self.forget(now, ClearReason::Gap, fx);
            }
        }
    }

    /// Forgets the stream's continuity: the next batch is a silent baseline.
    pub(super) fn reset_stream(&mut self) {
        self.tracker.reset();
        self.forget_stream_position();
    }

    /// Forgets where the stream began and what anchors or proves a snapshot against it.
    fn forget_stream_position(&mut self) {
        self.stream_start = None;
        self.anchor = None;
        self.proof = None;
    }
}
