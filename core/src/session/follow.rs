//! Following a Mooncake HA leader: discovery values, leader checks, and masters without events.

use super::*;

impl Session {
    pub(super) fn on_leader_view(&mut self, now: Instant, view: &LeaderView) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let Some(leader) = &mut self.leader else {
            return fx;
        };
        if let ViewStep::Changed { check } = leader.handle_view(now, view) {
            if self.link.endpoint.take().is_some() || !matches!(self.link.state, Link::Down { .. })
            {
                fx.push(Command::Disconnect);
            }
            self.link.state = Link::Down { retry_at: None };
            self.stream.begin_anew();
            self.resync.state = ResyncState::Idle;
            self.verify.reset();
            self.health.events_disabled = false;
            self.link.backoff.attempts = 0;
            if self.index.object_count() > 0 {
                // The new leader restores its objects without events: only a resync from it
                // once it serves can tell which are there.
                self.drop_index(now, ClearReason::LeaderChanged, &mut fx);
            }
            if let Some(request) = check {
                self.check_leader(request, &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn on_leader_status(
        &mut self,
        now: Instant,
        request: LeaderRequest,
        status: &LeaderStatus,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let step = match &mut self.leader {
            Some(leader) => leader.handle_status(now, request.0, status),
            None => StatusStep::Unawaited,
        };
        match step {
            StatusStep::Unawaited => self.counters.unawaited_answers += 1,
            StatusStep::NotYet => {}
            StatusStep::Disabled => {
                self.counters.events_disabled += 1;
                self.health.events_disabled = true;
            }
            StatusStep::Follow { host } => {
                self.health.events_disabled = false;
                self.link.endpoint = self
                    .config
                    .endpoint
                    .as_deref()
                    .and_then(|e| crate::leader::replace_host(e, &host));
                fx.push(Command::UseMaster { host });
                self.link.backoff.attempts = 0;
                self.connect(now, &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn check_leader(&mut self, request: u64, fx: &mut Effects) {
        if let Some(host) = self.leader.as_ref().and_then(Leader::candidate_host) {
            fx.push(Command::CheckLeader {
                request: LeaderRequest(request),
                host: host.into(),
            });
        }
    }
}
