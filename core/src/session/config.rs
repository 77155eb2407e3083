//! What a session is configured with: endpoint, layouts, limits, backoff, resync, verification.

use alloc::string::String;
use alloc::vec::Vec;
use core::time::Duration;

use crate::index::IndexConfig;
use crate::layout::ModelLayout;
use crate::leader::LeaderConfig;
use crate::sequence::ReorderConfig;

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
    /// How long the stream stays quiet (no batch) before the master's `/kv_events/status` is
    /// read to check it (rule R11 of [`crate::sequence`]): a tail lost after the last batch,
    /// or a restart after which nothing came, is found within about twice this. `None`: never.
    pub status_check: Option<Duration>,
    /// How often the master's own signals ([`crate::signals`]: its `/metrics`) are read while
    /// connected, so that objects it stops listing without an event are no longer claimed
    /// within about this plus the time to read and apply its key list. `None`: never (the
    /// core's default: a session asks only what its driver was configured for; the driver's
    /// `with_master_http` and `hicache-index serve` turn it on at
    /// [`crate::signals::DEFAULT_STORE_WATCH`]).
    pub store_watch: Option<Duration>,
}

impl Default for ResyncConfig {
    fn default() -> Self {
        ResyncConfig {
            max_buffered_batches: 65_536,
            max_buffered_bytes: 256 << 20,
            fetch_timeout: Duration::from_secs(10),
            retry_after: Duration::from_secs(1),
            status_check: Some(Duration::from_secs(1)),
            store_watch: None,
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
    /// The least time between two escalations. A round that removes a stale key (absent at the
    /// master, and changed by no event since it was sampled) escalates: it asks for a
    /// reconcile with the master's key list ([`crate::Health::Reconciling`]; with resync on,
    /// without it, it only removes what it sampled), since an
    /// object gone without an event means the master dropped others silently too (a client's
    /// segment went away) and the keys the round did not sample are as doubtful. Within this
    /// time of the last escalation a round only removes the keys it sampled
    /// ([`crate::Counters::stale_escalations_held`] counts it), and the first round due once
    /// this time has passed escalates instead of sampling, unless a clear came meanwhile.
    ///
    /// The default, 30 s, is six rounds at the default interval: silent losses cost at most one
    /// key-list fetch every 30 s however often a
    /// master drops objects, and a loss found stays claimed for at most about that long plus
    /// one interval. `Duration::ZERO`: every such round escalates.
    pub escalate_every: Duration,
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            interval: Duration::from_secs(5),
            sample: 1024,
            timeout: Duration::from_secs(5),
            escalate_every: Duration::from_secs(30),
        }
    }
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
    /// Emit [`Report::Page`](crate::effect::Report::Page) for pages that become complete or
    /// incomplete under the layouts.
    pub page_deltas: bool,
    /// Seeds the backoff jitter and the index's hashing.
    pub seed: u64,
    /// Follow the leader of a Mooncake HA cluster (see [`crate::leader`]); `endpoint` is then a
    /// template whose host is replaced by the leader's, and nothing connects until
    /// [`Input::LeaderView`](crate::input::Input::LeaderView) names a leader that serves. `None`:
    /// one fixed master.
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
