//! The body of a driver loop, shared by the runtimes: feed messages, turn monitor events into
//! `Input::Connected`/`Input::Disconnected`, answer timers and HTTP outcomes, hand snapshots
//! over in chunks between live batches, and turn effects into [`Action`]s for the runtime;
//! an [`Observer`] sees each call on the way.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use hicache_index::{Command, Effect, Effects, Health, Input, Instant, LeaderRequest, Session};

use crate::config::SocketConfig;
use crate::handle::{Control, HoldKind, Inbox, Shared};
use crate::http::{HttpError, HttpJob, MasterHttp};
use crate::observe::{LinkChange, Observed, Observer};
use crate::report;
use crate::socket::{self, Link, LinkEvent, MAX_FRAMES};

mod handover;
mod inbox;
mod key_list;

use key_list::Handover;

/// The most snapshot lines applied under one hold of the write lock: as many as the master puts
/// in one batch (64 events), so that a query waits for a chunk no longer than for a live batch;
/// live batches are fed between chunks. (4,096-line chunks held the lock for milliseconds.)
pub const SNAPSHOT_CHUNK_LINES: usize = 64;

/// What the runtime must do for the driver, in order.
#[derive(Debug)]
pub enum Action {
    /// Drop the current link (deregistering its sockets first), then register and use this
    /// new one.
    Open(Link),
    /// Drop the current link.
    Close,
}

/// The runtime-independent state of one subscriber's loop, shown to the observer `O` as it goes
/// (`()`: to nobody).
///
/// Dropping it (the loop ended, was cancelled or panicked) marks the subscriber stopped: the
/// index forgets and the health becomes [`Health::Disconnected`], so nobody trusts an index that
/// no longer follows the stream.
pub struct Driver<O = ()> {
    pub(crate) shared: Arc<Shared>,
    pub(crate) ctx: zmq::Context,
    pub(crate) topic: Vec<u8>,
    pub(crate) socket: SocketConfig,
    pub(crate) http: Option<Arc<MasterHttp>>,
    pub(crate) control: Control,
    pub(crate) actions: VecDeque<Action>,
    pub(crate) parts: Vec<zmq::Message>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) metrics_interval: Duration,
    pub(crate) next_export: std::time::Instant,
    pub(crate) handover: Option<Handover>,
    /// Sees each call into the session.
    pub(crate) observer: O,
    /// Set once the observer asked the loop to stop: no more calls into the session.
    pub(crate) stopped: bool,
    /// Logs the reports, once per episode where they repeat.
    pub(crate) log: report::ReportLog,
    /// The endpoint of the connection asked for and not yet up.
    pub(crate) connecting: Option<String>,
}

