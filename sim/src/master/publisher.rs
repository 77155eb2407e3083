//! The publisher: the bounded event queue, sequences, event ids and the batches it sends (the
//! messages' types: `master/messages.rs`).

use hicache_index::{EventKind, Instant, Medium, Seq, Timestamp};
use hicache_index_wire::{encode_payload_into, MasterFlavor, OwnedEvent};

use crate::models::TENANTS;
use crate::options::TWIN_FLUSH;

use super::history::{Change, MasterOutput};
use super::messages::{MasterMeta, Published, QKind, Queued};
use super::state::Master;

/// The batch timestamp's base: a Unix time in milliseconds (above `u32::MAX`, as on the wire).
const EPOCH_MS: u64 = 1_764_000_000_000;

impl Master {
    /// The first publisher tick strictly after `now`, on the interval's grid.
    pub(super) fn tick_after(&self, now: Instant) -> Instant {
        let iv = (self.opts.publish_interval.as_nanos() as u64).max(1);
        Instant::from_nanos((now.as_nanos() / iv + 1) * iv)
    }

    /// Creates an event: records the change and queues the event (dropping the oldest when full).
    pub(super) fn emit(
        &mut self,
        kind: QKind,
        target: u32,
        medium: Option<Medium>,
        out: &mut MasterOutput,
    ) {
        let change = match kind {
            QKind::Stored => Some(Change::Stored {
                obj: target,
                tenant: self.tenant_of(target),
            }),
            QKind::Removed | QKind::RemovedWithoutKey => Some(Change::Removed { obj: target }),
            QKind::RemovedMedium => Some(Change::MediumRemoved { obj: target }),
            QKind::Cleared | QKind::UnknownKeyless => Some(Change::Cleared {
                tenant: target as u8,
            }),
            // Foreign keys are no page's objects: the oracle has nothing to learn.
            QKind::ForeignStored | QKind::ForeignRemoved => None,
        };
        let pos = match change {
            Some(change) => self.record(change, out),
            None => self.pos,
        };
        self.stats.events += 1;
        let capacity = if self.faults {
            self.opts.queue_capacity.max(1)
        } else {
            usize::MAX
        };
        if self.queue.len() >= capacity {
            let dropped = self.queue.pop_front().expect("a full queue has an oldest");
            self.stats.queue_drops += 1;
            self.run_dropped += 1;
            self.next_seq += 1;
            out.lost(dropped.pos);
            out.dropped.push(dropped.pos);
        }
        self.queue.push_back(Queued {
            kind,
            target,
            medium,
            pos,
            at: self.now,
        });
    }

    /// Runs the publisher: drains the queue into batches and sends them.
    pub(super) fn publish(&mut self, now: Instant, out: &mut MasterOutput) {
        let limit = match self.opts.batches_per_tick {
            0 => usize::MAX,
            n if self.faults => n,
            _ => usize::MAX,
        };
        for _ in 0..limit {
            if self.queue.is_empty() {
                return;
            }
            let n = match self.opts.twin_batch.min(64) {
                0 => {
                    let max = self.opts.batch_max.clamp(1, 64);
                    if self.rng.chance(0.5) {
                        max
                    } else {
                        self.rng.range(1, max as u64) as usize
                    }
                    .min(self.queue.len())
                }
                // Twin runs: full batches only while faults are on (a partial batch would put
                // this run out of step with the others); once they stop, a partial batch goes
                // out when its oldest event waited long enough.
                size if self.queue.len() >= size => size,
                _ => {
                    let oldest = self.queue.front().expect("the queue is not empty").at;
                    if self.faults || now.saturating_duration_since(oldest) < TWIN_FLUSH {
                        return;
                    }
                    self.queue.len()
                }
            };
            let seq = self.next_seq;
            self.next_seq += 1;
            let mut items = core::mem::take(&mut self.items);
            items.clear();
            items.extend(self.queue.drain(..n));
            let first_pos = items.first().expect("a batch has events").pos;
            let last_pos = items.last().expect("a batch has events").pos;
            // Event ids are given when a batch is made, to the events it publishes: the ones the
            // queue dropped never get one, so a batch that follows the previous one starts at
            // exactly its last id + 1.
            let first_event_id = self.next_event_id;
            self.next_event_id += n as u64;
            self.published_ids += 1;
            let id = self.published_ids;
            if self.faults && self.rng.chance(self.opts.send_fail) {
                // The sequence and the ids were consumed: loss after publishing.
                self.stats.failed_sends += 1;
                out.lost(last_pos);
                out.failed.push(first_pos);
                self.items = items;
                continue;
            }
            let ms = EPOCH_MS + now.as_nanos() / 1_000_000 + self.clock.offset_ms(now);
            self.fill_batch(seq, ms, first_event_id, &items);
            self.items = items;
            let mut payload = Vec::with_capacity(n * 420 + 16);
            encode_payload_into(&mut payload, &self.batch, self.opts.flavor);
            self.stats.batches += 1;
            let meta = MasterMeta {
                id,
                epoch: self.epoch,
                seq,
                first_pos,
                last_pos,
                first_event_id,
                events: n,
                intact: true,
                late: false,
            };
            out.published.push(Published {
                meta,
                frames: [Vec::new(), seq.to_be_bytes().to_vec(), payload],
            });
        }
    }

