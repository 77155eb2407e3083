//! The session: the sans-IO machine a transport drives.
//!
//! A [`Session`] owns the index, the stream machine ([`crate::sequence`]), the connection lifecycle
//! with its backoff, the worker directory, resynchronisation and verification. It reads no clock
//! and does no IO: the driver hands it [`Input`]s with their times, and executes the [`Command`]s
//! it returns (the [`Report`]s only tell).
//!
//! # The driving loop
//! ```text
//! loop {
//!     deadline = session.poll_timeout()            // None: nothing timed is pending
//!     wait until a message arrives, an answer comes back, or the deadline passes
//!     message  -> session.handle(now, Input::Message(&frames))
//!     socket   -> session.handle(now, Input::Connected / Input::Disconnected)
//!     HTTP     -> session.handle(now, Input::Snapshot { .. } / SnapshotFailed / VerifyResult ..)
//!     deadline -> session.handle(now, Input::Timeout)
//!     execute every returned Command, in order; log the Reports
//! }
//! ```
//! Queries ([`Session::query`]) take `&self` and may run at any time between these calls; so
//! may the reads of where the session is ([`Session::status`]) and of its models' layouts
//! ([`Session::models`]).
//!
//! # The folder
//! `parts/` holds the state of each part (connection, resync and where it stands, reconcile,
//! verification, watch, health, ledger, workers, a batch kept for later) with the methods that
//! need that part alone, and the plain data the session hands out (status, models). The files
//! beside this one are what the session does, coordinating its parts, one concern a file, each
//! named like the part it works on (`stream.rs`: batches; `resync.rs`, `questions.rs`,
//! `reconcile.rs`: key lists; `verify.rs`; `watch.rs`; `link.rs`; `health.rs`; `ledger.rs`;
//! `workers.rs`, `follow.rs`: workers and the HA leader; `status.rs`, `answer.rs`: the reads);
//! `config.rs` is plain data. Imports run one way: those files import the session and its
//! parts, the session imports its parts, and a part imports other parts and the configuration,
//! never the session.

mod answer;
mod config;
mod follow;
mod health;
mod ledger;
mod link;
mod parts;
mod questions;
mod reconcile;
mod resync;
mod status;
mod stream;
mod verify;
mod watch;
mod workers;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use crate::effect::{
    ClearReason, Command, Effects, Health, Recovering, Report, ResyncFailure, StrayReason,
};
use crate::error::{ConfigError, QueryError};
use crate::frame::{decode, Batch, EventKind, FrameError, Seq};
use crate::index::{Index, IndexConfig, DEFAULT_TENANT};
use crate::input::{Input, LeaderRequest, SnapshotRequest, StatusRequest, VerifyRequest};
use crate::layout::{parse_object_key, Advertised, ModelVerdict};
use crate::leader::{Leader, LeaderStatus, LeaderView, StatusStep, ViewStep};
use crate::metrics::Counters;
use crate::query::{Hits, Lookup};
use crate::reader::Reader;
use crate::sequence::{HoldBounds, Mark, Placed, Ruling, Skip, Stream, StreamConfig, Why};
use crate::snapshot::LineFilter;
use crate::time::Instant;

pub use self::config::{BackoffConfig, Config, ResyncConfig, VerifyConfig};
use self::parts::health::HealthState;
use self::parts::ledger::Ledger;
use self::parts::link::{Backoff, Connection, Link, LinkDue};
use self::parts::reconcile::Reconcile;
use self::parts::resync::Resync;
use self::parts::resync_state::{ResyncDue, ResyncState};
pub use self::parts::status::{SessionStatus, SnapshotProgress};
use self::parts::stream::HeldBatch;
use self::parts::verify::{Verify, VerifyDue};
pub use self::parts::workers::Models;
use self::parts::workers::Workers;
pub use crate::layout::{ModelLayout, WorkerInfo};
pub use crate::sequence::Watermark;

/// The sans-IO machine a transport drives (see the module docs for the loop).
///
/// Its methods, by kind:
/// - **Input**: [`Session::handle`] takes every [`Input`]: the one way in.
/// - **Output**: the [`Effects`] every input returns, and [`Session::poll_timeout`], when
///   [`Input::Timeout`] is next due.
/// - **Queries** (`&self`, at any time between inputs): [`Session::query`] and
///   [`Session::query_map`]; the read view [`Session::reader`] that query threads ask without
///   the session; [`Session::status`], where the session is (health, counters, stream,
///   connection, leader, the key list it takes); [`Session::models`], the layout each model
///   uses and what the workers advertise.
#[derive(Debug)]
pub struct Session {
    config: Config,
    index: Index,
    stream: Stream<HeldBatch>,
    link: Connection,
    health: HealthState,
    resync: Resync,
    verify: Verify,
    workers: Workers,
    counters: Counters,
    /// How long the index has gone without confirmation, and the latest time an input carried.
    ledger: Ledger,
    /// What queries read, shared with query threads (see [`crate::reader`]).
    reader: Arc<Reader>,
    /// The HA leader machine, when the session follows a cluster's leader.
    leader: Option<Leader>,
}

