//! The master's HTTP side as the driver sees it: snapshots and verification.

use std::time::Duration;

use hicache_index::{
    Effect, Input, Instant, Report as CoreReport, SignalsRequest, SnapshotRequest, StatusRequest,
    VerifyRequest,
};

use crate::flight::Point;
use crate::master::Served;
use crate::system::System;

use super::http_item::{Handed, HttpItem, KeyListAnswer};
use super::state::World;

impl<S: System> World<S> {
    // ---- HTTP ----

    pub(super) fn http_latency(&mut self) -> Duration {
        let (lo, hi) = self.http_opts.latency;
        self.http_rng.duration(lo, hi)
    }

    pub(super) fn http_at(&mut self, at: Instant, item: HttpItem) {
        self.http_counter += 1;
        self.http.insert((at, self.http_counter), item);
    }

    /// Decides a request's fate: `None` = never answers; `Some(false)` = fails; `Some(true)` =
    /// reaches the server, at the returned time.
    pub(super) fn http_fate(&mut self) -> (Option<bool>, Instant) {
        let lat = self.http_latency();
        let o = self.http_opts.clone();
        if self.http_rng.chance(o.hang) {
            return (None, self.now);
        }
        if self.http_rng.chance(o.fail) {
            return (Some(false), self.now + lat);
        }
        let slow = if self.http_rng.chance(o.slow) {
            Duration::from_millis(400)
        } else {
            Duration::ZERO
        };
        let lat = lat + self.http_rng.duration(o.load.0, o.load.1);
        (Some(true), self.now + lat + slow)
    }

    /// An answer of a lagging HTTP side is evidence as old as the run it serves: the
    /// confirmation check allows for it as for a late message.
    fn note_served_as_of(&mut self, served: Served) {
        let as_of = self.master.served_as_of(served, self.now);
        let lag = self.now.saturating_duration_since(as_of);
        self.evidence_lag = self.evidence_lag.max(lag);
    }

    /// Sends a request to the HTTP side: `served` reaches the master, `failed` is the answer of
    /// a failed request; a request the fate drops is never answered.
    fn ask_http(&mut self, served: HttpItem, failed: HttpItem) {
        match self.http_fate() {
            (None, _) => {}
            (Some(false), at) => self.http_at(at, failed),
            (Some(true), at) => self.http_at(at, served),
        }
    }

    pub(super) fn on_fetch(&mut self, request: SnapshotRequest) {
        self.ask_http(
            HttpItem::SnapshotServer { request },
            HttpItem::SnapshotFailed { request },
        );
    }

    pub(super) fn on_status_check(&mut self, request: StatusRequest) {
        let watermark = None;
        self.ask_http(
            HttpItem::StatusServer { request },
            HttpItem::StatusAnswer { request, watermark },
        );
    }

    pub(super) fn on_signals_read(&mut self, request: SignalsRequest) {
        let signals = None;
        self.ask_http(
            HttpItem::SignalsServer { request },
            HttpItem::SignalsAnswer { request, signals },
        );
    }

    pub(super) fn on_verify(&mut self, request: VerifyRequest, keys: Vec<String>) {
        if self.now < self.query_keys_down_until {
            let lat = self.http_latency();
            self.http_at(self.now + lat, HttpItem::VerifyFailed { request });
            return;
        }
        self.ask_http(
            HttpItem::VerifyServer { request, keys },
            HttpItem::VerifyFailed { request },
        );
    }

