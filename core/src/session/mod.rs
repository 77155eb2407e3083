//! The session: the sans-IO machine a transport drives.
//!
//! A [`Session`] owns the index, the stream's sequence tracker, the connection lifecycle with
//! its backoff, the worker directory, resynchronisation and verification. It reads no clock and
//! does no IO: the driver hands it [`Input`]s with their times, and executes the [`Command`]s
//! it returns (the [`Report`]s only tell).
//!
//! # The driving loop
//! ```text
//! loop {
//!     deadline = session.poll_timeout()            // None: nothing timed is pending
//!     wait until a message arrives, an answer comes back, or the deadline passes
//!     message  -> session.handle(now, Input::Message(&frames))     (or session.feed)
//!     socket   -> session.handle(now, Input::Connected / Input::Disconnected)
//!     HTTP     -> session.handle(now, Input::Snapshot { .. } / SnapshotFailed / VerifyResult ..)
//!     deadline -> session.handle(now, Input::Timeout)
//!     execute every returned Command, in order; log the Reports
//! }
//! ```
//! Queries ([`Session::query`]) take `&self` and may run at any time between these calls.

mod answer;
mod config;
mod follow;
mod link;
mod resync;
mod stream;
mod verify;
mod workers;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::time::Duration;

use crate::effect::{ClearReason, Command, Effects, Health, Report, ResyncFailure, StrayReason};
use crate::error::{ConfigError, QueryError};
use crate::frame::{decode, Batch, EventKind, FrameError, Seq};
use crate::index::{Index, IndexConfig, DEFAULT_TENANT};
use crate::input::{Input, LeaderRequest, SnapshotRequest, VerifyRequest};
use crate::layout::{Advertised, Layout, LayoutVotes, ModelVerdict};
use crate::leader::{
    Leader, LeaderConfig, LeaderInfo, LeaderStatus, LeaderView, StatusStep, ViewStep,
};
use crate::metrics::Counters;
use crate::query::{Hits, Lookup, QueryPlan};
use crate::reader::Reader;
use crate::sequence::{Fingerprint, Loss, ReorderConfig, SequenceTracker, Verdict};
use crate::snapshot::LineFilter;
use crate::time::Instant;

/// What the master's `GET /kv_events/status` said just before its key list was read: where its
/// stream stood.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Watermark {
    /// The last sequence the master had assigned: `published_batches + dropped_events`.
    pub seq: Seq,
    /// The last event id it had given: `published_events` (event ids count published events
    /// from 1); `None` when the master does not tell.
    pub events: Option<u64>,
}

pub use self::config::{
    BackoffConfig, Config, ModelLayout, ResyncConfig, VerifyConfig, WorkerInfo,
};
use self::link::{Backoff, Link, LinkDue};
use self::resync::{key_checksum, Proof, Resync, ResyncDue};
use self::stream::HeldBatch;
use self::verify::{Verify, VerifyDue};

/// The sans-IO machine a transport drives (see the module docs for the loop).
///
/// Its methods, by kind:
/// - **Input**: [`Session::handle`] takes every [`Input`]. Shortcuts for one input each:
///   [`Session::feed`] (messages), [`Session::handle_timeout`], [`Session::handle_connected`],
///   [`Session::handle_disconnected`], [`Session::handle_stopped`], [`Session::restart`],
///   [`Session::clear`], [`Session::handle_worker`], [`Session::handle_snapshot`] and
///   [`Session::handle_verify_result`] (which take any iterator),
///   [`Session::handle_snapshot_failed`], [`Session::handle_events_disabled`],
///   [`Session::handle_verify_failed`],
///   [`Session::handle_leader_view`], [`Session::handle_leader_status`].
/// - **Output**: the [`Effects`] every input returns, and [`Session::poll_timeout`], when
///   [`Input::Timeout`] is next due.
/// - **Queries** (`&self`, at any time): [`Session::query`], [`Session::query_map`],
///   [`Session::plan`] with [`Session::probe`] and [`Session::count_answer`],
///   [`Session::layout_for`].
/// - **Getters**: [`Session::health`], [`Session::counters`], [`Session::counters_at`],
///   [`Session::confirmed_at`], [`Session::config`], [`Session::endpoint`],
///   [`Session::last_applied_seq`], [`Session::leader`], [`Session::snapshot_progress`],
///   [`Session::index`].
#[derive(Debug)]
pub struct Session {
    config: Config,
    index: Index,
    tracker: SequenceTracker<HeldBatch>,
    link: Link,
    /// The first sequence applied since the stream's baseline was last reset.
    stream_start: Option<Seq>,
    /// The latest sequence the stream may begin at for the last snapshot to hold (watermark + 1).
    anchor: Option<Seq>,
    /// The last snapshot's status point, until the stream has passed it.
    proof: Option<Proof>,
    backoff: Backoff,
    endpoint: Option<String>,
    health: Health,
    resync: Resync,
    verify: Verify,
    workers: BTreeMap<String, WorkerInfo>,
    /// What the workers advertise for their models, and the layout in force for each.
    layout_votes: LayoutVotes,
    next_request: u64,
    /// The backoff of fetches whose snapshots could not be anchored, in a row (`attempts` is
    /// zero once one is anchored).
    unanchored: Backoff,
    /// The backoff of the master's HTTP side failing in a row (fetches and verification rounds
    /// that failed or timed out); `attempts` is zero once it answers.
    http_backoff: Backoff,
    counters: Counters,
    /// A time at or after which every object the index holds was present at the master (see
    /// [`Counters::unconfirmed_ms`]); meaningless while the index is empty.
    confirmed_at: Instant,
    /// The latest time an input carried.
    latest: Instant,
    /// What queries read, shared with query threads (see [`crate::reader`]).
    reader: Arc<Reader>,
    /// The HA leader machine, when the session follows a cluster's leader.
    leader: Option<Leader>,
    /// The last status read said the publisher is off.
    events_disabled: bool,
}