impl Session {
    /// Makes a session; with a configured endpoint, the first [`Input::Timeout`] asks to
    /// connect.
    pub fn new(config: Config) -> Result<Session, ConfigError> {
        if config.index.max_pages == 0 {
            return Err(ConfigError::NoPages);
        }
        for (i, ml) in config.layouts.iter().enumerate() {
            ml.layout.validate()?;
            if config.layouts[..i].iter().any(|o| o.model == ml.model) {
                return Err(ConfigError::DuplicateModel);
            }
        }
        let b = &config.backoff;
        if b.initial.is_zero() || b.max < b.initial || b.connect_timeout.is_zero() {
            return Err(ConfigError::Backoff);
        }
        if config.reorder.max_delay.is_some_and(|d| d.is_zero()) {
            return Err(ConfigError::Reorder);
        }
        if config.reorder.is_on() && config.resync.is_none() {
            // R7: after a loss, only the master's status can place a reordering stream.
            return Err(ConfigError::ReorderWithoutResync);
        }
        if let Some(r) = &config.resync {
            if r.max_buffered_batches == 0 || r.max_buffered_bytes == 0 {
                return Err(ConfigError::ResyncBuffer);
            }
            if r.fetch_timeout.is_zero() || r.retry_after.is_zero() {
                return Err(ConfigError::ResyncTiming);
            }
        }
        if let Some(v) = &config.verify {
            if v.sample == 0 || v.interval.is_zero() || v.timeout.is_zero() {
                return Err(ConfigError::Verify);
            }
        }
        let mut index = Index::new(IndexConfig {
            seed: config.index.seed ^ config.seed,
            ..config.index.clone()
        });
        if config.page_deltas {
            for ml in &config.layouts {
                index.watch_layout(&ml.layout);
            }
        }
        if config
            .leader
            .is_some_and(|l| l.check_interval.is_zero() || l.check_timeout.is_zero())
        {
            return Err(ConfigError::Leader);
        }
        if config.leader.is_some()
            && config
                .endpoint
                .as_deref()
                .and_then(|e| crate::leader::replace_host(e, "h"))
                .is_none()
        {
            return Err(ConfigError::Leader);
        }
        let reader = Arc::new(Reader::new(index.shared(), config.layouts.clone()));
        // Following a leader, nothing connects before a leader serves.
        let endpoint = config.endpoint.clone().filter(|_| config.leader.is_none());
        let retry_at = endpoint.as_ref().map(|_| Instant::ZERO);
        Ok(Session {
            index,
            stream: Stream::new(StreamConfig {
                reorder: config.reorder,
                resync: config.resync.map(|r| HoldBounds {
                    batches: r.max_buffered_batches,
                    bytes: r.max_buffered_bytes,
                    point_timeout: r.fetch_timeout,
                    status_check: r.status_check,
                }),
            }),
            link: Connection {
                state: Link::Down { retry_at },
                backoff: Backoff::new(config.seed),
                endpoint,
            },
            health: HealthState::new(),
            resync: Resync::new(config.seed),
            verify: Verify::new(config.seed),
            workers: Workers::new(),
            counters: Counters::default(),
            ledger: Ledger::new(),
            reader,
            leader: config.leader.map(Leader::new),

            config,
        })
    }

    /// Returns the session's read view for query threads: queries through it never wait for
    /// the session's writer (see [`crate::reader`]). The session writes into it as it changes;
    /// [`Session::query`] answers through it too.
    pub fn reader(&self) -> Arc<Reader> {
        Arc::clone(&self.reader)
    }