    pub(super) fn on_http(&mut self, item: HttpItem) {
        let now = self.now;
        match item {
            HttpItem::SnapshotServer { request } => {
                let Some(served) = self.master.serving_new(now) else {
                    let lat = self.http_latency();
                    self.http_at(now + lat, HttpItem::SnapshotFailed { request });
                    return;
                };
                let down = self.http_opts.query_keys_down;
                if down > 0.0 && self.http_rng.chance(down) {
                    let (lo, hi) = self.http_opts.query_keys_down_for;
                    self.query_keys_down_until = now + self.http_rng.duration(lo, hi);
                    self.stats.query_keys_outages += 1;
                }
                // `GET /kv_events/status` first, then `GET /get_all_keys`: under load, many
                // batches and removals happen in between.
                let status = self.http_opts.watermark.then(|| {
                    let epoch = self.master.served_epoch(served);
                    (epoch, self.master.status_as(served))
                });
                let (lo, hi) = self.http_opts.status_to_keys;
                let at = now + self.http_rng.duration(lo, hi);
                if self.http_rng.chance(self.http_opts.restart_after_status) {
                    // A failover between the status and the key list.
                    let after = self.http_rng.duration(Duration::ZERO, at - now);
                    self.restart_at = Some(now + after);
                }
                let batches = self.master.stats().batches;
                let item = HttpItem::SnapshotKeys {
                    request,
                    status,
                    batches,
                    status_pos: self.master.position(),
                    began: self.master.served_epoch(served),
                };
                self.http_at(at, item);
            }
            HttpItem::SnapshotKeys {
                request,
                status,
                batches,
                status_pos,
                began,
            } => {
                if self.master.stats().batches >= batches + 10 {
                    self.stats.resyncs_under_load += 1;
                }
                let lat = self.http_latency();
                // The key list of a fetch whose status the run before a restart answered is
                // that run's, as of its death, while it lags (its body was under way).
                let Some(served) = self.master.serving_begun(now, began) else {
                    self.http_at(now + lat, HttpItem::SnapshotFailed { request });
                    return;
                };
                if served == Served::Lagging {
                    self.stats.stale_key_lists += 1;
                }
                self.note_served_as_of(served);
                let mut body = Vec::new();
                self.master.all_keys_as(served, &mut body);
                let pos = self.master.served_position(served);
                let foreign = self.master.foreign_count_as(served);
                let odd = foreign > 0;
                let objects = self.master.default_objects().max(1);
                let per_object = (foreign / objects) as u64;
                self.stats.foreign_per_object = self.stats.foreign_per_object.max(per_object);
                // Drawn only where the world has them: every other seed's draws stay as they were.
                if self.http_opts.clear_after_keys > 0.0
                    && self.http_rng.chance(self.http_opts.clear_after_keys)
                {
                    let after = self
                        .http_rng
                        .duration(Duration::ZERO, Duration::from_millis(5));
                    self.clear_at = Some(now + after);
                }
                if self.http_rng.chance(self.http_opts.restart_after_keys) {
                    // A failover right after the key list was served.
                    let after = self
                        .http_rng
                        .duration(Duration::ZERO, Duration::from_millis(5));
                    self.restart_at = Some(now + after);
                }
                let (lo, hi) = self.http_opts.body_time;
                let at = now + lat + self.http_rng.duration(lo, hi);
                let answer = KeyListAnswer {
                    request,
                    status,
                    status_pos,
                    body,
                    pos,
                    odd,
                    stalled: false,
                };
                self.http_at(at, HttpItem::SnapshotAnswer(answer));
            }
            HttpItem::SnapshotAnswer(mut answer) => {
                let stall = if answer.stalled || !self.may_stall() {
                    None
                } else {
                    self.driver.draw_snapshot_stall()
                };
                if let Some(first) = stall {
                    // The answer arrived; the driver is starved before it applies it.
                    answer.stalled = true;
                    self.stall_for_snapshot(HttpItem::SnapshotAnswer(answer), first);
                    return;
                }
                let (status, pos) = (answer.status, answer.pos);
                self.stats.odd_snapshots += u64::from(answer.odd);
                let lines: Vec<&[u8]> = hicache_index::snapshot_lines(&answer.body).collect();
                let fx = self.sut.handle(
                    now,
                    Input::Snapshot {
                        request: answer.request,
                        watermark: status.map(|(_, s)| crate::system::watermark_of(s)),
                        lines: &lines,
                    },
                );
                // A status point that placed the stream skips the batches at or before it: their
                // stores of other tenants than the key list's are lost (misses), as at a loss.
                let placed = fx.iter().find_map(|e| match e {
                    Effect::Report(CoreReport::Placed { at }) => Some(at.is_some()),
                    _ => None,
                });
                match placed {
                    Some(true) => self.p_loss = self.p_loss.max(answer.status_pos),
                    Some(false) => self.baseline_pending = true,
                    None => {}
                }
                let point = status.map(|(epoch, s)| {
                    let point = Point {
                        seq: s.last_seq().0,
                        events: s.published_events,
                        at: pos,
                    };
                    (epoch, point)
                });
                self.absorb(fx, Some(Handed { pos, point }));
            }
            HttpItem::SnapshotFailed { request } => {
                let fx = self.sut.handle(now, Input::SnapshotFailed { request });
                self.absorb(fx, None);
            }
            HttpItem::StatusServer { request } => {
                let watermark = self.master.serving_new(now).and_then(|served| {
                    self.note_served_as_of(served);
                    let status = self.master.status_as(served);
                    self.http_opts
                        .watermark
                        .then(|| crate::system::watermark_of(status))
                });
                let lat = self.http_latency();
                self.http_at(now + lat, HttpItem::StatusAnswer { request, watermark });
            }
            HttpItem::SignalsServer { request } => {
                let signals = self.master.serving_new(now).map(|_| self.master_signals());
                let lat = self.http_latency();
                self.http_at(now + lat, HttpItem::SignalsAnswer { request, signals });
            }
            HttpItem::SignalsAnswer { request, signals } => {
                if signals.is_some() {
                    self.signals_answered = signals;
                }
                let fx = self.sut.handle(now, Input::Signals { request, signals });
                self.absorb(fx, None);
            }
            HttpItem::StatusAnswer { request, watermark } => {
                let fx = self.sut.handle(now, Input::Status { request, watermark });
                self.absorb(fx, None);
            }
            HttpItem::VerifyFailed { request } => {
                let fx = self.sut.handle(now, Input::VerifyFailed { request });
                self.absorb(fx, None);
            }
            HttpItem::VerifyServer { request, keys } => {
                let Some(served) = self.master.serving_new(now) else {
                    let lat = self.http_latency();
                    self.http_at(now + lat, HttpItem::VerifyFailed { request });
                    return;
                };
                self.note_served_as_of(served);
                let found = self.master.batch_query_as(served, &keys);
                let lat = self.http_latency();
                self.http_at(
                    now + lat,
                    HttpItem::VerifyAnswer {
                        request,
                        keys,
                        found,
                    },
                );
            }
            HttpItem::VerifyAnswer {
                request,
                keys,
                found,
            } => {
                let results: Vec<(&str, bool)> = keys
                    .iter()
                    .map(String::as_str)
                    .zip(found.iter().copied())
                    .collect();
                let fx = self.sut.handle(
                    now,
                    Input::VerifyResult {
                        request,
                        results: &results,
                    },
                );
                self.absorb(fx, None);
            }
        }
    }
}
