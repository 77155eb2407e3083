//! The session: the sans-IO machine a transport drives.
//!
//! A [`Session`] owns the index, the stream's sequence tracker, the connection lifecycle with
//! its backoff, the worker directory, resynchronisation and verification. It reads no clock and
//! does no IO: the driver hands it messages and times, and executes the [`Effect`]s it returns.
//!
//! # The driving loop
//! ```text
//! loop {
//!     deadline = session.poll_timeout()            // None: nothing timed is pending
//!     wait until a message arrives, an answer comes back, or the deadline passes
//!     message  -> session.feed(now, &frames)
//!     socket   -> session.handle_connected(now) / handle_disconnected(now)
//!     HTTP     -> session.handle_snapshot(..) / handle_snapshot_failed(..) / handle_verify_result(..)
//!     deadline -> session.handle_timeout(now)
//!     execute every returned Effect, in order
//! }
//! ```
//! Queries ([`Session::query`]) take `&self` and may run at any time between these calls.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicUsize, Ordering};
use core::time::Duration;

use crate::effect::{ClearReason, Effect, Effects, Health, ResyncFailure, StrayReason};
use crate::error::{ConfigError, QueryError};
use crate::frame::{decode, Batch, EventKind, FrameError, Seq};
use crate::hash::PageHashes;
use crate::index::{Index, IndexConfig, DEFAULT_TENANT};
use crate::layout::Layout;
use crate::leader::{
    Leader, LeaderConfig, LeaderInfo, LeaderStatus, LeaderView, StatusStep, ViewStep,
};
use crate::metrics::Counters;
use crate::query::{Hits, Lookup, Pages, QueryPlan, Tokens};
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

impl From<Seq> for Watermark {
    fn from(seq: Seq) -> Watermark {
        Watermark { seq, events: None }
    }
}

/// A snapshot's status point that the stream has not passed yet: until it does, the snapshot may
/// be of another run of the master than the stream (a restart nobody saw between the two).
#[derive(Clone, Copy, Debug)]
struct Proof {
    /// The master's stream position when the snapshot was read.
    at: Watermark,
    /// Set once the stream has begun short of the point: queries miss until it is passed, and
    /// at this time the snapshot counts as unproven.
    deadline: Option<Instant>,
}

/// What a batch says about a pending [`Proof`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ProofCheck {
    /// It is before the status point and consistent with it.
    Pending,
    /// It is the first batch after the point and runs on from it.
    Proven,
    /// It contradicts the point: the snapshot and the stream are of different runs.
    Broken,
}

impl Proof {
    /// Checks a batch with sequence `seq` and event ids `first..=last` against the point.
    ///
    /// Event ids count the master's published events from 1, so the status's `events` is the
    /// last id it gave: a batch before the point ends at or below it (at it: every event
    /// published before the status was read has arrived, and the sequences after were dropped
    /// events, which carry none); the batch at the point ends exactly at it; the first batch
    /// after the point starts right after it.
    fn check(&self, seq: Seq, first: Option<u64>, last: Option<u64>) -> ProofCheck {
        use core::cmp::Ordering::{Equal, Greater, Less};
        let events = self.at.events;
        match seq.cmp(&self.at.seq) {
            Less => match (events, last) {
                (Some(e), Some(l)) if l > e => ProofCheck::Broken,
                (Some(e), Some(l)) if l == e => ProofCheck::Proven,
                _ => ProofCheck::Pending,
            },
            Equal => match (events, last) {
                (Some(e), Some(l)) if l != e => ProofCheck::Broken,
                _ => ProofCheck::Proven,
            },
            Greater => match (events, first) {
                (Some(e), Some(f)) if e.checked_add(1) != Some(f) => ProofCheck::Broken,
                _ => ProofCheck::Proven,
            },
        }
    }
}

/// Reconnection timing: exponential backoff with jitter, reset after a healthy period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The delay before the first retry.
    pub initial: Duration,
    /// The longest delay.
    pub max: Duration,
    /// A connection that lasted this long resets the backoff.
    pub reset_after: Duration,
    /// How long a connection may take before it counts as failed.
    pub connect_timeout: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(10),
            reset_after: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
        }
    }
}

/// Resynchronisation from the master's key list after loss and at every (re)connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResyncConfig {
    /// The most live batches buffered while the snapshot is fetched.
    pub max_buffered_batches: usize,
    /// The most payload bytes buffered while the snapshot is fetched.
    pub max_buffered_bytes: usize,
    /// How long the driver may take to answer a fetch.
    pub fetch_timeout: Duration,
    /// How long to wait before trying again after a failure.
    pub retry_after: Duration,
}

impl Default for ResyncConfig {
    fn default() -> Self {
        ResyncConfig {
            max_buffered_batches: 65_536,
            max_buffered_bytes: 256 << 20,
            fetch_timeout: Duration::from_secs(10),
            retry_after: Duration::from_secs(1),
        }
    }
}

/// Periodic verification of present keys against the master, which bounds how long an object
/// removed without an event can stay a hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyConfig {
    /// Time between rounds.
    pub interval: Duration,
    /// Keys checked per round.
    pub sample: usize,
    /// How long the driver may take to answer.
    pub timeout: Duration,
    /// A round that finds at least this percentage of its keys stale clears the index and
    /// starts a full resync (when resync is on): the keys it did not sample are as doubtful,
    /// and a snapshot only adds.
    pub resync_stale_percent: u8,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            interval: Duration::from_secs(5),
            sample: 1024,
            timeout: Duration::from_secs(5),
            resync_stale_percent: 10,
        }
    }
}

/// A layout for one model (or the default layout, with no model).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelLayout {
    /// The served model name; `None` for the default layout.
    pub model: Option<String>,
    /// The layout.
    pub layout: Layout,
}

/// Everything a session is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The event endpoint; when set it wins over what workers advertise.
    pub endpoint: Option<String>,
    /// The topic subscribed to; the Mooncake master sends an empty one.
    pub topic: Vec<u8>,
    /// Configured layouts; these win over advertised ones.
    pub layouts: Vec<ModelLayout>,
    /// Index limits.
    pub index: IndexConfig,
    /// How much reordering the transport can produce (none over ZeroMQ).
    pub reorder: ReorderConfig,
    /// Reconnection timing.
    pub backoff: BackoffConfig,
    /// Resynchronisation from the master's HTTP side; `None`: loss can only clear.
    pub resync: Option<ResyncConfig>,
    /// Verification against silent removals; `None`: off.
    pub verify: Option<VerifyConfig>,
    /// Emit [`Effect::Page`] for pages that become complete or incomplete under the layouts.
    pub page_deltas: bool,
    /// Seeds the backoff jitter and the index's hashing.
    pub seed: u64,
    /// Follow the leader of a Mooncake HA cluster (see [`crate::leader`]); `endpoint` is then
    /// a template whose host is replaced by the leader's, and nothing connects until
    /// [`Session::handle_leader_view`] names a leader that serves. `None`: one fixed master.
    pub leader: Option<LeaderConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            endpoint: None,
            topic: Vec::new(),
            layouts: Vec::new(),
            index: IndexConfig::default(),
            reorder: ReorderConfig::default(),
            backoff: BackoffConfig::default(),
            resync: None,
            verify: None,
            page_deltas: false,
            seed: 0x0123_4567_89ab_cdef,
            leader: None,
        }
    }
}

/// What one worker advertises about itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The KV event endpoint it was told about, if any.
    pub event_endpoint: Option<String>,
    /// The model it serves.
    pub model: Option<String>,
    /// Its object layout, if it advertises one.
    pub layout: Option<Layout>,
}

/// The connection's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// Not connected; connect at the given time (never, without an endpoint).
    Down { retry_at: Option<Instant> },
    /// A connection was asked for.
    Connecting { deadline: Instant },
    /// Connected since.
    Up { since: Instant },
}