impl Session {
    /// Makes a session; with a configured endpoint, the first [`Session::handle_timeout`] asks
    /// to connect.
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
            tracker: SequenceTracker::new(config.reorder),
            link: Link::Down { retry_at },
            stream_start: None,
            anchor: None,
            proof: None,
            backoff: Backoff::new(config.seed),
            endpoint,
            health: Health::Disconnected,
            resync: Resync::Idle,
            verify: Verify::idle(),
            workers: BTreeMap::new(),
            layout_votes: LayoutVotes::new(),
            next_request: 1,
            unanchored: Backoff::new(config.seed ^ 0x5bd1_e995),
            http_backoff: Backoff::new(config.seed ^ 0x6874_7470),
            counters: Counters::default(),
            confirmed_at: Instant::ZERO,
            latest: Instant::ZERO,
            reader,
            leader: config.leader.map(Leader::new),
            events_disabled: false,
            config,
        })
    }

    /// Returns the configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Returns the health.
    pub fn health(&self) -> Health {
        self.health
    }

    /// Returns the event endpoint in use (configured, or chosen from worker metadata).
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Returns the sequence of the last batch applied from the stream (`None` after a clear
    /// until the next batch).
    pub fn last_applied_seq(&self) -> Option<Seq> {
        self.tracker.last_applied()
    }

    /// Returns the session's read view: queries through it never wait for the session's
    /// writer (see [`crate::reader`]). The session writes into it as it changes.
    pub fn reader(&self) -> Arc<Reader> {
        Arc::clone(&self.reader)
    }

    /// Returns the index (read only).
    pub fn index(&self) -> &Index {
        &self.index
    }

    /// Returns every counter and gauge, with [`Counters::unconfirmed_ms`] as of the latest time
    /// any input carried (see [`Session::counters_at`] for another time).
    pub fn counters(&self) -> Counters {
        self.counters_at(self.latest)
    }

    /// Returns every counter and gauge, with [`Counters::unconfirmed_ms`] as of `now`.
    pub fn counters_at(&self, now: Instant) -> Counters {
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
        c.held_batches = self.tracker.held_count() as u64;
        c.buffered_batches = match &self.resync {
            Resync::Fetching { batches, .. } => *batches as u64,
            _ => 0,
        };
        c.unconfirmed_ms = self.confirmed_at().map_or(0, |at| {
            u64::try_from(now.saturating_duration_since(at).as_millis()).unwrap_or(u64::MAX)
        });
        let (queries, hit_pages) = self.reader.counted();
        c.queries = queries as u64;
        c.hit_pages = hit_pages as u64;
        if let Some(info) = self.leader() {
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
    /// present at the master; `None` while the index is empty (trivially confirmed). See
    /// [`Counters::unconfirmed_ms`] for what confirms an object.
    pub fn confirmed_at(&self) -> Option<Instant> {
        (self.index.object_count() > 0).then_some(self.confirmed_at)
    }

    /// Returns when [`Session::handle_timeout`] must next be called; `None` when nothing timed is
    /// pending.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.link.poll_timeout(),
            self.tracker.poll_timeout(),
            self.resync.poll_timeout(),
            self.verify.poll_timeout(),
            self.proof.and_then(|p| p.poll_timeout()),
            self.leader.as_ref().and_then(Leader::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Hands over one input (see [`Input`] for each): the one way into the session. Every
    /// returned effect MUST be executed (commands) or may be logged (reports), in order.
    pub fn handle(&mut self, now: Instant, input: Input<'_>) -> Effects {
        let fx = self.dispatch(now, input);
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
            Input::Restart => {
                self.on_restart(now);
                Effects::new()
            }
            Input::Clear => self.on_clear(now),
            Input::Worker { worker, info } => self.on_worker(now, worker, info),
            Input::Snapshot {
                request,
                watermark,
                lines,
            } => self.handle_snapshot(now, request, watermark, lines),
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
                self.handle_verify_result(now, request, results.iter().copied())
            }
            Input::VerifyFailed { request } => self.on_verify_failed(now, request),
            Input::LeaderView(view) => self.on_leader_view(now, view),
            Input::LeaderStatus { request, status } => self.on_leader_status(now, request, status),
        }
    }

    /// Does whatever is due at `now`; early calls do nothing (shortcut for [`Input::Timeout`]).
    pub fn handle_timeout(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Timeout)
    }

    fn on_timeout(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        // Each sub-machine's timer, in this order: the connection, the leader, the reorder
        // window, the snapshot's status point, the resync, verification.
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
        while let Some(loss) = self.tracker.handle_timeout(now) {
            self.reorder_loss(now, loss, &mut fx);
        }
        if self.proof.is_some_and(|p| p.handle_timeout(now)) {
            // The stream did not reach the snapshot's status point in time: the snapshot may be
            // of another run of the master.
            self.forget(now, ClearReason::Unproven, &mut fx);
        }
        match self.resync.handle_timeout(now) {
            Some(ResyncDue::FetchTimedOut) => {
                self.resync_failed(now, ResyncFailure::Timeout, &mut fx);
            }
            Some(ResyncDue::Retry) => self.start_resync(now, &mut fx),
            None => {}
        }
        match self.verify.handle_timeout(now) {
            Some(VerifyDue::RoundTimedOut) => self.schedule_verify_after_failure(now),
            Some(VerifyDue::Round) => self.start_verify(now, &mut fx),
            None => {}
        }
        self.update_health(&mut fx);
        fx
    }

    /// Asks to connect again at `now` after [`Session::handle_stopped`] (backoff reset; shortcut
    /// for [`Input::Restart`], which has no effects).
    pub fn restart(&mut self, now: Instant) {
        let fx = self.handle(now, Input::Restart);
        debug_assert!(fx.is_empty(), "a restart only schedules");
    }

    fn on_restart(&mut self, now: Instant) {
        self.see(now);
        self.backoff.attempts = 0;
        if self.endpoint.is_some() {
            self.link = Link::Down {
                retry_at: Some(now),
            };
        }
    }

    /// Forgets every page now (for example when an operator asks). The next batch is a silent
    /// baseline, unless it is from before the clear (see [`crate::sequence`]'s fence). Shortcut
    /// for [`Input::Clear`].
    pub fn clear(&mut self, now: Instant) -> Effects {
        self.handle(now, Input::Clear)
    }

    fn on_clear(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.reset_stream();
        self.forget(now, ClearReason::Requested, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Forgets what the stream taught the index, and starts a resync when that is on.
    fn forget(&mut self, now: Instant, reason: ClearReason, fx: &mut Effects) {
        let (pages, objects) = self.index.clear();
        self.verify.sweep = None;
        self.proof = None;
        self.anchor = None;
        let counter = match reason {
            ClearReason::Gap => &mut self.counters.clears_gap,
            ClearReason::Restart => &mut self.counters.clears_restart,
            ClearReason::Disconnected | ClearReason::Reconnected => {
                &mut self.counters.clears_disconnected
            }
            ClearReason::EndpointChanged | ClearReason::LeaderChanged => {
                &mut self.counters.clears_endpoint
            }
            ClearReason::UnreadableRemoval => &mut self.counters.clears_unreadable_removal,
            ClearReason::Undecodable => &mut self.counters.clears_undecodable,
            ClearReason::Unproven => &mut self.counters.clears_unproven,
            ClearReason::StaleBatch => &mut self.counters.clears_stale_batch,
            ClearReason::Requested => &mut self.counters.clears_requested,
            ClearReason::Stale => &mut self.counters.clears_stale,
            ClearReason::PublisherCleared => &mut self.counters.publisher_clears,
        };
        *counter += 1;
        fx.push(Report::Cleared {
            reason,
            pages,
            objects,
        });
        let connected = matches!(self.link, Link::Up { .. });
        if connected
            && matches!(
                reason,
                ClearReason::Gap
                    | ClearReason::Restart
                    | ClearReason::UnreadableRemoval
                    | ClearReason::Undecodable
                    | ClearReason::Unproven
                    | ClearReason::StaleBatch
                    | ClearReason::Requested
                    | ClearReason::Stale
            )
        {
            self.start_resync(now, fx);
        } else if !connected {
            self.resync = Resync::Idle;
        }
    }

    /// Notes the time an input carried.
    fn see(&mut self, now: Instant) {
        self.latest = self.latest.max(now);
    }

    fn update_health(&mut self, fx: &mut Effects) {
        let health = match self.link {
            _ if self.events_disabled => Health::EventsDisabled,
            Link::Down { .. } => Health::Disconnected,
            Link::Connecting { .. } => Health::Connecting,
            Link::Up { .. } => match self.resync {
                Resync::Idle if !self.is_unproven() => Health::Live,
                _ => Health::Recovering,
            },
        };
        if health != self.health {
            fx.push(Report::HealthChanged {
                from: self.health,
                to: health,
            });
            self.health = health;
            if health == Health::Live {
                if let Some(leader) = &mut self.leader {
                    leader.note_live(self.latest);
                }
            }
        }
        self.publish_query_state();
    }

    /// Publishes the health and whether the last snapshot is unproven to the reader. Called
    /// at the end of every input and, where queries must start to miss, before the index
    /// changes that depend on it.
    fn publish_query_state(&self) {
        self.reader.publish(self.health, self.is_unproven());
    }
}