    /// Rewrites the reusable batch in place (no allocation once warm).
    pub(super) fn fill_batch(&mut self, seq: u64, ms: u64, first_event_id: u64, items: &[Queued]) {
        let batch = &mut self.batch;
        batch.seq = Seq(seq);
        batch.timestamp = Timestamp::Millis(ms);
        batch.dp_rank = Some(0);
        while batch.events.len() > items.len() {
            let e = batch.events.pop().expect("longer than wanted");
            self.spare_events.push(e);
        }
        while batch.events.len() < items.len() {
            let e = self.spare_events.pop().unwrap_or_else(|| OwnedEvent {
                backend_id: "mooncake-sim".into(),
                ..OwnedEvent::new(EventKind::Stored, "")
            });
            batch.events.push(e);
        }
        let flavor = self.opts.flavor;
        for ((ev, q), event_id) in batch.events.iter_mut().zip(items).zip(first_event_id..) {
            let (kind, obj) = match q.kind {
                QKind::Stored => (EventKind::Stored, Some(q.target)),
                QKind::Removed | QKind::RemovedMedium => (EventKind::Removed, Some(q.target)),
                QKind::RemovedWithoutKey => (EventKind::Removed, None),
                QKind::Cleared => (EventKind::Cleared, None),
                QKind::UnknownKeyless => (EventKind::Unknown, None),
                QKind::ForeignStored => (EventKind::Stored, None),
                QKind::ForeignRemoved => (EventKind::Removed, None),
            };
            let tenant = match q.kind {
                QKind::Cleared | QKind::UnknownKeyless => q.target as usize,
                QKind::ForeignStored | QKind::ForeignRemoved => 0,
                _ => {
                    let o = &self.objects[q.target as usize];
                    self.pages[o.page as usize].tenant as usize
                }
            };
            ev.kind = kind;
            ev.event_id = Some(event_id);
            ev.timestamp_ms = ms;
            ev.medium = q.medium;
            set_opt(&mut ev.tenant_id, Some(TENANTS[tenant]));
            let key = match q.kind {
                QKind::ForeignStored | QKind::ForeignRemoved => {
                    Some(&*self.foreign_keys[q.target as usize])
                }
                QKind::Stored | QKind::Removed | QKind::RemovedMedium => {
                    obj.map(|o| &*self.objects[o as usize].key)
                }
                _ => None,
            };
            set_opt(&mut ev.object_key, key);
            let group = match (self.opts.group_ids, obj) {
                (true, Some(o)) => {
                    let info = &self.objects[o as usize];
                    self.scratch.clear();
                    self.scratch.push_str("sglang-hicache:");
                    self.scratch
                        .push_str(&info.key[..info.logical_len as usize]);
                    Some(self.scratch.as_str())
                }
                _ => None,
            };
            set_opt(&mut ev.group_id, group.map(str::as_bytes));
            let stored = kind == EventKind::Stored;
            match flavor {
                MasterFlavor::Upstream => {
                    ev.dp_rank = None;
                    ev.base_block_idx = stored.then_some(0);
                    ev.session_id = None;
                }
                MasterFlavor::Release0314 => {
                    ev.dp_rank = Some(0);
                    ev.base_block_idx = None;
                    set_opt(&mut ev.session_id, stored.then_some("sim-session-1"));
                }
            }
        }
    }
}

/// Overwrites an optional string (or bytes) in place, reusing its allocation.
fn set_opt<T: ToOwned + ?Sized>(dst: &mut Option<T::Owned>, src: Option<&T>) {
    match (dst.as_mut(), src) {
        (Some(d), Some(s)) => s.clone_into(d),
        (None, Some(s)) => *dst = Some(s.to_owned()),
        (_, None) => *dst = None,
    }
}
