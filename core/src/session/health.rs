//! Working out the health every answer carries and why the index is recovering, and publishing
//! them to the lock-free readers (the health's state: `parts/health.rs`).

use super::*;

impl Session {
    /// Works out the health from the sub-machines, and reports what changed: the health, why
    /// it is recovering. Called at the end of every input.
    pub(super) fn update_health(&mut self, fx: &mut Effects) {
        let health = match self.link.state {
            _ if self.health.events_disabled => Health::EventsDisabled,
            Link::Down { .. } => Health::Disconnected,
            Link::Connecting { .. } => Health::Connecting,
            Link::Up { .. } if self.point_in_doubt() || self.stream.is_unplaced() => {
                Health::Recovering
            }
            Link::Up { .. } => match self.resync.state {
                ResyncState::Idle
                | ResyncState::Fetching {
                    reconcile: Some(_), ..
                } if self.resync.watch.wanted.is_some() => Health::Reconciling,
                ResyncState::Idle
                | ResyncState::Fetching {
                    reconcile: Some(_), ..
                } => Health::Live,
                _ => Health::Recovering,
            },
        };
        if health != self.health.health {
            fx.push(Report::HealthChanged {
                from: self.health.health,
                to: health,
            });
            self.health.health = health;
            if health == Health::Live {
                if let Some(leader) = &mut self.leader {
                    leader.note_live(self.ledger.latest());
                }
            }
        }
        let why = self.recovering();
        if why != self.health.recovering {
            self.health.recovering = why;
            if let Some(why) = why {
                fx.push(Report::Recovering { why });
            }
        }
        self.publish_query_state();
    }

    /// Publishes the health and whether the last snapshot is unproven to the reader. Called
    /// at the end of every input and, where queries must start to miss, before the index
    /// changes that depend on it.
    pub(super) fn publish_query_state(&self) {
        self.reader
            .publish(self.health.health, self.point_in_doubt());
    }

    /// Reports whether queries must miss for the status point (R3): a batch came before it and
    /// the stream has not continued it, or it did and the master is being asked (the point
    /// check); or a batch applied out of its order of arrival stored what the master is not
    /// asked about yet (R7).
    pub(super) fn point_in_doubt(&self) -> bool {
        self.stream.is_unproven()
            || self.verify.point_check.is_some()
            || self.verify.reordered.is_pending()
    }
}