/// A batch kept for later: its sequence frame and payload, and when it arrived.
#[derive(Clone, Debug)]
struct HeldBatch {
    seq: [u8; 8],
    payload: Vec<u8>,
    /// When the session received it: what it stores was present at the master then.
    arrived: Instant,
}

impl HeldBatch {
    fn copy(arrived: Instant, frames: &[&[u8]]) -> HeldBatch {
        let mut seq = [0u8; 8];
        seq.copy_from_slice(frames[1]);
        HeldBatch {
            seq,
            payload: frames[2].to_vec(),
            arrived,
        }
    }

    fn decode(&self) -> Batch<'_> {
        decode(&[&[], &self.seq, &self.payload]).expect("a kept batch decoded when it arrived")
    }
}

/// The resynchronisation's state.
// One per session, moved only when a resync begins or ends: the size of `Fetching` costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
enum Resync {
    Idle,
    Fetching {
        request: u64,
        deadline: Instant,
        /// When the fetch was asked for: the master's key list is read after it.
        asked_at: Instant,
        /// What the completed resync confirms: `asked_at`, or the index's confirmation when it
        /// held objects already (a snapshot only adds), lowered by anything older added since.
        confirms: Instant,
        /// Live batches applied since the fetch was asked for, and their payload bytes (bounded:
        /// what they touched is remembered in `seen` until the resync ends).
        batches: usize,
        bytes: usize,
        /// The first sequence of the stream when the fetch was asked for, if it had begun.
        stream_at_request: Option<Seq>,
        /// Keys applied so far, once the driver began handing the snapshot over.
        applied: Option<usize>,
        /// The last live event of each default-tenant key since the fetch was asked for
        /// (`true`: stored): a snapshot key whose last live event removed it is not applied,
        /// so that no query between chunks sees it again.
        ///
        /// Keyed by [`key_checksum`], not by the key: no allocation per live event, and a cheap
        /// drop when the resync ends (under the driver's lock). A removal is sticky (`false`
        /// stays), so two keys with one checksum only keep a snapshot key out: a miss, never a
        /// hit.
        seen: BTreeMap<u64, bool>,
        /// A live `cleared` of the default tenant came since the fetch was asked for.
        cleared: bool,
        /// The stream's last sequence and event id when the fetch was asked for.
        before: Option<(Seq, Option<u64>)>,
        /// Each batch applied live since the fetch was asked for: its sequence and first and
        /// last event ids, to check the snapshot's status point against.
        since: Vec<(Seq, Option<u64>, Option<u64>)>,
        /// Which of the snapshot's lines become keys.
        lines: LineFilter,
    },
    Waiting {
        retry_at: Instant,
    },
    /// A snapshot could not be anchored to the stream: fetch again once a batch has arrived.
    AwaitingStream,
}

/// Verification: the next round, the one in flight, and the sweep in progress.
#[derive(Debug)]
struct Verify {
    next_at: Option<Instant>,
    in_flight: Option<Round>,
    /// The sweep in progress, if every round of it so far was answered in full.
    sweep: Option<Sweep>,
}

/// A verification sweep in progress (see [`crate::index::Sampled`]).
#[derive(Clone, Copy, Debug)]
struct Sweep {
    /// When it began, lowered to the arrival of anything older added since: at its end, every
    /// object the index holds was present at the master at or after this.
    began: Instant,
    /// Its rounds passed objects of another tenant, which verification does not sample.
    other_tenants: bool,
}

impl Verify {
    fn idle() -> Verify {
        Verify {
            next_at: None,
            in_flight: None,
            sweep: None,
        }
    }
}

/// A verification round asked of the driver.
#[derive(Debug)]
struct Round {
    request: u64,
    /// The index's write stamp when the keys were sampled.
    stamp: u64,
    deadline: Instant,
    /// How many keys were asked about, and their [`key_checksum`]: a full answer names each.
    keys: usize,
    checksum: u64,
    /// A sweep ended within this round, whether the next began in it, and whether it passed
    /// objects of another tenant (see [`crate::index::Sampled`]).
    ended_sweep: bool,
    began_next: bool,
    other_tenants: bool,
    /// When the keys were sampled, lowered to the arrival of anything older added since: the
    /// next sweep began then if it began in this round.
    sampled_at: Instant,
}