impl<O> std::fmt::Debug for Driver<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("topic", &self.topic)
            .field("http", &self.http)
            .field("deadline", &self.deadline)
            .field("actions", &self.actions)
            .field(
                "handover",
                &self.handover.as_ref().map(|h| (h.request, h.next)),
            )
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl<O: Observer> Driver<O> {
    /// The current time on the core's clock (nanoseconds since the driver was made; the query
    /// handles read the same clock).
    pub fn now(&self) -> Instant {
        self.shared.now()
    }

    /// When the loop must wake up at the latest (the core's deadline or the next metrics
    /// export).
    pub fn deadline(&self) -> std::time::Instant {
        let core = self.deadline.and_then(|d| {
            self.shared
                .start
                .checked_add(Duration::from_nanos(d.as_nanos()))
        });
        match core {
            Some(at) => at.min(self.next_export),
            None => self.next_export,
        }
    }

    /// Fires the core's timer if it is due, and exports metrics if they are due.
    pub fn handle_timeout(&mut self) {
        if self.deadline.is_some_and(|d| d <= self.now()) {
            self.call(|s, now| s.handle(now, Input::Timeout));
        }
        if std::time::Instant::now() >= self.next_export {
            let now = self.now();
            if let Some(s) = self.shared.session.read() {
                let status = s.status(now);
                report::export_counters(&status.counters);
                report::export_health(status.health);
            }
            self.next_export = std::time::Instant::now() + self.metrics_interval;
        }
    }

    /// Does one turn's reading of `link`: its queued messages (at most the drain budget), then
    /// its monitor's events. Returns true when the loop must come back without waiting for the
    /// FDs: messages may remain, or actions are queued.
    ///
    /// Both sockets are read until `EAGAIN` with `ZMQ_EVENTS` re-checked (their FDs are
    /// edge-triggered), unless the budget ran out or the link is being replaced.
    pub fn drain(&mut self, link: &Link) -> bool {
        let more = self.drain_messages(&link.sub);
        if !self.link_changing() {
            self.drain_monitor(&link.monitor);
        }
        more || !self.actions.is_empty()
    }

    /// Reports whether a queued action closes or replaces the link.
    fn link_changing(&self) -> bool {
        self.actions
            .iter()
            .any(|a| matches!(a, Action::Open(_) | Action::Close))
    }

    /// Feeds queued messages of `sub`, at most the drain budget; returns true when messages
    /// may remain.
    ///
    /// While a key list is handed over, the turn also ends once it took as long as the last
    /// chunk did: a backlogged stream and the snapshot then share the loop evenly, however fast
    /// either goes.
    fn drain_messages(&mut self, sub: &zmq::Socket) -> bool {
        let now = self.now();
        let share = self
            .handover
            .as_ref()
            .map(|h| std::time::Instant::now() + h.last);
        for fed in 0..self.socket.drain_budget {
            if fed > 0 && share.is_some_and(|until| std::time::Instant::now() >= until) {
                return true;
            }
            let count = match socket::recv_message(sub, &mut self.parts) {
                Ok(count) => count,
                Err(zmq::Error::EAGAIN) if socket::has_input(sub) => continue,
                Err(zmq::Error::EAGAIN) => return false,
                Err(e) => {
                    tracing::warn!(error = %e, "receiving from the SUB socket failed");
                    return false;
                }
            };
            let kept = count.min(MAX_FRAMES);
            let mut frames: [&[u8]; MAX_FRAMES] = [&[]; MAX_FRAMES];
            for (frame, part) in frames.iter_mut().zip(&self.parts[..kept]) {
                *frame = part;
            }
            let message = &frames[..kept];
            let fed = hold(&self.shared, HoldKind::Batch, "batch", |session| {
                (
                    session.handle(now, Input::Message(message)),
                    session.poll_timeout(),
                )
            });
            let Some((fx, deadline)) = fed else {
                return false;
            };
            self.deadline = deadline;
            let seen = Observed::Message {
                frames: message,
                effects: &fx,
            };
            if self.observer.observe(now, seen).is_break() {
                self.stop_observed();
                return false;
            }
            self.execute(fx);
            if self.link_changing() {
                return true;
            }
        }
        true
    }

    /// Reads the monitor's queued events and reports connection changes to the core.
    fn drain_monitor(&mut self, monitor: &zmq::Socket) {
        while !self.stopped {
            let event = match socket::recv_message(monitor, &mut self.parts) {
                Ok(_) => socket::parse_monitor_event(&self.parts[0]),
                Err(zmq::Error::EAGAIN) if socket::has_input(monitor) => continue,
                Err(_) => return,
            };
            match event {
                Some(LinkEvent::Connected) => {
                    tracing::info!("connected to the publisher");
                    self.connecting = None;
                    self.shared.episodes.succeeded(EVENTS);
                    self.observe_link(LinkChange::Connected);
                    self.call(|s, now| s.handle(now, Input::Connected));
                }
                Some(LinkEvent::Disconnected) => {
                    match self.connecting.take() {
                        Some(endpoint) => {
                            self.events_failed(&endpoint, "the connection was refused or closed")
                        }
                        None => tracing::info!("connection to the publisher lost"),
                    }
                    self.observe_link(LinkChange::Disconnected);
                    // libzmq does not reconnect by itself: this link is dead.
                    self.actions.push_back(Action::Close);
                    self.call(|s, now| s.handle(now, Input::Disconnected));
                }
                Some(LinkEvent::Other(raw)) => tracing::trace!(event = raw, "socket event"),
                None => {}
            }
        }
    }

    /// Reports that the runtime could not register a link's sockets: the connection failed.
    pub fn link_failed(&mut self, error: &std::io::Error) {
        tracing::warn!(%error, "registering the sockets failed");
        self.observe_link(LinkChange::Failed(error));
        self.call(|s, now| s.handle(now, Input::Disconnected));
    }

    /// Returns the next thing the runtime must do.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Returns a control handle.
    pub fn control(&self) -> Control {
        self.control.clone()
    }

    /// Reports whether the observer asked the loop to stop (the loop MUST then end).
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// Stops the driver at its observer's request: no further call into the session, and the
    /// link closes.
    fn stop_observed(&mut self) {
        self.stopped = true;
        self.actions.push_back(Action::Close);
    }

    /// Shows a change of the link to the observer, before the session hears of it.
    fn observe_link(&mut self, change: LinkChange<'_>) {
        let now = self.now();
        if self
            .observer
            .observe(now, Observed::Link(change))
            .is_break()
        {
            self.stop_observed();
        }
    }

    /// Shows the effects of a call made at `now` to the observer, then executes them (unless
    /// it stopped the driver).
    fn observe_and_execute(&mut self, now: Instant, fx: Effects) {
        match self.observer.observe(now, Observed::Effects(&fx)) {
            ControlFlow::Continue(()) => self.execute(fx),
            ControlFlow::Break(()) => self.stop_observed(),
        }
    }

    /// Runs `job` on a thread of its own, which hands the outcome back through the inbox.
    fn spawn_job(&mut self, job: HttpJob) {
        let Some(http) = self.http.clone() else {
            return;
        };
        let control = self.control.clone();
        let request = job.request();
        let snapshot = matches!(job, HttpJob::Snapshot { .. });
        let fallback = job.without_keys();
        let span = tracing::info_span!("master_http", request, snapshot);
        let spawned = std::thread::Builder::new()
            .name("hicache-index-http".into())
            .spawn(move || {
                let _entered = span.enter();
                control.deliver(job.run(&http));
            });
        if let Err(error) = spawned {
            tracing::warn!(%error, "starting an HTTP job's thread failed");
            let outcome = fallback.failed(HttpError::Io(error.to_string()));
            self.handle_inbox(Inbox::Http(outcome));
        }
    }

    /// Checks the candidate leader at `host` on a thread of its own (see [`crate::leader`]).
    fn spawn_check(&mut self, request: LeaderRequest, host: &str) {
        let Some(http) = self.http.as_ref().map(|h| h.with_host(host)) else {
            // Without a master HTTP side no leader can be checked: it stays a candidate.
            tracing::warn!(host, "no master HTTP URL to check the HA leader with");
            return;
        };
        let control = self.control.clone();
        let spawned = std::thread::Builder::new()
            .name("hicache-index-leader".into())
            .spawn(move || {
                control.deliver_leader_status(request.0, crate::leader::check_leader(&http));
            });
        if let Err(error) = spawned {
            // Not answered: the core's check times out and asks again.
            tracing::warn!(%error, "starting a leader check's thread failed");
        }
    }

    /// Calls into the session under the write lock (for that call only), then shows what it
    /// returned to the observer and executes it; nothing once the observer stopped the driver.
    fn call(&mut self, f: impl FnOnce(&mut Session, Instant) -> Effects) {
        if self.stopped {
            return;
        }
        let now = self.now();
        let called = hold(&self.shared, HoldKind::Other, "call", |session| {
            (f(session, now), session.poll_timeout())
        });
        if let Some((fx, deadline)) = called {
            self.deadline = deadline;
            self.observe_and_execute(now, fx);
        }
    }

    fn execute(&mut self, fx: Effects) {
        for effect in fx {
            match effect {
                Effect::Command(command) => self.command(command),
                Effect::Report(report) => self.log.log(&report),
            }
        }
    }

    /// Executes one command of the core; every command is named here (no wildcard arm), so
    /// that a new one is a compile error, not a silent log line.
    fn command(&mut self, command: Command) {
        match command {
            Command::Connect { endpoint } => {
                tracing::debug!(endpoint, "connecting");
                match socket::open(&self.ctx, &endpoint, &self.topic, &self.socket) {
                    Ok(link) => {
                        self.connecting = Some(endpoint);
                        self.actions.push_back(Action::Open(link));
                    }
                    Err(error) => {
                        self.connecting = None;
                        self.events_failed(&endpoint, &format!("cannot connect: {error}"));
                        self.observe_link(LinkChange::Failed(&error));
                        self.actions.push_back(Action::Close);
                        self.call(|s, now| s.handle(now, Input::Disconnected));
                    }
                }
            }
            Command::Disconnect => {
                tracing::debug!("disconnecting");
                if let Some(endpoint) = self.connecting.take() {
                    // The core gave up on a connection that did not come up in time.
                    self.events_failed(&endpoint, "no connection within the connect timeout");
                }
                self.actions.push_back(Action::Close);
            }
            Command::FetchSnapshot { request } => match self.http {
                Some(_) => self.spawn_job(HttpJob::Snapshot { request: request.0 }),
                None => self.call(|s, now| s.handle(now, Input::SnapshotFailed { request })),
            },
            Command::VerifyKeys { request, keys } => self.spawn_job(HttpJob::Verify {
                request: request.0,
                keys,
            }),
            Command::ReadStatus { request } => match self.http {
                Some(_) => self.spawn_job(HttpJob::Status { request: request.0 }),
                None => self.call(|s, now| {
                    let watermark = None;
                    s.handle(now, Input::Status { request, watermark })
                }),
            },
            Command::ReadSignals { request } => match self.http {
                Some(_) => self.spawn_job(HttpJob::Signals { request: request.0 }),
                None => self.call(|s, now| {
                    let signals = None;
                    s.handle(now, Input::Signals { request, signals })
                }),
            },
            Command::CheckLeader { request, host } => self.spawn_check(request, &host),
            Command::UseMaster { host } => {
                tracing::info!(host, "following the HA leader");
                self.http = self.http.as_ref().map(|h| Arc::new(h.with_host(&host)));
            }
        }
    }
}

