//! Restarts: the master loses every object and its queue, stays down for a while, and comes
//! back with sequence 1 and event id 1 (the transport never hears of it). With
//! [`HttpOptions::lag_after_restart`](crate::options::HttpOptions::lag_after_restart) the HTTP
//! side keeps serving the run that died ([`OldView`]) until a while after the new run is up.

use std::time::Duration;

use hicache_index::Instant;

use crate::models::TENANTS;

use super::history::{Change, MasterOutput};
use super::old_view::OldView;
use super::state::Master;

impl Master {
    pub(super) fn restart(&mut self, now: Instant, out: &mut MasterOutput) {
        self.stats.restarts += 1;
        let (lo, hi) = self.http_lag;
        if !hi.is_zero() {
            let lag = self.rng.duration(lo, hi);
            self.old_view = Some(OldView {
                epoch: self.epoch,
                status: self.status(),
                keys: self.present[0].clone(),
                foreign: self.foreign_present.clone(),
                died_at: now,
                died_after: self.position(),
                until: None,
                lag,
            });
        }
        let pos = self.record(Change::Restart, out);
        out.lost(pos);
        out.restarts.push(pos);
        if let Some(q) = self.queue.front() {
            // The queued events die with the master, unsent.
            out.dropped.push(q.pos);
        }
        for tenant in 0..TENANTS.len() {
            for &obj in self.present[tenant].as_slice() {
                self.flags[obj as usize] = 0;
            }
            self.present[tenant].clear();
        }
        self.clients_restart();
        self.queue.clear();
        let (lo, hi) = self.opts.restart_downtime;
        let up = now + self.rng.duration(lo, hi);
        self.down_until = Some(up);
        out.restarted_until = Some(up);
    }

    /// The new run begins: sequences and event ids from 1; a lagging HTTP side catches up
    /// with it only after its lag.
    pub(super) fn came_up(&mut self, now: Instant) {
        self.down_until = None;
        self.epoch += 1;
        self.next_seq = 1;
        self.next_event_id = 1;
        self.run_dropped = 0;
        self.next_action = now;
        self.next_tick = self.tick_after(now);
        if let Some(view) = &mut self.old_view {
            view.until.get_or_insert(now + view.lag);
        }
    }

    /// Makes the HTTP side lag behind each later restart by a time drawn from `lag` (see
    /// [`HttpOptions::lag_after_restart`](crate::options::HttpOptions::lag_after_restart)).
    pub fn set_http_lag(&mut self, lag: (Duration, Duration)) {
        self.http_lag = lag;
    }

    /// The HTTP side follows the current run from now on (the faults stop).
    pub fn end_http_lag(&mut self) {
        self.old_view = None;
        self.http_lag = (Duration::ZERO, Duration::ZERO);
    }
}
