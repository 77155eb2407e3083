//! Reading where the session is ([`Session::status`]), why it is recovering, and its counters
//! (the plain data it hands out: `parts/status.rs`).

use super::*;

impl Session {
    /// Returns where the session is, with [`Counters::unconfirmed_ms`] as of `now` (a read: it
    /// changes nothing, and may be asked at any time between inputs).
    pub fn status(&self, now: Instant) -> SessionStatus {
        SessionStatus {
            health: self.health.health,
            recovering: self.recovering(),
            counters: self.counters_at(now),
            last_applied_seq: self.stream.last_applied(),
            confirmed_at: self.confirmed_at(),
            endpoint: self.link.endpoint.clone(),
            leader: self.leader.as_ref().map(Leader::info),
            snapshot: self.snapshot_progress(),
            suspects: self.index.suspect_count(),
        }
    }

    /// Returns why the index is [`Health::Recovering`], or `None` when it is not.
    pub(super) fn recovering(&self) -> Option<Recovering> {
        if self.health.health != Health::Recovering {
            return None;
        }
        if self.point_in_doubt() {
            return Some(Recovering::Unproven);
        }
        Some(
            self.resync
                .state
                .recovering()
                .unwrap_or(Recovering::Fetching),
        )
    }

    /// Returns every counter and gauge, with [`Counters::unconfirmed_ms`] as of `now`.
    pub(super) fn counters_at(&self, now: Instant) -> Counters {
        let mut c = self.counters;
        let ic = self.index.counters();
        c.unparsed_keys = ic.unparsed_keys;
        c.untracked_objects = ic.untracked_objects;
        c.group_id_mismatches = ic.group_id_mismatches;
        c.evictions = ic.evictions;
        c.suspended_objects = ic.suspended_objects;
        c.suspects_confirmed = ic.suspects_confirmed;
        c.suspects_dropped = ic.suspects_dropped;
        c.pages = self.index.page_count() as u64;
        c.objects = self.index.object_count() as u64;
        c.held_batches = self.stream.held() as u64;
        (c.gaps, c.missing_sequences) = self.stream.holes();
        c.buffered_batches = match &self.resync.state {
            ResyncState::Fetching { batches, .. } => *batches as u64,
            _ => 0,
        };
        c.unconfirmed_ms = self.confirmed_at().map_or(0, |at| {
            u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
        });
        let (queries, hit_pages) = self.reader.counted();
        c.queries = queries as u64;
        c.hit_pages = hit_pages as u64;
        if let Some(info) = self.leader.as_ref().map(Leader::info) {
            let ms = |d: Option<Duration>| {
                d.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            };
            c.leader_changes = info.changes;
            c.leader_view_version = info.version.unwrap_or(0);
            c.last_failover_ms = ms(info.last_failover);
            c.last_failover_after_serving_ms = ms(info.last_failover_after_serving);
        }
        c
    }

    /// Returns a time at or after which every object the index holds is known to have been
    /// present at the master; `None` while the index is empty.
    pub(super) fn confirmed_at(&self) -> Option<Instant> {
        self.ledger.confirmed_at(self.index.object_count() > 0)
    }
}
