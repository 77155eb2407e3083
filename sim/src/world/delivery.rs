//! Handing the network's messages and the HTTP answers to the session: when the driver hands
//! what (a CPU-starved driver stalls while messages queue up), and what is still pending for the
//! session at the time of a query (the oracle's horizon, see [`crate::flight`]).

use hicache_index::sequence::Skip;
use hicache_index::{Effect, Input, Instant, Report as CoreReport};

use crate::models::TENANTS;
use crate::network::{Message, NetEvent, Origin};
use crate::system::System;

use super::http_item::HttpItem;
use super::report::FailureKind;
use super::state::World;

impl<S: System> World<S> {
    /// Reports whether the driver is stalled now.
    pub(super) fn stalled(&self) -> bool {
        self.driver.stall_until.is_some_and(|t| t > self.now)
    }

    /// Returns the HTTP item to handle next and its time (answers wait while stalled).
    pub(super) fn next_http(&self, stalled: bool) -> Option<(Instant, (Instant, u64))> {
        self.http
            .iter()
            .find(|(_, item)| !stalled || !item.is_answer())
            .map(|(&key, _)| (key.0, key))
    }

    /// Ends a stall that is over; returns the answer to hand first, if any.
    pub(super) fn end_stall(&mut self) -> Option<HttpItem> {
        let until = self.driver.stall_until.filter(|&t| t <= self.now)?;
        self.driver.stall_until = None;
        self.driver.woke_at = Some(self.now);
        let from = self.driver.stall_from;
        self.driver.flight.stalled(from, until);
        if self.trace {
            eprintln!("{:>14} driver stall ends", self.now.as_nanos());
        }
        self.driver.first_after_stall.take()
    }

    /// Reports whether a stall may begin now: not at the very instant the last one ended while
    /// the session still has a due timer, nor while a timer that fell due during it has not been
    /// handed since (a driver that wakes up runs its timers first: at once, or with its lag,
    /// [`crate::options::DriverOptions::timer_lag`]). [`crate::flight::Flight::stalled`] counts
    /// on it.
    pub(super) fn may_stall(&self) -> bool {
        let Some(woke) = self.driver.woke_at else {
            return true;
        };
        let due_by = |at: Instant| self.sut.poll_timeout().is_some_and(|t| t <= at);
        let waking = woke == self.now && due_by(self.now);
        let unhanded = due_by(woke) && self.last_timer < woke;
        !(waking || unhanded)
    }

    fn begin_stall(&mut self) -> Instant {
        let (lo, hi) = self.driver.opts.stall_len;
        let until = self.now + self.driver.rng.duration(lo, hi);
        if !self.stalled() {
            self.driver.stall_from = self.now;
        }
        let until = self.driver.stall_until.map_or(until, |t| t.max(until));
        self.driver.stall_until = Some(until);
        self.stats.stalls += 1;
        if self.trace {
            eprintln!(
                "{:>14} driver stalls until {}",
                self.now.as_nanos(),
                until.as_nanos()
            );
        }
        until
    }

    /// The snapshot answer arrived; the driver stalls before applying it, then applies it
    /// before (`first`) or after the messages queued meanwhile.
    pub(super) fn stall_for_snapshot(&mut self, item: HttpItem, first: bool) {
        let until = self.begin_stall();
        self.stats.snapshot_stalls += 1;
        if first {
            if let Some(old) = self.driver.first_after_stall.replace(item) {
                self.http_at(until, old);
            }
        } else {
            self.http_at(until, item);
        }
    }

    /// Does the driver's own due thing (begin a stall, ask a query); reports whether it did.
    pub(super) fn driver_step(&mut self) -> bool {
        let now = self.now;
        if self.driver.next_stall.is_some_and(|t| t <= now) {
            if !self.stalled() && self.may_stall() {
                self.begin_stall();
            }
            let rate = self.driver.opts.stalls_per_sec;
            self.driver.next_stall = self.driver.rng.exponential(rate).map(|d| now + d);
            return true;
        }
        if self.driver.next_query.is_some_and(|t| t <= now) {
            self.random_query();
            let rate = self.driver.opts.queries_per_sec;
            self.driver.next_query = self.driver.rng.exponential(rate).map(|d| now + d);
            return true;
        }
        false
    }

    /// Moves the network's losses into the tracker (before anything is handed or judged).
    pub(super) fn sync_losses(&mut self) {
        self.net.drain_lost(&mut self.driver.lost);
        for (pos, id) in self.driver.lost.drain(..) {
            self.driver.flight.lost_in_network(pos, id);
        }
    }

    /// Returns the history position of the oldest event pending for the session (see
    /// [`crate::flight`]), or `None` when nothing is.
    pub(super) fn horizon(&mut self) -> Option<u64> {
        self.sync_losses();
        let stalled = self.stalled().then_some(self.driver.stall_from);
        let flight = &mut self.driver.flight;
        let mut h = flight.horizon(self.now, stalled);
        let mut min = |p: u64| h = Some(h.map_or(p, |h: u64| h.min(p)));
        if let Some(p) = self.master.oldest_queued() {
            min(p);
        }
        let flight = &self.driver.flight;
        self.net.for_each_in_flight(|m| {
            if m.intact && !flight.is_handed(m.id) {
                min(m.first_pos);
            }
        });
        h
    }

