//! Restarts: the master loses every object and its queue, stays down for a while, and comes
//! back with sequence 1 and event id 1 (the transport never hears of it).

use hicache_index::Instant;

use super::{Change, Master, MasterOutput};
use crate::models::TENANTS;

impl Master {
    pub(super) fn restart(&mut self, now: Instant, out: &mut MasterOutput) {
        self.stats.restarts += 1;
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
        self.queue.clear();
        let (lo, hi) = self.opts.restart_downtime;
        let up = now + self.rng.duration(lo, hi);
        self.down_until = Some(up);
        out.restarted_until = Some(up);
    }
}
