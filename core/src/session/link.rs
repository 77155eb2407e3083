//! The connection: asking to connect, the socket coming up or going down, scheduling reconnects
//! (the connection's state and backoff: `parts/link.rs`).

use super::*;

impl Session {
    pub(super) fn on_connected(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.link_up(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn on_disconnected(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        if !matches!(self.link.state, Link::Down { .. }) || self.index.page_count() > 0 {
            self.link_lost(now, &mut fx);
        }
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn on_stopped(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.link.state = Link::Down { retry_at: None };
        self.verify.reset();
        self.stream.forget();
        if self.index.page_count() > 0 {
            self.drop_index(now, ClearReason::Requested, &mut fx);
        }
        self.resync.state = ResyncState::Idle;
        self.stream.fetch_dropped();
        self.update_health(&mut fx);
        fx
    }

    pub(super) fn connect(&mut self, now: Instant, fx: &mut Effects) {
        let Some(endpoint) = self.link.endpoint.clone() else {
            self.link.state = Link::Down { retry_at: None };
            return;
        };
        self.counters.connects += 1;
        self.link.state = Link::Connecting {
            deadline: now + self.config.backoff.connect_timeout,
        };
        fx.push(Command::Connect { endpoint });
    }

    pub(super) fn link_up(&mut self, now: Instant, fx: &mut Effects) {
        if matches!(self.link.state, Link::Up { .. }) {
            return;
        }
        self.link.state = Link::Up { since: now };
        // R9: a new connection may bring another run; nothing of the old one's is continued
        // silently (the position stays, without resync, for its first batch to be placed by).
        self.stream.connected();
        self.stream.forget();
        if self.config.resync.is_some_and(|r| r.store_watch.is_some()) {
            self.resync.watch.start(now);
        }
        if self.index.page_count() > 0 {
            self.drop_index(now, ClearReason::Reconnected, fx);
        }
        self.start_resync(now, fx);
        if self.config.resync.is_none() {
            self.schedule_verify(now);
        }
    }

    /// The connection is gone (or never came): forget, and schedule a reconnect with backoff.
    pub(super) fn link_lost(&mut self, now: Instant, fx: &mut Effects) {
        if let Link::Up { since } = self.link.state {
            if now.saturating_duration_since(since) >= self.config.backoff.reset_after {
                self.link.backoff.attempts = 0;
            }
        }
        self.counters.disconnects += 1;
        self.link.state = Link::Down { retry_at: None };
        self.verify.reset();
        self.resync.watch.stop();
        self.forget(now, ClearReason::Disconnected, fx);
        let delay = self.link.backoff.delay(&self.config.backoff);
        let retry_at = self.link.endpoint.as_ref().map(|_| now + delay);
        if let Some(at) = retry_at {
            fx.push(Report::ReconnectScheduled {
                at,
                attempt: self.link.backoff.attempts,
            });
        }
        self.link.backoff.attempts = self.link.backoff.attempts.saturating_add(1);
        self.link.state = Link::Down { retry_at };
    }
}
