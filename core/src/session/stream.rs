//! The stream: every ruling of [`crate::sequence`] turned into what the session does, in one
//! place ([`Session::act`]), and a batch's events applied to the index (a batch kept for later:
//! `parts/stream.rs`).

use super::*;

/// A batch the session acts on: decoded, its payload's size, and when it arrived.
type Decoded<'b, 'a> = Option<(&'b Batch<'a>, usize, Instant)>;

impl Session {
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
        let decoded = decode(frames);
        let mark = match &decoded {
            Ok(batch) => Mark::of(batch, frames[2]),
            Err(error @ FrameError::SeqLength { .. }) => {
                // No sequence to place it by: count it and drop it, as a stray.
                self.counters.malformed_seq += 1;
                fx.push(Report::Malformed {
                    error: error.clone(),
                });
                return fx;
            }
            Err(error) => {
                // A batch of this stream whose events cannot be read (R8).
                self.counters.malformed_payload += 1;
                fx.push(Report::Malformed {
                    error: error.clone(),
                });
                let seq = u64::from_be_bytes(frames[1].try_into().expect("an 8-byte sequence"));
                Mark::undecodable(Seq(seq), frames[2])
            }
        };
        if let Link::Connecting { .. } = self.link.state {
            self.link_up(now, &mut fx);
        }
        let ruling = self
            .stream
            .offer(now, mark, frames[2].len(), || HeldBatch::copy(now, frames));
        let batch = decoded.as_ref().ok().map(|b| (b, frames[2].len(), now));
        self.act(now, Some(&mark), batch, ruling, &mut fx);
        self.release_held(now, &mut fx);
        // While the key list is handed over the index is not yet what the point check asks
        // about: the check waits for the resync to complete (R3).
        if !self.resync.state.is_fetching() && self.stream.take_proved_after_doubt() {
            self.check_point(now, &mut fx);
        }
        self.check_reordered(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Does what a ruling asks (module [`crate::sequence`]), for the batch marked `mark`
    /// (`None`: a ruling of the stream's timers), decoded as `batch` unless undecodable.
    pub(super) fn act(
        &mut self,
        now: Instant,
        mark: Option<&Mark>,
        batch: Decoded<'_, '_>,
        ruling: Ruling,
        fx: &mut Effects,
    ) {
        let seq = mark.map(|m| m.seq);
        match ruling {
            Ruling::Apply => {
                let (batch, len, arrived) = batch.expect("only a decoded batch applies");
                self.apply_batch(now, arrived, batch, len, fx);
            }
            Ruling::Skip(why) => {
                *match why {
                    Skip::Copy => &mut self.counters.duplicates,
                    Skip::BeforePoint => &mut self.counters.before_point,
                    Skip::Unplaced => &mut self.counters.unplaced_dropped,
                } += 1;
                if let (Skip::BeforePoint, Some((batch, _, _))) = (why, batch) {
                    self.note_skipped(batch);
                }
                if let Some(seq) = seq {
                    fx.push(Report::Skipped { seq, why });
                }
                if why == Skip::Unplaced
                    && matches!(self.resync.state, ResyncState::AwaitingStream { .. })
                    && !self.config.reorder.is_on()
                {
                    // A batch arrived: the subscription took effect, so a fetch asked now is
                    // anchored by the last batch heard before it (R6). (A reordering stream
                    // cannot be anchored without a status: it retries on its timer only.)
                    self.start_resync(now, fx);
                }
            }
            Ruling::Hold => self.counters.held += 1,
            Ruling::Forget(forgot) => {
                let reason = match forgot.why {
                    Why::Loss { expected, received } => {
                        self.note_gap(expected, received, fx);
                        ClearReason::Gap
                    }
                    Why::OtherRun => {
                        self.counters.restarts += 1;
                        fx.push(Report::OtherRun {
                            position: forgot.position,
                            received: seq.unwrap_or(Seq(0)),
                        });
                        ClearReason::Restart
                    }
                    Why::Undecodable => ClearReason::Undecodable,
                    Why::Unproven => ClearReason::Unproven,
                    Why::TailLost { expected, status } => {
                        self.counters.status_disagreed += 1;
                        fx.push(Report::StatusDisagreed {
                            position: forgot.position,
                            status,
                            ahead: true,
                        });
                        self.note_gap(expected, Seq(status.0.saturating_add(1)), fx);
                        ClearReason::Gap
                    }
                    Why::StatusOfOtherRun { status } => {
                        self.counters.status_disagreed += 1;
                        self.counters.restarts += 1;
                        fx.push(Report::StatusDisagreed {
                            position: forgot.position,
                            status,
                            ahead: false,
                        });
                        ClearReason::Restart
                    }
                    Why::HoldFull => {
                        self.counters.resyncs_failed += 1;
                        fx.push(Report::ResyncFailed {
                            reason: ResyncFailure::BufferFull,
                        });
                        ClearReason::Gap
                    }
                };
                self.drop_index(now, reason, fx);
                if forgot.apply {
                    let (batch, len, arrived) = batch.expect("only a decoded batch begins");
                    self.apply_batch(now, arrived, batch, len, fx);
                }
            }
        }
    }

    /// Asks for the master's status when the quiet stream's check is due (R11).
    pub(super) fn check_status(&mut self, now: Instant, fx: &mut Effects) {
        if !self.link.is_up() || self.stream.status_due().is_none_or(|due| due > now) {
            return;
        }
        let request = StatusRequest(self.resync.next_status);
        self.resync.next_status += 1;
        self.stream.status_asked(now, request.0);
        self.counters.status_checks += 1;
        fx.push(Command::ReadStatus { request });
    }

    /// The master's status answering a check (R11).
    pub(super) fn on_status(
        &mut self,
        now: Instant,
        request: StatusRequest,
        watermark: Option<Watermark>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let status = watermark.map(Watermark::point);
        if let Some(ruling) = self.stream.status_answered(now, request.0, status) {
            self.act(now, None, None, ruling, &mut fx);
        }
        self.update_health(&mut fx);
        fx
    }

    /// Acts on every held batch whose place has come.
    pub(super) fn release_held(&mut self, now: Instant, fx: &mut Effects) {
        while let Some((mark, held, ruling)) = self.stream.release(now) {
            let decoded = held.decode();
            let batch = decoded
                .as_ref()
                .ok()
                .map(|b| (b, held.payload.len(), held.arrived));
            if let (true, Ruling::Apply, Some((b, _, _))) =
                (self.stream.take_reordered(), ruling, batch)
            {
                // R7: what it stores misses from before it is applied until the master says.
                self.note_reordered(b);
                self.publish_query_state();
            }
            self.act(now, Some(&mark), batch, ruling, fx);
        }
    }

    /// Applies a live batch's events; `arrived` is when the session received it. An event that
    /// may have removed objects it does not name forgets once the whole batch is applied.
    fn apply_batch(
        &mut self,
        now: Instant,
        arrived: Instant,
        batch: &Batch<'_>,
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
                self.resync.state.saw(batch.seq, event);
            }
        }
        self.counters.batches += 1;
        self.counters.events += batch.events.len() as u64;
        if lossy {
            self.forget(now, ClearReason::UnreadableRemoval, fx);
        } else {
            self.count_for_resync(now, payload_len, fx);
            self.reconcile_if_reached(now, fx);
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

    /// Reports a gap from `expected` to `received` (the stream counts them: [`Stream::holes`]).
    pub(super) fn note_gap(&mut self, expected: Seq, received: Seq, fx: &mut Effects) {
        fx.push(Report::Gap { expected, received });
    }
}
