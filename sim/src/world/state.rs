//! The state of a run: [`World`] and its [`Phase`]. Its methods live by what they do (see the
//! module docs of [`crate::world`]).

use std::collections::BTreeMap;
use std::time::Duration;

use hicache_index::{Instant, PageHash};

use crate::master::{Master, MasterOutput};
use crate::models::ModelSpec;
use crate::network::Network;
use crate::options::{HttpOptions, Options};
use crate::oracle::Oracle;
use crate::rng::Rng;
use crate::system::System;
use crate::util::Transcript;

use super::driver::Driver;
use super::http_item::HttpItem;
use super::pools::PoolPlan;
use super::report::{Failure, RunStats};

/// Where a run stands: its phase (see the module docs of [`crate::world`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(super) enum Phase {
    Chaos,
    Quiet { until: Instant },
    Settle { until: Instant },
    Scripted,
    Done,
}

/// A world around the system under test `S` (see the module docs).
pub struct World<S: System> {
    pub(super) opts: Options,
    pub(super) now: Instant,
    pub(super) phase: Phase,
    pub(super) master: Master,
    pub(super) net: Network,
    pub(super) oracle: Oracle,
    pub(super) sut: S,
    pub(super) models: Vec<ModelSpec>,
    pub(super) plans: Vec<Vec<PoolPlan>>,
    pub(super) http_opts: HttpOptions,
    pub(super) http: BTreeMap<(Instant, u64), HttpItem>,
    pub(super) http_counter: u64,
    pub(super) http_rng: Rng,
    pub(super) query_rng: Rng,
    pub(super) other_rng: Rng,
    /// Per sequence, the epoch and first and last positions of the batch fed under it.
    pub(super) fed: Vec<(u32, u64, u64)>,
    pub(super) applied_pos: u64,
    /// A clear happened and no batch has applied since: the next batch applied is the stream's
    /// new baseline, and what was published before it is as lost as what came before the
    /// clear (a batch older than the baseline that arrives after it can only be skipped).
    pub(super) baseline_pending: bool,
    pub(super) snapshots: Vec<u64>,
    /// The key list's position of the snapshot that placed the stream, until its resync ends.
    pub(super) placed_snapshot: Option<u64>,
    /// The newest history position of a master message handed to the session.
    pub(super) handed_upto: u64,
    pub(super) p_loss: u64,
    pub(super) next_stray: Option<Instant>,
    pub(super) next_junk: Option<Instant>,
    pub(super) next_clear: Option<Instant>,
    pub(super) stray_seq: u64,
    pub(super) transcript: Transcript,
    pub(super) stats: RunStats,
    pub(super) failures: Vec<Failure>,
    pub(super) out: MasterOutput,
    pub(super) hashes: Vec<PageHash>,
    pub(super) map: Vec<bool>,
    pub(super) text: String,
    pub(super) same_time_steps: u64,
    pub(super) spins: u32,
    pub(super) trace: bool,
    pub(super) settle_cap: Instant,
    pub(super) settle_keys: u64,
    pub(super) verified_at_settle: u64,
    /// The time of each history position, in position order.
    pub(super) record_times: Vec<(u64, Instant)>,
    /// The longest a delivered message's oldest event had existed when it arrived.
    pub(super) evidence_lag: Duration,
    /// What is handed to the session when, and what is still pending for it.
    pub(super) driver: Driver,
    /// The horizon the current query is judged against.
    pub(super) judge: Option<u64>,
    /// A restart the HTTP side scheduled (see [`HttpOptions::restart_after_keys`]).
    pub(super) restart_at: Option<Instant>,
    /// A publisher's clear the HTTP side scheduled (see [`HttpOptions::clear_after_keys`]).
    pub(super) clear_at: Option<Instant>,
    /// Until when `POST /batch_query_keys` fails every request (see
    /// [`HttpOptions::query_keys_down`]).
    pub(super) query_keys_down_until: Instant,
    /// When the session was last handed a timer (see `World::timer_due`).
    pub(super) last_timer: Instant,
    /// Why the session said it is recovering, last (until it is no longer recovering).
    pub(super) recovering: Option<hicache_index::Recovering>,
    /// Draws of the named worlds that the world makes itself (restarts the transport sees).
    pub(super) world_rng: Rng,
    /// Messages still to lose at the tail of the final burst ([`Options::tail`]).
    pub(super) tail_lose: u32,
    /// Since when the master has been idle and reachable (see the module docs).
    pub(super) idle_since: Option<Instant>,
    /// The check of the idle master was made.
    pub(super) idle_checked: bool,
    /// When the session last asked for a snapshot, and was last handed a master message.
    pub(super) last_fetch_at: Option<Instant>,
    pub(super) last_handed_at: Option<Instant>,
    /// When the session was last given a reason to forget that a correct session must follow:
    /// a connection, a message revealing a loss or a restart, stale keys found by
    /// verification, an unreadable removal, a clear the driver asked for.
    pub(super) last_forced_at: Option<Instant>,
    pub(super) stale_keys_seen: u64,
    /// When the quiet phase began (the HTTP side's faults stopped).
    pub(super) quiet_since: Option<Instant>,
    /// The master's signals as last answered to the session.
    pub(super) signals_answered: Option<hicache_index::StoreSignals>,
}