/// The sans-IO machine a transport drives (see the module docs for the loop).
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
    attempts: u32,
    endpoint: Option<String>,
    health: Health,
    resync: Resync,
    verify: Verify,
    workers: BTreeMap<String, WorkerInfo>,
    advertised_layouts: BTreeMap<String, Layout>,
    rng: u64,
    next_request: u64,
    counters: Counters,
    /// A time at or after which every object the index holds was present at the master (see
    /// [`Counters::unconfirmed_ms`]); meaningless while the index is empty.
    confirmed_at: Instant,
    /// The latest time an input carried.
    latest: Instant,
    queries: AtomicUsize,
    hit_pages: AtomicUsize,
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
            attempts: 0,
            endpoint,
            health: Health::Disconnected,
            resync: Resync::Idle,
            verify: Verify::idle(),
            workers: BTreeMap::new(),
            advertised_layouts: BTreeMap::new(),
            rng: config.seed ^ 0x9e37_79b9_7f4a_7c15,
            next_request: 1,
            counters: Counters::default(),
            confirmed_at: Instant::ZERO,
            latest: Instant::ZERO,
            queries: AtomicUsize::new(0),
            hit_pages: AtomicUsize::new(0),
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

    /// Returns where the session is with the HA cluster's leader; `None` when it follows one
    /// fixed master.
    pub fn leader(&self) -> Option<LeaderInfo> {
        self.leader.as_ref().map(Leader::info)
    }

    /// Hands over what HA discovery says about the leader: every value the driver reads of the
    /// master view key (watched or polled), with its version (see [`crate::leader`]).
    ///
    /// Another incarnation than the one followed forgets at once, drops the connection and
    /// asks to check the new leader ([`Effect::CheckLeader`]); nothing connects before it
    /// serves. The same incarnation again changes nothing. Without HA configured, ignored.
    pub fn handle_leader_view(&mut self, now: Instant, view: &LeaderView) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let Some(leader) = &mut self.leader else {
            return fx;
        };
        if let ViewStep::Changed { check } = leader.handle_view(now, view) {
            if self.endpoint.take().is_some() || !matches!(self.link, Link::Down { .. }) {
                fx.push(Effect::Disconnect);
            }
            self.link = Link::Down { retry_at: None };
            self.reset_stream();
            self.resync = Resync::Idle;
            self.verify = Verify::idle();
            self.events_disabled = false;
            self.attempts = 0;
            if self.index.object_count() > 0 {
                // The new leader restores its objects without events: only a resync from it
                // once it serves can tell which are there.
                self.forget(now, ClearReason::LeaderChanged, &mut fx);
            }
            if let Some(request) = check {
                self.check_leader(request, &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Hands over the answer to the [`Effect::CheckLeader`] `request`. A leader that serves, at
    /// the address discovery named, with a master view no older than any followed, whose
    /// status answers, is followed: [`Effect::UseMaster`], then [`Effect::Connect`] to the
    /// endpoint with its host. Otherwise it is checked again later; a status saying the
    /// publisher is off is [`Health::EventsDisabled`].
    pub fn handle_leader_status(
        &mut self,
        now: Instant,
        request: u64,
        status: &LeaderStatus,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let step = match &mut self.leader {
            Some(leader) => leader.handle_status(now, request, status),
            None => StatusStep::Stale,
        };
        match step {
            StatusStep::Stale => self.counters.stale_answers += 1,
            StatusStep::NotYet => {}
            StatusStep::Disabled => {
                self.counters.events_disabled += 1;
                self.events_disabled = true;
            }
            StatusStep::Follow { host } => {
                self.events_disabled = false;
                self.endpoint = self
                    .config
                    .endpoint
                    .as_deref()
                    .and_then(|e| crate::leader::replace_host(e, &host));
                fx.push(Effect::UseMaster { host });
                self.attempts = 0;
                self.connect(now, &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the fetch `request`'s `/kv_events/status` said `"enabled":false`: the
    /// master publishes nothing, so the index can learn nothing true from it. The health is
    /// [`Health::EventsDisabled`] until a later status says otherwise (the fetch is retried).
    pub fn handle_events_disabled(&mut self, now: Instant, request: u64) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match &self.resync {
            Resync::Fetching {
                request: current, ..
            } if *current == request => {
                self.counters.events_disabled += 1;
                self.events_disabled = true;
                self.resync_failed(now, ResyncFailure::EventsDisabled, &mut fx);
            }
            _ => self.counters.stale_answers += 1,
        }
        self.update_health(&mut fx);
        fx
    }

    fn check_leader(&mut self, request: u64, fx: &mut Effects) {
        if let Some(host) = self.leader.as_ref().and_then(Leader::candidate_host) {
            fx.push(Effect::CheckLeader {
                request,
                host: host.into(),
            });
        }
    }

    /// Returns the sequence of the last batch applied from the stream (`None` after a clear
    /// until the next batch).
    pub fn last_applied_seq(&self) -> Option<Seq> {
        self.tracker.last_applied()
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
        c.queries = self.queries.load(Ordering::Relaxed) as u64;
        c.hit_pages = self.hit_pages.load(Ordering::Relaxed) as u64;
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
        let link = match self.link {
            Link::Down { retry_at } => retry_at,
            Link::Connecting { deadline } => Some(deadline),
            Link::Up { .. } => None,
        };
        let resync = match &self.resync {
            Resync::Idle => None,
            Resync::Fetching { deadline, .. } => Some(*deadline),
            Resync::Waiting { retry_at } => Some(*retry_at),
            Resync::AwaitingStream => None,
        };
        let verify = match &self.verify.in_flight {
            Some(round) => Some(round.deadline),
            None => self.verify.next_at,
        };
        let proof = self.proof.and_then(|p| p.deadline);
        let leader = self.leader.as_ref().and_then(Leader::poll_timeout);
        [
            link,
            self.tracker.poll_timeout(),
            resync,
            verify,
            proof,
            leader,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Does whatever is due at `now`; early calls do nothing.
    pub fn handle_timeout(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match self.link {
            Link::Down { retry_at: Some(at) } if at <= now => self.connect(now, &mut fx),
            Link::Connecting { deadline } if deadline <= now => {
                fx.push(Effect::Disconnect);
                self.link_lost(now, &mut fx);
            }
            _ => {}
        }
        if let Some(request) = self.leader.as_mut().and_then(|l| l.handle_timeout(now)) {
            self.check_leader(request, &mut fx);
        }
        while let Some(loss) = self.tracker.handle_timeout(now) {
            self.reorder_loss(now, loss, &mut fx);
        }
        if self
            .proof
            .and_then(|p| p.deadline)
            .is_some_and(|at| at <= now)
        {
            // The stream did not reach the snapshot's status point in time: the snapshot may be
            // of another run of the master.
            self.forget(now, ClearReason::Unproven, &mut fx);
        }
        match self.resync {
            Resync::Fetching { deadline, .. } if deadline <= now => {
                self.resync_failed(now, ResyncFailure::Timeout, &mut fx);
            }
            Resync::Waiting { retry_at } if retry_at <= now => self.start_resync(now, &mut fx),
            _ => {}
        }
        match &self.verify.in_flight {
            Some(round) if round.deadline <= now => {
                self.verify.in_flight = None;
                self.verify.sweep = None;
                self.schedule_verify(now);
            }
            None if self.verify.next_at.is_some_and(|at| at <= now) => {
                self.start_verify(now, &mut fx)
            }
            _ => {}
        }
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the subscriber connected to the endpoint last asked for.
    pub fn handle_connected(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.link_up(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the subscriber's connection was lost or failed. Events may have been missed:
    /// the index forgets, and a reconnect is scheduled.
    pub fn handle_disconnected(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        if !matches!(self.link, Link::Down { .. }) || self.index.page_count() > 0 {
            self.link_lost(now, &mut fx);
        }
        self.update_health(&mut fx);
        fx
    }

    /// Feeds one multipart message (`[topic, seq, payload]`). Nothing of `frames` is kept
    /// borrowed.
    pub fn feed(&mut self, now: Instant, frames: &[&[u8]]) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        if frames.len() != 3 {
            self.counters.stray_frame_count += 1;
            fx.push(Effect::Stray {
                reason: StrayReason::FrameCount(frames.len()),
            });
            return fx;
        }
        if frames[0] != self.config.topic.as_slice() {
            self.counters.stray_topic += 1;
            fx.push(Effect::Stray {
                reason: StrayReason::Topic,
            });
            return fx;
        }
        if self.leader.as_ref().is_some_and(|l| !l.is_following()) {
            // Between a leader change and following the new leader, a batch can only be the old
            // leader's: its stream is not the one the index will follow.
            self.counters.fenced_batches += 1;
            return fx;
        }
        let batch = match decode(frames) {
            Ok(batch) => batch,
            Err(error @ FrameError::SeqLength { .. }) => {
                // No sequence to place it by: count it and drop it, as a stray.
                self.counters.malformed_seq += 1;
                fx.push(Effect::Malformed { error });
                return fx;
            }
            Err(error) => {
                // A batch of this stream (right topic, readable sequence) whose events cannot
                // be read: its sequence was consumed and what it changed is unknown. That is
                // loss: forget, and start the stream over from the next batch.
                self.counters.malformed_payload += 1;
                fx.push(Effect::Malformed { error });
                self.reset_stream();
                self.forget(now, ClearReason::Undecodable, &mut fx);
                self.update_health(&mut fx);
                return fx;
            }
        };
        if let Link::Connecting { .. } = self.link {
            self.link_up(now, &mut fx);
        }
        let seq = batch.seq;
        let fingerprint = Fingerprint::of(&batch);
        let continuing = self.tracker.last_applied().is_some();
        match self.tracker.observe(seq, fingerprint) {
            Verdict::Apply => {
                if !continuing {
                    self.begin_stream(now, seq, &mut fx);
                }
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
            Verdict::Duplicate => {
                self.counters.duplicates += 1;
                fx.push(Effect::Duplicate { seq });
            }
            Verdict::Late => {
                self.counters.late += 1;
                fx.push(Effect::Late { seq });
            }
            Verdict::Stale => self.stale_batch(now, seq, &mut fx),
            Verdict::Hold => {
                self.counters.held += 1;
                if let Some(loss) =
                    self.tracker
                        .hold(now, seq, fingerprint, HeldBatch::copy(now, frames))
                {
                    self.reorder_loss(now, loss, &mut fx);
                }
            }
            Verdict::Gap { expected, .. } => {
                self.note_gap(expected, seq, &mut fx);
                self.begin_stream(now, seq, &mut fx);
                self.forget(now, ClearReason::Gap, &mut fx);
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
            Verdict::Restart { last } => {
                self.counters.restarts += 1;
                fx.push(Effect::Restart {
                    last,
                    received: seq,
                });
                // The old run's position means nothing to the new one (its resync must not be
                // checked against it); what it applied fences its late batches.
                self.reset_stream();
                self.begin_stream(now, seq, &mut fx);
                self.forget(now, ClearReason::Restart, &mut fx);
                self.apply_in_order(now, &batch, fingerprint, frames[2], &mut fx);
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Hands over the master's key list (default tenant) for the fetch `request`, one item per
    /// line exactly as the master wrote it (see [`crate::snapshot_lines`]), with the
    /// [`Watermark`] read just before it, or `None` when the master does not tell.
    ///
    /// The snapshot holds only if the live stream covers every batch after it, from the same run
    /// of the master:
    /// - the stream must begin at or before `watermark.seq + 1`; a stream that begins later lost
    ///   batches between the snapshot and the subscription taking effect: that is a gap, and the
    ///   session fetches again;
    /// - the status point must agree with the stream: the master's counters only grow within
    ///   one run, so a stream that was already past the watermark when the fetch was asked for,
    ///   a batch at or before it with a later event id than `watermark.events`, or a first batch
    ///   after it that does not start at event id `watermark.events + 1`, is another run: the
    ///   session forgets and fetches again;
    /// - until the stream has passed the status point, the index has not caught up with the
    ///   snapshot: the health stays [`Health::Recovering`] and queries miss, and if the point is
    ///   not passed within the fetch timeout the session forgets and fetches again. (With no
    ///   batch since the connection, an idle master, the snapshot is live at once and its point
    ///   is checked by the first batch.)
    ///
    /// Without a watermark, a snapshot asked for before any batch arrived cannot be anchored; the
    /// session fetches again once the stream has begun. Lines that are not exactly keys are never
    /// applied (see [`crate::snapshot`]).
    pub fn handle_snapshot<I>(
        &mut self,
        now: Instant,
        request: u64,
        watermark: Option<Watermark>,
        lines: I,
    ) -> Effects
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let mut fx = self.begin_snapshot(now, request, watermark);
        if self.snapshot_keys(request, lines).is_some() {
            fx.0.extend(self.finish_snapshot(now, request).0);
        }
        fx
    }

    /// Begins handing over the snapshot of `request` in chunks (see [`Session::handle_snapshot`]
    /// for the watermark). Then call [`Session::snapshot_keys`] any number of times and
    /// [`Session::finish_snapshot`] once; queries and live batches may come in between, which
    /// lets a driver release its lock between chunks of a large key list.
    pub fn begin_snapshot(
        &mut self,
        now: Instant,
        request: u64,
        watermark: Option<Watermark>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let (stream_at_request, batches_since) = match &self.resync {
            Resync::Fetching {
                request: current,
                stream_at_request,
                applied: None,
                since,
                ..
            } if *current == request => (*stream_at_request, !since.is_empty()),
            _ => {
                self.counters.stale_answers += 1;
                return fx;
            }
        };
        // The master's status answered and did not say its publisher is off.
        self.events_disabled = false;
        let check = watermark.map(|w| (w, self.check_status_point(w)));
        if let Some((_, ProofCheck::Broken)) = check {
            // The master's counters went back, or its event ids disagree with the stream's:
            // the snapshot and the stream are of different runs of the master.
            self.counters.restarts += 1;
            self.counters.run_mismatches += 1;
            self.resync = Resync::Idle;
            self.reset_stream();
            self.forget(now, ClearReason::Restart, &mut fx);
            self.update_health(&mut fx);
            return fx;
        }
        let max_first = watermark.map(|w| Seq(w.seq.0.saturating_add(1)));
        match (max_first, self.stream_start) {
            (Some(max_first), Some(start)) if start > max_first => {
                self.counters.unanchored_snapshots += 1;
                self.note_gap(max_first, start, &mut fx);
                self.resync = Resync::Idle;
                // The stream's beginning cannot be anchored to this master's counters (batches
                // were lost, or they are another run's, an idle restarted master's): the next
                // batch begins the stream anew, so that the next snapshot can be.
                self.reset_stream();
                self.forget(now, ClearReason::Gap, &mut fx);
            }
            (None, _) if stream_at_request.is_none() => {
                self.counters.unanchored_snapshots += 1;
                self.resync = Resync::AwaitingStream;
                if self.stream_start.is_some() {
                    // The stream began while this fetch was under way: a new one is anchored.
                    self.start_resync(now, &mut fx);
                }
            }
            (max_first, start) => {
                if let (Some(max_first), None) = (max_first, start) {
                    self.anchor = Some(max_first);
                }
                if let Some((at, ProofCheck::Pending)) = check {
                    // Queries miss until the stream passes the point, once a batch shows the
                    // stream short of it; with none since the fetch was asked for (an idle
                    // master), the next batch checks the point.
                    let timeout = self
                        .config
                        .resync
                        .map_or(Duration::ZERO, |r| r.fetch_timeout);
                    self.proof = Some(Proof {
                        at,
                        deadline: batches_since.then(|| now + timeout),
                    });
                }
                if let Resync::Fetching { applied, .. } = &mut self.resync {
                    *applied = Some(0);
                }
            }
        }
        self.update_health(&mut fx);
        fx
    }

    /// Checks a snapshot's status point against the stream as it stood when the fetch was asked
    /// for and against the batches applied since.
    fn check_status_point(&self, at: Watermark) -> ProofCheck {
        let Resync::Fetching { before, since, .. } = &self.resync else {
            return ProofCheck::Pending;
        };
        let proof = Proof { at, deadline: None };
        // The stream when the fetch was asked for: the status was read after it, so a stream
        // already past the point is another run (the master's counters only grow in one).
        let before = match *before {
            Some((seq, _)) if seq > at.seq => return ProofCheck::Broken,
            Some((seq, last)) => proof.check(seq, None, last),
            None => ProofCheck::Pending,
        };
        if before != ProofCheck::Pending {
            return before;
        }
        since
            .iter()
            .map(|&(seq, first, last)| proof.check(seq, first, last))
            .find(|c| *c != ProofCheck::Pending)
            .unwrap_or(ProofCheck::Pending)
    }

    /// Applies a chunk of the snapshot of `request`: lines of the key list (default tenant),
    /// one per item, exactly as the master wrote them (see [`crate::snapshot_lines`]); chunks
    /// MUST be handed over in order and split between lines. Only lines that are exactly keys
    /// become keys (see [`crate::snapshot`]). Returns how many keys it applied in all so far, or
    /// `None` when `request` is not being handed over (stale, refused by
    /// [`Session::begin_snapshot`]).
    pub fn snapshot_keys<I>(&mut self, request: u64, lines: I) -> Option<usize>
    where
        I: IntoIterator,
        I::Item: AsRef<[u8]>,
    {
        let asked_at = match &self.resync {
            Resync::Fetching {
                request: current,
                applied: Some(_),
                asked_at,
                ..
            } if *current == request => *asked_at,
            _ => return None,
        };
        // The master's key list was read after the fetch was asked for.
        self.note_evidence(asked_at);
        let Resync::Fetching {
            applied: Some(applied),
            seen,
            cleared,
            lines: filter,
            ..
        } = &mut self.resync
        else {
            return None;
        };
        let index = &mut self.index;
        for line in lines {
            filter.push(line.as_ref(), |key| {
                store_snapshot_key(index, seen, *cleared, applied, key)
            });
        }
        Some(*applied)
    }

    /// Ends the snapshot of `request`: the index is live again (once the stream has passed the
    /// snapshot's status point). The live batches since the fetch was asked for were applied as
    /// they came, and the snapshot's keys they touched were left to them: nothing is replayed, so
    /// the call is short (a driver holds its lock for it).
    pub fn finish_snapshot(&mut self, now: Instant, request: u64) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        let (batches, applied, confirms, odd, doubted) = match &mut self.resync {
            Resync::Fetching {
                request: current,
                batches,
                applied: Some(applied),
                confirms,
                seen,
                cleared,
                lines,
                ..
            } if *current == request => {
                let index = &mut self.index;
                lines.finish(|key| store_snapshot_key(index, seen, *cleared, applied, key));
                (*batches, *applied, *confirms, lines.odd, lines.doubted)
            }
            _ => {
                self.counters.stale_answers += 1;
                return fx;
            }
        };
        self.counters.snapshot_odd_lines += odd;
        self.counters.snapshot_doubted_lines += doubted;
        self.resync = Resync::Idle;
        // Every object is from the snapshot (read after the fetch was asked for) or from a batch
        // since, unless the index held objects before: then `confirms` is their confirmation.
        self.confirm(confirms);
        self.counters.snapshot_keys += applied as u64;
        self.counters.resyncs_completed += 1;
        fx.push(Effect::Resynced {
            keys: applied,
            replayed: batches,
        });
        self.emit_deltas(&mut fx);
        self.schedule_verify(now);
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the fetch `request` failed; it is retried later.
    pub fn handle_snapshot_failed(&mut self, now: Instant, request: u64) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match &self.resync {
            Resync::Fetching {
                request: current, ..
            } if *current == request => {
                self.resync_failed(now, ResyncFailure::Fetch, &mut fx);
            }
            _ => self.counters.stale_answers += 1,
        }
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the verification `request` failed; the next round comes after the interval.
    pub fn handle_verify_failed(&mut self, now: Instant, request: u64) -> Effects {
        self.see(now);
        match &self.verify.in_flight {
            Some(round) if round.request == request => {
                self.verify.in_flight = None;
                self.counters.verify_failures += 1;
                self.schedule_verify(now);
            }
            _ => self.counters.stale_answers += 1,
        }
        self.verify.sweep = None;
        Effects::new()
    }

    /// Hands over the master's answer to the verification `request`: each checked key and
    /// whether it exists. Keys found absent are removed unless their page changed since the keys
    /// were sampled.
    ///
    /// A round counts towards a sweep (see [`Counters::unconfirmed_ms`]) only when the answer
    /// names every key asked about, each once, and every key found absent left the index; keys
    /// the driver could not check MUST be left out, never reported present.
    pub fn handle_verify_result<'k, I>(&mut self, now: Instant, request: u64, results: I) -> Effects
    where
        I: IntoIterator<Item = (&'k str, bool)>,
    {
        self.see(now);
        let mut fx = Effects::new();
        let round = match self.verify.in_flight.take() {
            Some(round) if round.request == request => round,
            other => {
                self.verify.in_flight = other;
                self.verify.sweep = None;
                self.counters.stale_answers += 1;
                return fx;
            }
        };
        let (mut checked, mut stale, mut checksum, mut kept) = (0usize, 0usize, 0u64, false);
        let mut confirmed = false;
        for (key, exists) in results {
            checked += 1;
            checksum = checksum.wrapping_add(key_checksum(key));
            if exists {
                // A suspect the master still holds, read after its removal: present again.
                if self.index.confirm_suspect(DEFAULT_TENANT, key, round.stamp) && !confirmed {
                    self.note_evidence(round.sampled_at);
                    confirmed = true;
                }
            } else if self.index.drop_suspect(DEFAULT_TENANT, key) {
                // A suspect that went with its removal (an older publisher): already absent.
            } else {
                if self.index.remove_stale(DEFAULT_TENANT, key, round.stamp) {
                    stale += 1;
                } else {
                    // Absent at the master, yet kept because its page changed meanwhile.
                    kept |= self.index.contains_key(DEFAULT_TENANT, key);
                }
            }
        }
        self.end_round(
            &round,
            checked == round.keys && checksum == round.checksum && !kept,
        );
        self.counters.verify_rounds += 1;
        self.counters.verified_keys += checked as u64;
        self.counters.stale_keys_found += stale as u64;
        if stale > 0 {
            fx.push(Effect::StaleFound {
                keys: stale,
                checked,
            });
        }
        self.emit_deltas(&mut fx);
        let percent = self
            .config
            .verify
            .map_or(100, |v| usize::from(v.resync_stale_percent));
        if stale > 0 && stale * 100 >= percent.max(1) * checked && self.config.resync.is_some() {
            // The keys this round did not sample are as doubtful, and a snapshot only adds:
            // forget everything (queries miss until the snapshot is in) and resynchronise.
            self.forget(now, ClearReason::Stale, &mut fx);
        }
        self.schedule_verify(now);
        self.update_health(&mut fx);
        fx
    }

    /// Reports what a worker advertises (`None`: the worker is gone). A configured endpoint and
    /// configured layouts always win; disagreement among workers is reported, not resolved
    /// silently.
    pub fn handle_worker(
        &mut self,
        now: Instant,
        worker: &str,
        info: Option<WorkerInfo>,
    ) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        match info {
            Some(info) => {
                if let (Some(model), Some(layout)) = (&info.model, &info.layout) {
                    self.note_layout(worker, model, layout, &mut fx);
                }
                self.workers.insert(worker.into(), info);
            }
            None => {
                self.workers.remove(worker);
            }
        }
        self.choose_endpoint(now, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Reports that the driver stopped for good: the index forgets, nothing is scheduled, and the
    /// health is [`Health::Disconnected`] until a new endpoint or [`Session::handle_timeout`]
    /// after [`Session::restart`].
    pub fn handle_stopped(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.link = Link::Down { retry_at: None };
        self.reset_stream();
        self.verify = Verify::idle();
        if self.index.page_count() > 0 {
            self.forget(now, ClearReason::Requested, &mut fx);
        }
        self.resync = Resync::Idle;
        self.update_health(&mut fx);
        fx
    }

    /// Asks to connect again at `now` after [`Session::handle_stopped`] (backoff reset).
    pub fn restart(&mut self, now: Instant) {
        self.see(now);
        self.attempts = 0;
        if self.endpoint.is_some() {
            self.link = Link::Down {
                retry_at: Some(now),
            };
        }
    }

    /// Forgets every page now (for example when an operator asks). The next batch is a silent
    /// baseline, unless it is from before the clear (see [`crate::sequence`]'s fence).
    pub fn clear(&mut self, now: Instant) -> Effects {
        self.see(now);
        let mut fx = Effects::new();
        self.reset_stream();
        self.forget(now, ClearReason::Requested, &mut fx);
        self.update_health(&mut fx);
        fx
    }

    /// Returns the layout a lookup uses.
    pub fn layout_for(&self, model: Option<&str>) -> Result<&Layout, QueryError> {
        match model {
            Some(m) => self
                .config
                .layouts
                .iter()
                .find(|ml| ml.model.as_deref() == Some(m))
                .map(|ml| &ml.layout)
                .or_else(|| self.advertised_layouts.get(m))
                .ok_or(QueryError::UnknownModel),
            None => {
                if let Some(ml) = self.config.layouts.iter().find(|ml| ml.model.is_none()) {
                    return Ok(&ml.layout);
                }
                let mut all = self
                    .config
                    .layouts
                    .iter()
                    .map(|ml| &ml.layout)
                    .chain(self.advertised_layouts.values());
                match (all.next(), all.next()) {
                    (Some(only), None) => Ok(only),
                    _ => Err(QueryError::NoDefaultLayout),
                }
            }
        }
    }

    /// Answers how many leading pages of the lookup are fully present. Hashing stops at the first
    /// page that misses.
    pub fn query(&self, lookup: &Lookup<'_>) -> Result<Hits, QueryError> {
        self.answer(lookup, None)
    }

    /// Plans a lookup: how its tokens are hashed under the layout it resolves to. With the plan,
    /// a caller hashes outside any lock ([`QueryPlan::hashes`]) and then calls
    /// [`Session::probe`].
    pub fn plan(&self, lookup: &Lookup<'_>) -> Result<QueryPlan, QueryError> {
        let layout = self.layout_for(lookup.model)?;
        Ok(QueryPlan {
            page_size: layout.page_size,
            eagle: layout.eagle,
        })
    }

    /// Answers for page hashes computed under `plan` (`lookup.pages` names them; tokens are
    /// hashed here, as by [`Session::query_map`]), after checking that `plan` is still the
    /// lookup's: [`QueryError::PlanChanged`] if its layout changed since.
    ///
    /// A probe is not counted (a query may probe in several rounds): the caller reports the
    /// final answer once with [`Session::count_answer`].
    pub fn probe(
        &self,
        plan: QueryPlan,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        if self.plan(lookup)? != plan {
            return Err(QueryError::PlanChanged);
        }
        self.answer_uncounted(lookup, map)
    }

    /// Counts one query answered by probes (see [`Session::probe`]) in
    /// [`Counters::queries`] and [`Counters::hit_pages`].
    pub fn count_answer(&self, hits: &Hits) {
        self.queries.fetch_add(1, Ordering::Relaxed);
        self.hit_pages
            .fetch_add(hits.prefix_pages, Ordering::Relaxed);
    }

    /// Answers like [`Session::query`] and also fills `map[i]` with whether page `i` has every
    /// object of every pool; pages past the map's length are not examined.
    pub fn query_map(&self, lookup: &Lookup<'_>, map: &mut [bool]) -> Result<Hits, QueryError> {
        self.answer(lookup, Some(map))
    }

    fn answer(&self, lookup: &Lookup<'_>, map: Option<&mut [bool]>) -> Result<Hits, QueryError> {
        let hits = self.answer_uncounted(lookup, map)?;
        self.count_answer(&hits);
        Ok(hits)
    }

    fn answer_uncounted(
        &self,
        lookup: &Lookup<'_>,
        map: Option<&mut [bool]>,
    ) -> Result<Hits, QueryError> {
        let layout = self.layout_for(lookup.model)?;
        if self.is_unproven() {
            // The snapshot may be of another run of the master than the stream: claim nothing.
            if let Some(map) = map {
                map.fill(false);
            }
            let total = match lookup.pages {
                Pages::Hashes(hashes) => hashes.len(),
                Pages::Tokens {
                    tokens: Tokens::U32(t),
                    ..
                } => crate::hash::page_count(t.len(), layout.page_size, layout.eagle),
                Pages::Tokens {
                    tokens: Tokens::U64(t),
                    ..
                } => crate::hash::page_count(t.len(), layout.page_size, layout.eagle),
            };
            return Ok(Hits {
                prefix_pages: 0,
                total_pages: total,
                pages_checked: 0,
                memory_pages: 0,
                disk_only_pages: 0,
                trust: self.health,
            });
        }
        let (total, found) = match lookup.pages {
            Pages::Hashes(hashes) => (
                hashes.len(),
                self.index
                    .query(lookup.tenant, layout, hashes.iter().copied(), map),
            ),
            Pages::Tokens {
                tokens: Tokens::U32(t),
                namespace,
            } => {
                let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                (
                    pages.page_count(),
                    self.index.query(lookup.tenant, layout, pages, map),
                )
            }
            Pages::Tokens {
                tokens: Tokens::U64(t),
                namespace,
            } => {
                let pages = PageHashes::new(t, layout.page_size, layout.eagle, namespace);
                (
                    pages.page_count(),
                    self.index.query(lookup.tenant, layout, pages, map),
                )
            }
        };
        Ok(Hits {
            prefix_pages: found.prefix_pages,
            total_pages: total,
            pages_checked: found.pages_checked,
            memory_pages: found.memory_pages,
            disk_only_pages: found.disk_only_pages,
            trust: self.health,
        })
    }

    fn apply_in_order(
        &mut self,
        now: Instant,
        batch: &Batch<'_>,
        fp: Fingerprint,
        payload: &[u8],
        fx: &mut Effects,
    ) {
        self.check_proof(now, batch.seq, fp, fx);
        self.apply_batch(now, now, batch, fp, payload.len(), fx);
        self.tracker.applied(batch.seq, fp);
        self.drain_held(now, fx);
        if matches!(self.resync, Resync::AwaitingStream) {
            self.start_resync(now, fx);
        }
    }

    fn drain_held(&mut self, now: Instant, fx: &mut Effects) {
        while let Some((seq, held, verdict)) = self.tracker.pop_ready() {
            if verdict == Verdict::Stale {
                self.stale_batch(now, seq, fx);
                continue;
            }
            if let Verdict::Restart { last } = verdict {
                // Released from the window, yet its event ids do not run on from the batch
                // before it: another run of the publisher.
                self.counters.restarts += 1;
                fx.push(Effect::Restart {
                    last,
                    received: seq,
                });
                self.begin_stream(now, seq, fx);
                self.forget(now, ClearReason::Restart, fx);
            } else if self.tracker.last_applied().is_none() {
                self.begin_stream(now, seq, fx);
            }
            let batch = held.decode();
            let fp = Fingerprint::of(&batch);
            self.check_proof(now, seq, fp, fx);
            self.apply_batch(now, held.arrived, &batch, fp, held.payload.len(), fx);
            self.tracker.applied(seq, fp);
        }
    }

    /// Skips an old batch that is no copy of one applied ([`Verdict::Stale`]): late, or from a
    /// restarted publisher whose clock went back. Whatever the index holds (a snapshot, say)
    /// may be contradicted by it: forget, and fetch again (the keys live batches stored after a
    /// fetch's key list was read come back only so). With the index empty there is nothing to
    /// contradict: a restarted master whose clock is behind costs one fetch, not one a batch.
    fn stale_batch(&mut self, now: Instant, seq: Seq, fx: &mut Effects) {
        self.counters.late += 1;
        fx.push(Effect::Late { seq });
        if self.index.object_count() > 0 || self.proof.is_some() || self.anchor.is_some() {
            self.forget(now, ClearReason::StaleBatch, fx);
        }
    }

    /// Checks a live batch about to apply against the pending status point of the last
    /// snapshot, and records it for the status point of the snapshot being fetched. A batch that
    /// contradicts the point starts the stream anew: the index forgets first.
    fn check_proof(&mut self, now: Instant, seq: Seq, fp: Fingerprint, fx: &mut Effects) {
        let (first, last) = (fp.first_event_id(), fp.last_event_id());
        if let Some(proof) = &mut self.proof {
            match proof.check(seq, first, last) {
                ProofCheck::Proven => self.proof = None,
                ProofCheck::Pending => {
                    if proof.deadline.is_none() {
                        let timeout = self
                            .config
                            .resync
                            .map_or(Duration::ZERO, |r| r.fetch_timeout);
                        proof.deadline = Some(now + timeout);
                    }
                }
                ProofCheck::Broken => {
                    self.counters.restarts += 1;
                    self.counters.run_mismatches += 1;
                    self.reset_stream();
                    self.begin_stream(now, seq, fx);
                    self.forget(now, ClearReason::Restart, fx);
                }
            }
        }
        if let Resync::Fetching { since, .. } = &mut self.resync {
            since.push((seq, first, last));
        }
    }

    /// Reports whether the last snapshot is not yet proven to be of the stream's run while the
    /// stream has begun short of its status point: queries miss then.
    fn is_unproven(&self) -> bool {
        self.proof.is_some_and(|p| p.deadline.is_some())
    }

    /// Applies a live batch's events; `arrived` is when the session received it. An event that
    /// may have removed objects it does not name forgets once the whole batch is applied, and
    /// the batch then counts as seen by the resync that starts (not as a live batch of it).
    fn apply_batch(
        &mut self,
        now: Instant,
        arrived: Instant,
        batch: &Batch<'_>,
        fp: Fingerprint,
        payload_len: usize,
        fx: &mut Effects,
    ) {
        self.note_evidence(arrived);
        let mut lossy = false;
        for event in &batch.events {
            let tenant = event.tenant_id.unwrap_or(DEFAULT_TENANT);
            match (event.kind, event.object_key) {
                (EventKind::Stored, Some(key)) => {
                    self.counters.stored += 1;
                    let _ = self.index.store(tenant, key, event.group_id, event.medium);
                }
                (EventKind::Stored, None) => self.counters.stored_without_key += 1,
                (EventKind::Removed, Some(key)) => {
                    // One medium only; the object misses until its other medium is proven.
                    self.counters.removed += 1;
                    let _ = self.index.remove_replica(tenant, key, event.medium);
                }
                (EventKind::Removed, None) => {
                    self.counters.unreadable_removals += 1;
                    lossy = true;
                }
                (EventKind::Cleared, _) => {
                    self.counters.publisher_clears += 1;
                    let (pages, objects) = match event.tenant_id {
                        Some(t) => self.index.clear_tenant(t),
                        None => self.index.clear(),
                    };
                    fx.push(Effect::Cleared {
                        reason: ClearReason::PublisherCleared,
                        pages,
                        objects,
                    });
                }
                (EventKind::Unknown, Some(key)) => {
                    // An event this decoder does not know may mean the object went: doubt is a
                    // miss, so the object it names is taken as absent.
                    self.counters.unknown_events += 1;
                    let _ = self.index.remove(tenant, key);
                }
                (EventKind::Unknown, None) => {
                    // An unknown event that names no object may remove any number of them (a
                    // future tenant-wide removal, say): read it as the widest removal.
                    self.counters.unknown_events += 1;
                    self.counters.unreadable_removals += 1;
                    lossy = true;
                }
            }
            if tenant == DEFAULT_TENANT {
                if let Resync::Fetching { seen, cleared, .. } = &mut self.resync {
                    match (event.kind, event.object_key) {
                        (EventKind::Stored, Some(key)) => {
                            seen.entry(key_checksum(key)).or_insert(true);
                        }
                        (EventKind::Removed | EventKind::Unknown, Some(key)) => {
                            seen.insert(key_checksum(key), false);
                        }
                        (EventKind::Cleared, _) => *cleared = true,
                        _ => {}
                    }
                }
            }
        }
        self.counters.batches += 1;
        self.counters.events += batch.events.len() as u64;
        if lossy {
            self.forget(now, ClearReason::UnreadableRemoval, fx);
            // The resync this starts reads the key list after this batch: it is where the
            // stream stood then.
            if let Resync::Fetching { since, .. } = &mut self.resync {
                since.push((batch.seq, fp.first_event_id(), fp.last_event_id()));
            }
        } else {
            self.count_for_resync(now, payload_len, fx);
        }
        self.emit_deltas(fx);
    }

    /// Counts a live batch applied while a snapshot is fetched; too many fail the resync.
    fn count_for_resync(&mut self, now: Instant, payload_len: usize, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        let Resync::Fetching { batches, bytes, .. } = &mut self.resync else {
            return;
        };
        if *batches >= limits.max_buffered_batches
            || *bytes + payload_len > limits.max_buffered_bytes
        {
            self.resync_failed(now, ResyncFailure::BufferFull, fx);
            return;
        }
        *bytes += payload_len;
        *batches += 1;
    }

    fn emit_deltas(&mut self, fx: &mut Effects) {
        if !self.config.page_deltas {
            return;
        }
        let deltas: Vec<_> = self.index.drain_deltas().collect();
        for d in deltas {
            let (tenant, prefix) = self
                .index
                .namespace(d.namespace)
                .expect("deltas name live namespaces");
            fx.push(Effect::Page {
                tenant: tenant.into(),
                prefix: prefix.map(String::from),
                page: d.page,
                complete: d.complete,
            });
        }
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
        fx.push(Effect::Cleared {
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

    fn reorder_loss(&mut self, now: Instant, loss: Loss, fx: &mut Effects) {
        self.note_gap(loss.expected, loss.resumed, fx);
        self.forget(now, ClearReason::Gap, fx);
        self.drain_held(now, fx);
    }

    /// Counts and reports a gap from `expected` to `received`.
    fn note_gap(&mut self, expected: Seq, received: Seq, fx: &mut Effects) {
        self.counters.gaps += 1;
        self.counters.missing_sequences += received.0.saturating_sub(expected.0);
        fx.push(Effect::Gap { expected, received });
    }

    /// Records that a stream begins at `seq`: the batch about to apply is a baseline. A snapshot
    /// applied before the stream began holds only if the stream begins at or before its anchor.
    fn begin_stream(&mut self, now: Instant, seq: Seq, fx: &mut Effects) {
        self.stream_start = Some(seq);
        if let Some(max_first) = self.anchor.take() {
            if seq > max_first {
                self.counters.unanchored_snapshots += 1;
                self.note_gap(max_first, seq, fx);
                self.forget(now, ClearReason::Gap, fx);
            }
        }
    }

    /// Forgets the stream's continuity: the next batch is a silent baseline.
    fn reset_stream(&mut self) {
        self.tracker.reset();
        self.stream_start = None;
        self.anchor = None;
        self.proof = None;
    }

    fn start_resync(&mut self, now: Instant, fx: &mut Effects) {
        let Some(limits) = self.config.resync else {
            return;
        };
        let request = self.next_request;
        self.next_request += 1;
        self.counters.resyncs_started += 1;
        // A snapshot only adds: objects held already stay as confirmed as they were.
        let confirms = if self.index.object_count() == 0 {
            now
        } else {
            self.confirmed_at.min(now)
        };
        self.resync = Resync::Fetching {
            request,
            deadline: now + limits.fetch_timeout,
            asked_at: now,
            confirms,
            batches: 0,
            bytes: 0,
            stream_at_request: self.stream_start,
            applied: None,
            seen: BTreeMap::new(),
            cleared: false,
            before: self
                .tracker
                .last_applied()
                .map(|seq| (seq, self.tracker.last_event_id())),
            since: Vec::new(),
            lines: LineFilter::default(),
        };
        fx.push(Effect::FetchSnapshot { request });
    }

    fn resync_failed(&mut self, now: Instant, reason: ResyncFailure, fx: &mut Effects) {
        let retry = self
            .config
            .resync
            .map_or(Duration::from_secs(1), |r| r.retry_after);
        self.counters.resyncs_failed += 1;
        self.resync = Resync::Waiting {
            retry_at: now + retry,
        };
        fx.push(Effect::ResyncFailed { reason });
    }

    fn schedule_verify(&mut self, now: Instant) {
        self.verify.next_at = self.config.verify.map(|v| now + v.interval);
    }

    fn start_verify(&mut self, now: Instant, fx: &mut Effects) {
        let Some(v) = self.config.verify else { return };
        if self.health != Health::Live {
            self.schedule_verify(now);
            return;
        }
        let mut keys = Vec::new();
        // Suspects first: each is a page that misses until its answer comes back.
        self.index
            .sample_suspects(DEFAULT_TENANT, v.sample, &mut keys);
        let sampled = self.index.sample_keys(DEFAULT_TENANT, v.sample, &mut keys);
        if keys.is_empty() {
            // No default-tenant object at all: nothing for a sweep to confirm.
            self.verify.sweep = None;
            self.schedule_verify(now);
            return;
        }
        if sampled.began_sweep && self.verify.sweep.is_none() {
            self.verify.sweep = Some(Sweep {
                began: now,
                other_tenants: false,
            });
        }
        let request = self.next_request;
        self.next_request += 1;
        self.verify.next_at = None;
        self.verify.in_flight = Some(Round {
            request,
            stamp: sampled.stamp,
            deadline: now + v.timeout,
            keys: keys.len(),
            checksum: keys
                .iter()
                .fold(0u64, |sum, k| sum.wrapping_add(key_checksum(k))),
            ended_sweep: sampled.ended_sweep,
            began_next: sampled.began_next,
            other_tenants: sampled.other_tenants,
            sampled_at: now,
        });
        fx.push(Effect::VerifyKeys { request, keys });
    }

    /// Accounts an answered round to the sweep: a round answered only in part breaks it; a
    /// round that ends a sweep all of whose rounds were answered in full confirms the index as
    /// of the sweep's first round, unless its rounds passed objects of a tenant verification
    /// does not sample (objects of any tenant stored since the sweep began are confirmed by
    /// their own events).
    fn end_round(&mut self, round: &Round, full: bool) {
        if !full {
            self.verify.sweep = None;
            return;
        }
        if !round.ended_sweep {
            if let Some(sweep) = &mut self.verify.sweep {
                sweep.other_tenants |= round.other_tenants;
            }
            return;
        }
        if let Some(sweep) = self.verify.sweep {
            if !(sweep.other_tenants || round.other_tenants) {
                self.confirm(sweep.began);
            }
        }
        // The next sweep began in this round, or begins with the next one. Whether the other
        // tenant's page was before or after the wrap is not known: count it for both.
        self.verify.sweep = round.began_next.then_some(Sweep {
            began: round.sampled_at,
            other_tenants: round.other_tenants,
        });
    }

    /// Records that objects the master held at `at` join the index: the index's confirmation,
    /// and every confirmation pending (resync, sweep, round), is no later than `at`.
    fn note_evidence(&mut self, at: Instant) {
        self.confirmed_at = if self.index.object_count() == 0 {
            // Nothing older is left: the new objects set the figure, capped by what is pending.
            self.before_pending(at)
        } else {
            self.confirmed_at.min(at)
        };
        if let Some(sweep) = &mut self.verify.sweep {
            sweep.began = sweep.began.min(at);
        }
        if let Some(round) = &mut self.verify.in_flight {
            round.sampled_at = round.sampled_at.min(at);
        }
        if let Resync::Fetching { confirms, .. } = &mut self.resync {
            *confirms = (*confirms).min(at);
        }
    }

    /// Moves the index's confirmation forward to `at`, when every object it holds is known to
    /// have been present at the master at or after `at`.
    fn confirm(&mut self, at: Instant) {
        self.confirmed_at = self.confirmed_at.max(self.before_pending(at));
    }

    /// Returns `at`, or the oldest evidence still waiting to join the index if that is earlier
    /// (a held batch's arrival, the snapshot being fetched): the confirmation is not moved past
    /// what they will add, so that it does not move back when they do.
    fn before_pending(&self, at: Instant) -> Instant {
        let held = self.tracker.held_since().unwrap_or(at);
        let snapshot = match &self.resync {
            Resync::Fetching { asked_at, .. } => *asked_at,
            _ => at,
        };
        at.min(held).min(snapshot)
    }

    /// Notes the time an input carried.
    fn see(&mut self, now: Instant) {
        self.latest = self.latest.max(now);
    }

    fn connect(&mut self, now: Instant, fx: &mut Effects) {
        let Some(endpoint) = self.endpoint.clone() else {
            self.link = Link::Down { retry_at: None };
            return;
        };
        self.counters.connects += 1;
        self.link = Link::Connecting {
            deadline: now + self.config.backoff.connect_timeout,
        };
        fx.push(Effect::Connect { endpoint });
    }

    fn link_up(&mut self, now: Instant, fx: &mut Effects) {
        if matches!(self.link, Link::Up { .. }) {
            return;
        }
        self.link = Link::Up { since: now };
        // A new connection is a new stream: whatever was applied before it (batches that arrived
        // while the link was down) must not be continued by the next batch's silent baseline.
        let had_stream = self.tracker.last_applied().is_some() || self.index.page_count() > 0;
        self.reset_stream();
        if had_stream {
            self.forget(now, ClearReason::Reconnected, fx);
        }
        self.start_resync(now, fx);
        if self.config.resync.is_none() {
            self.schedule_verify(now);
        }
    }

    /// The connection is gone (or never came): forget, and schedule a reconnect with backoff.
    fn link_lost(&mut self, now: Instant, fx: &mut Effects) {
        if let Link::Up { since } = self.link {
            if now.saturating_duration_since(since) >= self.config.backoff.reset_after {
                self.attempts = 0;
            }
        }
        self.counters.disconnects += 1;
        self.link = Link::Down { retry_at: None };
        self.reset_stream();
        self.verify = Verify::idle();
        self.forget(now, ClearReason::Disconnected, fx);
        let delay = self.backoff_delay();
        let retry_at = self.endpoint.as_ref().map(|_| now + delay);
        if let Some(at) = retry_at {
            fx.push(Effect::ReconnectScheduled {
                at,
                attempt: self.attempts,
            });
        }
        self.attempts = self.attempts.saturating_add(1);
        self.link = Link::Down { retry_at };
    }

    /// The next backoff delay: `initial * 2^attempts` capped at `max`, then a uniformly random
    /// point in its upper half (jitter from the seeded generator).
    fn backoff_delay(&mut self) -> Duration {
        let b = self.config.backoff;
        let exp = b.initial.saturating_mul(1u32 << self.attempts.min(20));
        let full = exp.min(b.max);
        let nanos = u64::try_from(full.as_nanos()).unwrap_or(u64::MAX);
        let half = nanos / 2;
        let jitter = if half == 0 {
            0
        } else {
            self.next_random() % (half + 1)
        };
        Duration::from_nanos(half + jitter)
    }

    /// SplitMix64.
    fn next_random(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn note_layout(&mut self, worker: &str, model: &str, layout: &Layout, fx: &mut Effects) {
        if self
            .config
            .layouts
            .iter()
            .any(|ml| ml.model.as_deref() == Some(model))
            || layout.validate().is_err()
        {
            return;
        }
        match self.advertised_layouts.get(model) {
            Some(known) if known != layout => {
                fx.push(Effect::LayoutDisagreement {
                    model: model.into(),
                    worker: worker.into(),
                });
            }
            Some(_) => {}
            None => {
                self.advertised_layouts.insert(model.into(), layout.clone());
                if self.config.page_deltas {
                    self.index.watch_layout(layout);
                }
            }
        }
    }

    fn choose_endpoint(&mut self, now: Instant, fx: &mut Effects) {
        if self.config.endpoint.is_some() || self.leader.is_some() {
            return;
        }
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for info in self.workers.values() {
            if let Some(e) = info.event_endpoint.as_deref() {
                *votes.entry(e).or_default() += 1;
            }
        }
        let current = self.endpoint.as_deref();
        let chosen = match current {
            Some(c) if votes.contains_key(c) => Some(c),
            _ => votes
                .iter()
                .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
                .map(|(e, _)| *e),
        };
        let Some(chosen) = chosen.map(String::from) else {
            return;
        };
        if votes.len() > 1 {
            fx.push(Effect::EndpointDisagreement {
                kept: chosen.clone(),
                distinct: votes.len(),
            });
        }
        if current == Some(chosen.as_str()) {
            return;
        }
        let had = self.endpoint.replace(chosen);
        if had.is_some() {
            fx.push(Effect::Disconnect);
            self.reset_stream();
            self.forget(now, ClearReason::EndpointChanged, fx);
            self.resync = Resync::Idle;
            self.verify = Verify::idle();
        }
        self.attempts = 0;
        self.connect(now, fx);
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
            fx.push(Effect::HealthChanged {
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
    }
}

/// Applies one key of a snapshot unless a live batch since the fetch decided its state: removed
/// (or cleared) keys stay out, stored ones are in already.
fn store_snapshot_key(
    index: &mut Index,
    seen: &BTreeMap<u64, bool>,
    cleared: bool,
    applied: &mut usize,
    key: &str,
) {
    if cleared || seen.contains_key(&key_checksum(key)) {
        return;
    }
    let _ = index.store(DEFAULT_TENANT, key, None, None);
    *applied += 1;
}

/// An order-independent checksum term of one key (FNV-1a, then mixed): a round's answer names
/// every key asked about, each once, when the sums of the terms agree (and the counts).
fn key_checksum(key: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}