    // ---- the network ----

    pub(super) fn on_net(&mut self, event: NetEvent) {
        let now = self.now;
        match event {
            NetEvent::Connected => {
                if self.trace {
                    eprintln!("{:>14} net connected", now.as_nanos());
                }
                self.last_forced_at = Some(now);
                let fx = self.sut.handle(now, Input::Connected);
                self.absorb(fx, None);
            }
            NetEvent::ConnectFailed | NetEvent::Disconnected => {
                let fx = self.sut.handle(now, Input::Disconnected);
                self.absorb(fx, None);
            }
            NetEvent::Deliver(msg) => self.deliver(msg),
        }
    }

    /// Returns when the history position `pos` was created.
    pub(super) fn time_of(&self, pos: u64) -> Instant {
        let i = self.record_times.partition_point(|&(p, _)| p < pos);
        self.record_times.get(i).map_or(self.now, |&(_, at)| at)
    }

    pub(super) fn deliver(&mut self, msg: Message) {
        if let Origin::Master(m) = &msg.origin {
            let lag = self.now - self.time_of(m.first_pos);
            self.evidence_lag = self.evidence_lag.max(lag);
            self.sync_losses();
            let f = &msg.frames;
            let valid_seq = f.len() == 3 && f[0].is_empty() && f[1] == m.seq.to_be_bytes();
            let hiding = self.driver.flight.handed(self.now, m, valid_seq);
            if let Some((after, before)) = hiding.hidden_span {
                self.oracle.mark_invisible(after, before);
            }
            if let Some((after, before)) = hiding.revealed_span {
                self.oracle.unmark_invisible(after, before);
            }
            self.stats.invisible_restarts += hiding.hidden.len() as u64;
            self.stats.invisible_restarts -= hiding.revealed.len() as u64;
            if m.intact {
                self.last_handed_at = Some(self.now);
            }
            self.handed_upto = self.handed_upto.max(m.last_pos);
            if hiding.loss {
                self.last_forced_at = Some(self.now);
            }
            if !m.intact && valid_seq {
                self.stats.undecodable_with_seq += 1;
            }
            if m.intact {
                if m.epoch < self.driver.newest_epoch {
                    self.stats.cross_restart_reorders += 1;
                }
                self.driver.newest_epoch = self.driver.newest_epoch.max(m.epoch);
                if m.late && self.time_of(m.last_pos) < self.driver.last_clear_at {
                    self.stats.late_after_clear += 1;
                }
            }
        }
        if let Origin::Master(m) = msg.origin {
            if m.intact {
                let i = m.seq as usize;
                if self.fed.len() <= i {
                    self.fed.resize(i + 1, (0, 0, 0));
                }
                self.fed[i] = (m.epoch, m.first_pos, m.last_pos);
            }
        }
        if self.trace {
            eprintln!("{:>14} deliver {:?}", self.now.as_nanos(), msg.origin);
        }
        let mut refs: [&[u8]; 4] = [&[]; 4];
        let n = msg.frames.len().min(4);
        for (r, f) in refs.iter_mut().zip(&msg.frames) {
            *r = f;
        }
        let fx = self.sut.handle(self.now, Input::Message(&refs[..n]));
        if let Origin::Master(m) = msg.origin {
            // A batch the session skipped for a key list (waiting for a status point, or at or
            // before one) reaches the index through that list, which holds the default tenant
            // only: what it stored for the other tenants is lost, as at a loss.
            let skipped = fx.iter().any(|e| {
                matches!(
                    e,
                    Effect::Report(CoreReport::Skipped {
                        why: Skip::Unplaced | Skip::BeforePoint,
                        ..
                    })
                )
            });
            if skipped {
                self.p_loss = self.p_loss.max(m.last_pos);
            }
        }
        self.absorb(fx, None);
        if self.opts.exact {
            if let Origin::Master(m) = msg.origin {
                if m.intact {
                    self.check_batch_objects(&msg.frames);
                }
            }
        }
    }

    /// Exact mode: after a batch, the index holds each of its objects exactly when the oracle
    /// says so.
    pub(super) fn check_batch_objects(&mut self, frames: &[Vec<u8>]) {
        let Ok(batch) = hicache_index::decode(&[&frames[0], &frames[1], &frames[2]]) else {
            return;
        };
        let since = self.p_loss.max(self.net.lost_upto());
        for event in &batch.events {
            let (Some(key), Some(tenant)) = (event.object_key, event.tenant_id) else {
                continue;
            };
            let Some(t) = TENANTS.iter().position(|&n| n == tenant) else {
                continue;
            };
            let Some(obj) = self.master.find_object(t as u8, key) else {
                continue;
            };
            let want = self.oracle.e_stored_between(obj, since, self.applied_pos);
            if let Some(got) = self.sut.holds_object(tenant, key) {
                if got != want {
                    let detail = format!(
                        "after batch {:?}, the index holds {key} of {tenant}: {got}, the oracle \
                         says {want} (applied position {}, since {since}); {}",
                        batch.seq,
                        self.applied_pos,
                        self.oracle.describe(obj)
                    );
                    self.fail(FailureKind::Mismatch, detail);
                    return;
                }
            }
        }
    }
}