    /// Returns when [`Input::Timeout`] must next be handed over; `None` when nothing timed is
    /// pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.link.poll_timeout(),
            self.stream.poll_timeout(),
            self.stream.status_due(),
            self.resync.state.poll_timeout(),
            self.resync.watch.poll_timeout(),
            self.verify.poll_timeout(),
            self.leader.as_ref().and_then(Leader::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Hands over one input (see [`Input`] for each): the one way into the session. Every
    /// returned effect MUST be executed (commands) or may be logged (reports), in order.
    pub fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects {
        let mut fx = self.dispatch(now, input);
        self.reconcile_if_wanted(now, &mut fx);
        // A change that removed something is over: lock-free queries may use what they read.
        self.index.settle();
        fx
    }

    fn dispatch(&mut self, now: Instant, input: Input<'_>) -> Effects {
        match input {
            Input::Message(frames) => self.on_message(now, frames),
            Input::Timeout => self.on_timeout(now),
            Input::Connected => self.on_connected(now),
            Input::Disconnected => self.on_disconnected(now),
            Input::Stopped => self.on_stopped(now),
            Input::Resume => {
                self.on_resume(now);
                Effects::new()
            }
            Input::Clear => self.on_clear(now),
            Input::Worker { worker, info } => self.on_worker(now, worker, info),
            Input::Snapshot {
                request,
                watermark,
                lines,
            } => self.on_snapshot(now, request, watermark, lines),
            Input::SnapshotBegin { request, watermark } => {
                self.begin_snapshot(now, request, watermark)
            }
            Input::SnapshotLines { request, lines } => {
                let _ = self.snapshot_keys(request, lines);
                Effects::new()
            }
            Input::SnapshotEnd { request } => self.finish_snapshot(now, request),
            Input::SnapshotFailed { request } => {
                self.fetch_failed(now, request, ResyncFailure::Fetch)
            }
            Input::EventsDisabled { request } => {
                self.fetch_failed(now, request, ResyncFailure::EventsDisabled)
            }
            Input::VerifyResult { request, results } => {
                self.on_verify_result(now, request, results.iter().copied())
            }
            Input::VerifyFailed { request } => self.on_verify_failed(now, request),
            Input::Status { request, watermark } => self.on_status(now, request, watermark),
            Input::Signals { request, signals } => self.on_signals(now, request, signals),
            Input::LeaderView(view) => self.on_leader_view(now, view),
            Input::LeaderStatus { request, status } => self.on_leader_status(now, request, status),
        }
    }

    fn on_timeout(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        // Each sub-machine's timer, in this order: the connection, the leader, the stream (the
        // reorder window, a status point to continue), the resync, verification.
        match self.link.handle_timeout(now) {
            Some(LinkDue::Connect) => self.connect(now, &mut fx),
            Some(LinkDue::ConnectTimedOut) => {
                fx.push(Command::Disconnect);
                self.link_lost(now, &mut fx);
            }
            None => {}
        }
        if let Some(request) = self.leader.as_mut().and_then(|l| l.handle_timeout(now)) {
            self.check_leader(request, &mut fx);
        }
        if let Some(ruling) = self.stream.handle_timeout(now) {
            self.act(now, None, None, ruling, &mut fx);
            self.release_held(now, &mut fx);
        }
        self.check_status(now, &mut fx);
        match self.resync.state.handle_timeout(now) {
            Some(ResyncDue::FetchTimedOut) => {
                self.resync_failed(now, ResyncFailure::Timeout, &mut fx);
            }
            Some(ResyncDue::ConfirmTimedOut) => self.confirmation_failed(now, &mut fx),
            Some(ResyncDue::Retry) => self.start_resync(now, &mut fx),
            Some(ResyncDue::ReconcileStep) => self.reconcile_step(now, &mut fx),
            None => {}
        }
        self.watch_timeout(now, &mut fx);
        match self.verify.handle_timeout(now) {
            Some(VerifyDue::RoundTimedOut) => self.schedule_verify_after_failure(now),
            Some(VerifyDue::PointCheckTimedOut) => self.point_check_failed(now, &mut fx),
            Some(VerifyDue::Round) => self.start_verify(now, &mut fx),
            None => {}
        }
        self.update_health(&mut fx);
        fx
    }

    fn on_resume(&mut self, now: Instant) {
        self.see(now);
        self.link.backoff.attempts = 0;
        if self.link.endpoint.is_some() {
            self.link.state = Link::Down {
                retry_at: Some(now),
            };
        }
    }

    fn on_clear(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.forget(now, ClearReason::Requested, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Forgets what the stream taught the index for a reason outside the stream's rulings (a
    /// connection, a clear, a verification, an unreadable removal): the stream is told first
    /// (rules R6 and R9 of [`crate::sequence`]), then [`Session::drop_index`].
    fn forget(&mut self, now: Instant, reason: ClearReason, fx: &mut Effects) {
        self.stream.forget();
        self.drop_index(now, reason, fx);
    }

    /// Drops what the stream taught the index, and starts a resync when that is on: the forget
    /// table is [`ClearReason::resyncs`] and [`Counters::clears_for`]. The stream has placed
    /// itself already (its own rulings, or [`Session::forget`]).
    fn drop_index(&mut self, now: Instant, reason: ClearReason, fx: &mut Effects) {
        let (pages, objects) = self.index.clear();
        self.verify.sweep = None;
        // What a held-back escalation would do is done: the key list is read again (now, or
        // at the next connection), and nothing the index held is claimed.
        self.verify.held = false;
        self.verify.drop_point_checks();
        *self.counters.clears_for(reason) += 1;
        fx.push(Report::Cleared {
            reason,
            pages,
            objects,
        });
        let connected = self.link.is_up();
        if connected && reason.resyncs() {
            self.start_resync(now, fx);
        } else if !connected {
            self.resync.state = ResyncState::Idle;
            self.stream.fetch_dropped();
        }
    }
}