/// What the failure episodes of the master's key list are named (see [`crate::episode`]).
const KEY_LIST: &str = "key list";
/// ... of verification rounds.
const VERIFICATION: &str = "verification";
/// ... of the checks of a quiet stream against the master's status.
const STATUS_CHECK: &str = "status check";
/// ... of the reads of the master's signals.
const SIGNALS: &str = "store signals";
/// ... of the event endpoint.
const EVENTS: &str = "events";

impl<O> Driver<O> {
    /// The master's HTTP URL in use, for messages.
    fn http_url(&self) -> String {
        self.http
            .as_ref()
            .map_or_else(|| "(no master HTTP URL)".to_owned(), |h| h.url())
    }

    /// Records a failed connection to `endpoint`. At the first of an episode, a host name is
    /// resolved on a thread of its own (never on the loop): one that does not resolve is named
    /// as the cause.
    fn events_failed(&self, endpoint: &str, cause: &str) {
        if !self.shared.episodes.failed(EVENTS, endpoint, cause) {
            return;
        }
        let Some((host, port)) = endpoint
            .strip_prefix("tcp://")
            .and_then(|rest| rest.rsplit_once(':'))
        else {
            return;
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        if host.parse::<std::net::IpAddr>().is_ok() || host == "*" {
            return;
        }
        let Ok(port) = port.parse::<u16>() else {
            return;
        };
        let shared = self.shared.clone();
        let _ = std::thread::Builder::new()
            .name("hicache-index-resolve".into())
            .spawn(move || {
                use std::net::ToSocketAddrs;
                if let Err(e) = (host.as_str(), port).to_socket_addrs() {
                    let cause = format!("the host {host:?} does not resolve: {e}");
                    shared.episodes.refine(EVENTS, &cause);
                }
            });
    }
}

/// Write-lock holds at least this long are logged (at debug level, with what held it): a query
/// may have waited that long.
const LONG_HOLD: Duration = Duration::from_millis(5);

/// Runs `f` under the session's write lock (for that call only), timing the hold; `None` if a
/// panic poisoned the lock.
fn hold<R>(
    shared: &Shared,
    kind: HoldKind,
    what: &'static str,
    f: impl FnOnce(&mut Session) -> R,
) -> Option<R> {
    let mut held = Duration::ZERO;
    let r = shared.session.write(|session| {
        let began = std::time::Instant::now();
        let r = f(session);
        held = began.elapsed();
        r
    })?;
    shared.locks.record_hold(kind, held);
    if held >= LONG_HOLD {
        tracing::debug!(
            what,
            held_us = u64::try_from(held.as_micros()).unwrap_or(u64::MAX),
            "long write-lock hold"
        );
    }
    Some(r)
}

impl<O> Drop for Driver<O> {
    fn drop(&mut self) {
        self.shared.running.store(false, Ordering::Release);
        let now = self.shared.now();
        self.shared.session.write(|session| {
            for report in session.handle(now, Input::Stopped).reports() {
                report::log_report(report);
            }
            report::export_counters(&session.status(now).counters);
        });
        report::export_health(Health::Disconnected);
        report::export_running(false);
        tracing::info!("subscriber stopped");
    }
}

#[cfg(test)]
mod tests;
