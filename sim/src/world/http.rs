//! The master's HTTP side as the driver sees it: snapshots and verification.

use super::*;
use crate::master::Status;
use hicache_index::{SnapshotRequest, VerifyRequest};

/// A request or an answer on its way. The `Snapshot*` and `Verify*` items named `Server`/`Keys`
/// happen at the master; the others are answers the driver hands to the session (and wait while
/// the driver is stalled).
#[derive(Clone, Debug)]
pub(super) enum HttpItem {
    /// The snapshot request reaches the master: `GET /kv_events/status` is read.
    SnapshotServer {
        request: SnapshotRequest,
    },
    /// `GET /get_all_keys` is read, some time after the status (heavy load).
    SnapshotKeys {
        request: SnapshotRequest,
        status: Option<Status>,
        /// Batches the master had sent when the status was read.
        batches: u64,
        /// The master's position when the status was read.
        status_pos: u64,
    },
    SnapshotAnswer {
        request: SnapshotRequest,
        status: Option<Status>,
        /// The master's position when the status was read.
        status_pos: u64,
        body: Vec<u8>,
        pos: u64,
        odd: bool,
        /// The answer already waited for a stall (it waits for one at most).
        stalled: bool,
    },
    SnapshotFailed {
        request: SnapshotRequest,
    },
    VerifyServer {
        request: VerifyRequest,
        keys: Vec<String>,
    },
    VerifyFailed {
        request: VerifyRequest,
    },
    VerifyAnswer {
        request: VerifyRequest,
        keys: Vec<String>,
        found: Vec<bool>,
    },
}

impl HttpItem {
    /// Reports whether the item is an answer for the driver (it waits while the driver stalls).
    pub(super) fn is_answer(&self) -> bool {
        !matches!(
            self,
            HttpItem::SnapshotServer { .. }
                | HttpItem::SnapshotKeys { .. }
                | HttpItem::VerifyServer { .. }
        )
    }
}

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

    pub(super) fn on_fetch(&mut self, request: SnapshotRequest) {
        match self.http_fate() {
            (None, _) => {}
            (Some(false), at) => self.http_at(at, HttpItem::SnapshotFailed { request }),
            (Some(true), at) => self.http_at(at, HttpItem::SnapshotServer { request }),
        }
    }

    pub(super) fn on_verify(&mut self, request: VerifyRequest, keys: Vec<String>) {
        match self.http_fate() {
            (None, _) => {}
            (Some(false), at) => self.http_at(at, HttpItem::VerifyFailed { request }),
            (Some(true), at) => self.http_at(at, HttpItem::VerifyServer { request, keys }),
        }
    }

    pub(super) fn on_http(&mut self, item: HttpItem) {
        let now = self.now;
        match item {
            HttpItem::SnapshotServer { request } => {
                if self.master.is_down(now) {
                    let lat = self.http_latency();
                    self.http_at(now + lat, HttpItem::SnapshotFailed { request });
                } else {
                    // `GET /kv_events/status` first, then `GET /get_all_keys`: under load, many
                    // batches and removals happen in between.
                    let status = self.http_opts.watermark.then(|| self.master.status());
                    let (lo, hi) = self.http_opts.status_to_keys;
                    let at = now + self.http_rng.duration(lo, hi);
                    let batches = self.master.stats().batches;
                    let item = HttpItem::SnapshotKeys {
                        request,
                        status,
                        batches,
                        status_pos: self.master.position(),
                    };
                    self.http_at(at, item);
                }
            }
            HttpItem::SnapshotKeys {
                request,
                status,
                batches,
                status_pos,
            } => {
                if self.master.stats().batches >= batches + 10 {
                    self.stats.resyncs_under_load += 1;
                }
                let lat = self.http_latency();
                if self.master.is_down(now) {
                    self.http_at(now + lat, HttpItem::SnapshotFailed { request });
                    return;
                }
                let mut body = Vec::new();
                if let Some(obj) = self.master.all_keys_body(&mut body) {
                    self.shadowed.insert(obj);
                }
                let pos = self.master.position();
                let odd = self.master.foreign_count() > 0;
                if self.http_rng.chance(self.http_opts.restart_after_keys) {
                    // A failover right after the key list was served.
                    let after = self
                        .http_rng
                        .duration(Duration::ZERO, Duration::from_millis(5));
                    self.restart_at = Some(now + after);
                }
                let (lo, hi) = self.http_opts.body_time;
                let at = now + lat + self.http_rng.duration(lo, hi);
                self.http_at(
                    at,
                    HttpItem::SnapshotAnswer {
                        request,
                        status,
                        status_pos,
                        body,
                        pos,
                        odd,
                        stalled: false,
                    },
                );
            }
            HttpItem::SnapshotAnswer {
                request,
                status,
                status_pos,
                body,
                pos,
                odd,
                stalled,
            } => {
                let stall = if stalled || !self.may_stall() {
                    None
                } else {
                    self.driver.draw_snapshot_stall()
                };
                if let Some(first) = stall {
                    // The answer arrived; the driver is starved before it applies it.
                    let item = HttpItem::SnapshotAnswer {
                        request,
                        status,
                        status_pos,
                        body,
                        pos,
                        odd,
                        stalled: true,
                    };
                    self.stall_for_snapshot(item, first);
                    return;
                }
                self.stats.odd_snapshots += u64::from(odd);
                let lines: Vec<&[u8]> = hicache_index::snapshot_lines(&body).collect();
                let fx = self.sut.handle(
                    now,
                    Input::Snapshot {
                        request,
                        watermark: status.map(crate::system::watermark_of),
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
                    Some(true) => self.p_loss = self.p_loss.max(status_pos),
                    Some(false) => self.baseline_pending = true,
                    None => {}
                }
                self.absorb(fx, Some(pos));
            }
            HttpItem::SnapshotFailed { request } => {
                let fx = self.sut.handle(now, Input::SnapshotFailed { request });
                self.absorb(fx, None);
            }
            HttpItem::VerifyFailed { request } => {
                let fx = self.sut.handle(now, Input::VerifyFailed { request });
                self.absorb(fx, None);
            }
            HttpItem::VerifyServer { request, keys } => {
                if self.master.is_down(now) {
                    let lat = self.http_latency();
                    self.http_at(now + lat, HttpItem::VerifyFailed { request });
                    return;
                }
                let found = self.master.batch_query(&keys);
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
